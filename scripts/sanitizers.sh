#!/usr/bin/env bash
# AddressSanitizer and ThreadSanitizer (nightly) over the engine, store, index and mem tests.
#   bash scripts/sanitizers.sh [address|thread|all] [--quick]
# --quick runs a short subset (what CI runs). Sanitizers need a nightly toolchain with
# rust-src (installed here if missing) and rebuild the standard library (-Zbuild-std).
set -euo pipefail
cd "$(dirname "$0")/.."
which=${1:-all}
quick=${2:-}
target=$(rustc -vV | sed -n 's/^host: //p')
rustup +nightly component add rust-src >/dev/null 2>&1 || true
# PoCL and the ICD loader are not instrumented (ASan trips over their allocations): the
# sanitized runs use the CPU backend only; the OpenCL backend has its differential tests.
unset HKV_REQUIRE_OPENCL
export OCL_ICD_VENDORS=$(mktemp -d)
crates=(-p hkv-mem -p hkv-store -p hkv-index -p hkv-engine)
filter=()
if [ "$quick" = "--quick" ]; then
  # One of each: the arena, the store, the index model, delayed writes.
  crates=(-p hkv-mem -p hkv-store -p hkv-engine)
  filter=()
fi
run() {
  local san=$1
  echo "== ${san}Sanitizer"
  # Property tests run many cases; fewer under a sanitizer keep it within minutes.
  PROPTEST_CASES=${PROPTEST_CASES:-16} \
  RUSTFLAGS="-Zsanitizer=$san" RUSTDOCFLAGS="-Zsanitizer=$san" \
    cargo +nightly test -Zbuild-std --target "$target" --target-dir target/san-"$san" \
      "${crates[@]}" --lib --tests "${filter[@]}"
}
case $which in
  address) run address ;;
  thread) run thread ;;
  all) run address; run thread ;;
  *) echo "usage: $0 [address|thread|all] [--quick]" >&2; exit 2 ;;
esac

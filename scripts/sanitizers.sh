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
export POCL_CACHE_DIR=${POCL_CACHE_DIR:-$(mktemp -d)}
crates=(-p hkv-mem -p hkv-store -p hkv-index -p hkv-engine)
filter=()
if [ "$quick" = "--quick" ]; then
  # One of each: the arena, the store, the index model, delayed writes.
  crates=(-p hkv-mem -p hkv-store -p hkv-engine)
  filter=(-- --skip opencl)
fi
run() {
  local san=$1
  echo "== ${san}Sanitizer"
  # Property tests run many cases; fewer under a sanitizer keep it within minutes.
  PROPTEST_CASES=${PROPTEST_CASES:-16} \
  RUSTFLAGS="-Zsanitizer=$san" RUSTDOCFLAGS="-Zsanitizer=$san" \
  TSAN_OPTIONS="suppressions=$PWD/scripts/tsan.supp" \
    cargo +nightly test -Zbuild-std --target "$target" --target-dir target/san-"$san" \
      "${crates[@]}" --lib --tests "${filter[@]}"
}
case $which in
  address) run address ;;
  thread) run thread ;;
  all) run address; run thread ;;
  *) echo "usage: $0 [address|thread|all] [--quick]" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# Runs every test hkv has, installing what they need first. This is what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never

step() { printf '\n== %s\n' "$*"; }

step "toolchain"
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo not found: install Rust with rustup (https://rustup.rs) first" >&2
  exit 1
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true
cargo --version

step "format"
cargo fmt --all -- --check

step "lint"
cargo clippy --workspace --all-targets --locked -- -D warnings

results=$(mktemp)
trap 'rm -f "$results"' EXIT

step "unit, integration and property tests"
cargo test --workspace --locked 2>&1 | tee -a "$results"

step "unsafe code under Miri"
# The arena is the one place with unsafe code; Miri checks its carving and slice handling.
if rustup +nightly component add miri rust-src >/dev/null 2>&1; then
  MIRIFLAGS="-Zmiri-disable-isolation" cargo +nightly miri test -p hkv-mem --locked 2>&1 | tee -a "$results"
else
  echo "Miri is not available here (no nightly toolchain with the miri component); skipped"
fi

step "engine benchmark smoke run"
# Proves the benchmark runs end to end (small data set; real figures: docs/BENCHMARKS.md).
cargo run --release --locked -p hkv-bench -- engine --dataset k8 --keys 200000 \
  --queries 200000 --runs 1 --threads 1,2 --workload a,b,c --dist uniform,zipf

step "summary"
read -r passed failed < <(awk '/^test result:/ {
  for (i = 1; i <= NF; i++) { if ($i ~ /^passed/) p += $(i-1); if ($i ~ /^failed/) f += $(i-1) }
} END { print p + 0, f + 0 }' "$results")
echo "tests: ${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ]

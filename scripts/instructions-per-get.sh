#!/usr/bin/env bash
# Instructions per GET through the engine (no network), counted by valgrind's callgrind: the
# same for the same build whatever else the machine is doing, so it shows what a change to
# the read path saves where wall-clock rates are too noisy to tell (docs/BENCHMARKS.md).
# Only the benchmark's engine runs are counted (the GET path and YCSB-C, QUERIES GETs each,
# over 2,000 keys, all in cache), not the preload or the other measurements.
#
#   bash scripts/instructions-per-get.sh [HKV_BENCH_BINARY] [QUERIES]
#
# Needs valgrind (Debian: valgrind) and a release build of hkv-bench. KEEP=FILE keeps the profile.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/hkv-bench}
queries=${2:-400000}
out=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] && cp "$out/cg.out" "$KEEP"; rm -rf "$out"' EXIT
valgrind --tool=callgrind --toggle-collect='*engine_mix*' --callgrind-out-file="$out/cg.out" \
  "$bin" engine --dataset k8 --keys 2000 --workload c --dist uniform --queries "$queries" \
  --runs 1 --no-hashbrown >/dev/null 2>"$out/log"
total=$(awk '/^(summary|totals):/ {print $2; exit}' "$out/cg.out")
awk -v t="$total" -v q="$queries" -v b="$bin" \
  'BEGIN { printf "%s: %d GETs, %d instructions, %.0f per GET\n", b, 2 * q, t, t / (2 * q) }'

#!/usr/bin/env bash
# Runs every cargo-fuzz target for a given time each, keeping (and growing) its corpus under
# fuzz/corpus/<target>, and appends what ran to fuzz/fuzz-log.tsv so the cumulative time per
# target can be read back (docs/reliability.md quotes it): wall seconds, and the CPU seconds
# the fuzzer really got.
#   bash scripts/fuzz-long.sh [SECONDS_PER_TARGET] [TARGET...]   (default 3600, all targets)
#   JOBS=N runs N fuzzing processes per target (default 1).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds=${1:-3600}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(text meta binary udp server)
jobs=${JOBS:-1}
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
log=fuzz-log.tsv
[ -f "$log" ] || printf 'date\ttarget\tseconds\tjobs\tcpu_seconds\tresult\n' >"$log"
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  # Built first, so the CPU time measured below is fuzzing only.
  cargo +nightly fuzz build "$t" >"fuzz-$t.out" 2>&1
  start=$(date +%s)
  cpu=$(mktemp)
  # CPU seconds actually used (user + system of the fuzzer and its workers), not wall time x
  # jobs: on a shared machine the fuzzer does not always get its cores.
  if { TIMEFORMAT='%U %S'; time cargo +nightly fuzz run "$t" "corpus/$t" -- \
      -dict=dict/memcache.dict -max_total_time="$seconds" -jobs="$jobs" -workers="$jobs" \
      -print_final_stats=1 >>"fuzz-$t.out" 2>&1; } 2>"$cpu"; then
    result=ok
  else
    result="FAILED (see fuzz/fuzz-$t.out and fuzz/artifacts/$t)"
  fi
  took=$(( $(date +%s) - start ))
  used=$(awk '{ printf "%d", $1 + $2 }' "$cpu")
  rm -f "$cpu"
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$t" "$took" "$jobs" \
    "$used" "$result" >>"$log"
  echo "$t: $result after ${took}s x $jobs job(s)"
done
echo "cumulative CPU seconds per target:"
awk -F'\t' 'NR > 1 { s[$2] += $5 } END { for (t in s) printf "  %s %d\n", t, s[t] }' "$log"

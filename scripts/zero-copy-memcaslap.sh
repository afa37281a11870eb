#!/bin/bash
# Values sent from item memory, measured with a load generator not written here (issue 15,
# docs/BENCHMARKS.md "Replies without copying values"): memcaslap (libmemcached-tools) over
# TCP, 8 connections, its default mix (90% GET; each SET a new key), one value size at a
# time, against hkv (default --zero-copy-min), hkv copying (--zero-copy-min 0) and memcached,
# 2 worker threads each, the order rotated every round. -m 256 so a 3 s warm-up run fills
# the memory (first touches of fresh memory are not measured), then a 4 s measured run on
# the same server. Prints: value bytes, server, ops/s, server CPU ns per op.
#   bash scripts/zero-copy-memcaslap.sh            (SIZES="16384 65536 262144" by default)
set -u
HKV=${HKV:-$(cd "$(dirname "$0")/.." && pwd)/target/release/hkv}
run() { # server size
  P=$((20000 + RANDOM % 20000))
  case $1 in
    memcached) memcached -u root -l 127.0.0.1 -p $P -U 0 -t 2 -m 256 -I 1m & ;;
    hkv-copy) "$HKV" -l 127.0.0.1 -p $P -U 0 -t 2 -m 256 -I 1m --zero-copy-min 0 >/dev/null 2>&1 & ;;
    hkv) "$HKV" -l 127.0.0.1 -p $P -U 0 -t 2 -m 256 -I 1m >/dev/null 2>&1 & ;;
  esac
  PID=$!; sleep 0.4
  memcaslap -s 127.0.0.1:$P -t 3s -c 8 -T 1 -X $2 >/dev/null 2>&1
  c0=$(awk '{print $14+$15}' /proc/$PID/stat)
  out=$(memcaslap -s 127.0.0.1:$P -t 4s -c 8 -T 1 -X $2 2>&1)
  c1=$(awk '{print $14+$15}' /proc/$PID/stat)
  kill $PID; wait $PID 2>/dev/null
  echo "$out" | grep -E "Run time" | tail -1 | awk -v s=$1 -v z=$2 -v c=$((c1-c0)) '{for(i=1;i<=NF;i++){if($i=="Ops:")o=$(i+1); if($i=="TPS:")t=$(i+1)}; printf "%s %s %s %.1f\n", z, s, t, c*10000000/o}'
}
for size in ${SIZES:-16384 65536 262144}; do
  for r in 1 2 3; do
    order=(hkv hkv-copy memcached)
    for k in 0 1 2; do run ${order[$(( (k + r) % 3 ))]} $size; done
  done
done

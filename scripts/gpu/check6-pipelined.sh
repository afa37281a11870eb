#!/bin/bash
# GPU-host check 6 (2026-11-27): pipelined throughput and CPU per op, hkv against memcached
# (binary protocol, both with the same worker threads), with enough load-generator threads
# that the client is not what limits: check 5 found the two level at 4 worker threads with an
# 8-thread client. scripts/cpu-split.py interleaves the two servers round by round.
exec > >(tee -a "$OUT/log.txt") 2>&1
D=$PWD/.dev
export PYTHONUNBUFFERED=1
mkdir -p target/release && cp $D/hkv $D/hkv-bench target/release/
. scripts/gpu/carried-tools.sh
nproc
for cfg in "4 12 24" "2 8 16"; do
  set -- $cfg
  echo "=== -t $1, client $2 threads x $3 conns x 16 deep, binary, K16 95% GET Zipf (t=${SECONDS}s)"
  timeout 70 python3 scripts/cpu-split.py --a "target/release/hkv -t $1 -m 1024 -U 0" \
    --b "memcached -u root -U 0 -t $1 -m 1024 -c 4096" --protocol binary --rounds 3 --seconds 3 \
    -- --threads $2 --conns $3 --pipeline 16 | tail -6
done
echo "=== done (t=${SECONDS}s)"

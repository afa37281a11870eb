#!/bin/bash
# GPU check 4 (2026-11-27): every OpenCL test on the vendor runtime at current main; the
# OpenCL engine (auto, mirrored table) against the CPU engine after the mirror stopped delaying
# writes (85eb64d); issue 16's engine figures and issue 15's network figures (hkv against
# memcached, both carried in .dev with their libraries) on a machine with cores to spare for
# the load generators. Steps are skipped once the time budget is spent.
exec > >(tee -a "$OUT/log.txt") 2>&1
D=$PWD/.dev
BUDGET=${BUDGET:-450}
step() { echo; echo "=== $* (t=${SECONDS}s $(date +%T))"; }
left() { [ $SECONDS -lt $((BUDGET - $1)) ] || { echo "--- skipped: ${SECONDS}s used"; return 1; }; }
step setup
nvidia-smi -L; nproc; grep -m1 "model name" /proc/cpuinfo; uname -r
lib=$(ldconfig -p | awk '/libnvidia-opencl.so.1/{print $NF; exit}')
[ -z "$lib" ] && lib=$(find / -name 'libnvidia-opencl.so*' 2>/dev/null | head -1)
echo "nvidia opencl: $lib"
mkdir -p /tmp/icd && echo "$lib" > /tmp/icd/nvidia.icd
export OCL_ICD_VENDORS=/tmp/icd LD_LIBRARY_PATH=$D:$LD_LIBRARY_PATH PYTHONUNBUFFERED=1
export HKV_REQUIRE_OPENCL=1
# The server tests find hkv where cargo put it when they were built.
mkdir -p /work/main/target/release target/release
cp $D/hkv /work/main/target/release/hkv; cp $D/hkv $D/hkv-bench target/release/
for t in $D/t_*; do
  left 300 || break
  step "test $(basename $t)"
  timeout 60 $t --test-threads 8 2>&1 | grep -vE "^test .* ok$|^$" | tail -20
done
unset HKV_REQUIRE_OPENCL
for w in c b a; do
  left 60 || break
  step "OpenCL engine against CPU engine, workload $w"
  timeout 60 python3 scripts/cpu-split.py --a "target/release/hkv -t 4 -m 1024" \
    --b "target/release/hkv --engine opencl -t 4 -m 1024" --protocol binary --rounds 3 --seconds 3 \
    -- --workload $w --dataset k8 --conns 16 --pipeline 16 --threads 4 | tail -6
done
if left 30; then
  step "issue 16: engine cpu k8 10M a,c uniform threads 1"
  timeout 60 target/release/hkv-bench engine --dataset k8 --threads 1 --runs 3 --workload a,c --dist uniform
fi
. scripts/gpu/carried-tools.sh
if left 140; then
  step "issue 15: network-bench, 2 server threads, 4 client threads"
  timeout 200 python3 scripts/network-bench.py --runs 3 --seconds 2 --threads 2 --client-threads 4 \
    --servers hkv-uring,memcached
fi
step done

#!/bin/bash
# GPU check 5 (2026-11-27): delayed.rs again after its fix (it failed in check 4: it
# assumed every device delays writes, and a mirror does not); then request-response clients
# on a machine with cores to spare for the load generator: hkv with and without
# --busy-poll-us against memcached (scripts/network-bench.py), 2 and 4 server threads.
exec > >(tee -a "$OUT/log.txt") 2>&1
D=$PWD/.dev
step() { echo; echo "=== $* (t=${SECONDS}s $(date +%T))"; }
step setup
nvidia-smi -L; nproc
lib=$(ldconfig -p | awk '/libnvidia-opencl.so.1/{print $NF; exit}')
mkdir -p /tmp/icd && echo "$lib" > /tmp/icd/nvidia.icd
export OCL_ICD_VENDORS=/tmp/icd LD_LIBRARY_PATH=$D:$LD_LIBRARY_PATH PYTHONUNBUFFERED=1
mkdir -p target/release && cp $D/hkv $D/hkv-bench target/release/
step "test t_engine_delayed"
HKV_REQUIRE_OPENCL=1 timeout 60 $D/t_engine_delayed --test-threads 8 2>&1 | grep -vE "^test .* ok$|^$" | tail -20
. scripts/gpu/carried-tools.sh
step "2 server threads, 4 client threads"
timeout 150 python3 scripts/network-bench.py --runs 3 --seconds 3 --threads 2 --client-threads 4 \
  --servers hkv-uring,hkv-uring@20,hkv-uring@100,memcached --loads "unpipelined;32 conns"
step "4 server threads, 8 client threads"
timeout 110 python3 scripts/network-bench.py --runs 3 --seconds 3 --threads 4 --client-threads 8 \
  --servers hkv-uring,hkv-uring@50,memcached --loads "unpipelined;8x16, binary"
step done

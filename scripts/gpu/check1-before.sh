#!/bin/bash
# GPU check 1 (main at 630f58a, before the mirror): does hkv's OpenCL backend run on the vendor's runtime; kernels' differential
# tests; index and GET path on the GPU against the CPU; the server over the network.
exec > >(tee -a "$OUT/log.txt") 2>&1
D=$PWD/.dev
step() { echo; echo "=== $* ($(date +%T))"; }
step setup
nvidia-smi -L; nproc; uname -r; cat /etc/os-release | head -2
lib=$(ldconfig -p | awk '/libnvidia-opencl.so.1/{print $NF; exit}')
[ -z "$lib" ] && lib=$(find / -name 'libnvidia-opencl.so*' 2>/dev/null | head -1)
echo "nvidia opencl: $lib"; ls /etc/OpenCL/vendors 2>&1
mkdir -p /tmp/icd && echo "$lib" > /tmp/icd/nvidia.icd
export OCL_ICD_VENDORS=/tmp/icd LD_LIBRARY_PATH=$D:$LD_LIBRARY_PATH HKV_REQUIRE_OPENCL=1
mkdir -p /work/main/target/release && cp $D/hkv /work/main/target/release/hkv
for t in t_index_opencl t_index_model t_engine_model t_engine_placement t_engine_items_opencl t_engine_vector_opencl t_server_opencl; do
  step "test $t"
  timeout 90 $D/$t --test-threads 4 2>&1 | grep -vE "^test .* ok$" | tail -40
done
B=$D/hkv-bench
for b in 256 4096 32768; do
  step "engine opencl k8 1M c uniform batch $b"
  timeout 70 $B engine --engine opencl --dataset k8 --keys 1000000 --queries 4000000 --workload c --dist uniform --runs 3 --batch $b --no-hashbrown
done
step "engine cpu k8 1M c uniform batch 256"
timeout 60 $B engine --dataset k8 --keys 1000000 --queries 4000000 --workload c --dist uniform --runs 3 --no-hashbrown
for e in cpu opencl; do
  step "net $e: hkv -t 4, binary 16 conns x 16, k8 b zipf"
  $D/hkv --engine $e -t 4 -p 21299 -U 0 -m 1024 & pid=$!
  sleep 3
  timeout 60 $B net --target 127.0.0.1:21299 --protocol binary --dataset k8 --workload b --dist zipf --conns 16 --pipeline 16 --threads 4 --duration 5 --runs 2 --server-pid $pid
  echo "stats hkv:"; printf 'stats hkv\r\nquit\r\n' | timeout 3 bash -c 'exec 3<>/dev/tcp/127.0.0.1/21299; cat >&3; cat <&3' | grep -E "engine|placement|device|batch" | head -30
  kill $pid; wait $pid
done
step "issue 16 engine cpu k8 10M a,c uniform threads 1"
timeout 150 $B engine --dataset k8 --threads 1 --runs 3 --workload a,c --dist uniform
step done

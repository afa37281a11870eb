#!/bin/bash
# GPU check 2 (after the mirrored table): kernels' and mirror's tests on the vendor runtime;
# the server over the network (CPU engine, OpenCL auto, search forced on the GPU); the GPU's
# search rate by batch size; hkv-bench placement (DIDO's 24 workloads, and large batches);
# the placement timeline. Steps are skipped once the time budget is spent.
exec > >(tee -a "$OUT/log.txt") 2>&1
D=$PWD/.dev
B=$D/hkv-bench
BUDGET=${BUDGET:-420}
step() { echo; echo "=== $* (t=${SECONDS}s $(date +%T))"; }
left() { [ $SECONDS -lt $((BUDGET - $1)) ] || { echo "--- skipped: ${SECONDS}s used"; return 1; }; }
step setup
if [ -z "$LOCAL" ]; then
  nvidia-smi -L; nproc
  lib=$(ldconfig -p | awk '/libnvidia-opencl.so.1/{print $NF; exit}')
  [ -z "$lib" ] && lib=$(find / -name 'libnvidia-opencl.so*' 2>/dev/null | head -1)
  echo "nvidia opencl: $lib"
  mkdir -p /tmp/icd && echo "$lib" > /tmp/icd/nvidia.icd
  export OCL_ICD_VENDORS=/tmp/icd LD_LIBRARY_PATH=$D:$LD_LIBRARY_PATH
  label="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) (OpenCL, mirrored table)"
else
  export HKV_OPENCL_SHARE=0
  label="PoCL, mirrored table"
fi
export HKV_REQUIRE_OPENCL=1
mkdir -p /work/main/target/release && cp $D/hkv /work/main/target/release/hkv
for t in t_index_opencl t_engine_mirror t_engine_placement t_server_opencl t_engine_items_opencl t_engine_model; do
  step "test $t"
  timeout 60 $D/$t --test-threads 4 2>&1 | grep -vE "^test .* ok$|^$" | tail -25
done
stats() { printf 'stats hkv\r\nquit\r\n' | timeout 3 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1; cat >&3; cat <&3" | tr -d '\r' | grep -E "$2"; }
port=21300
for cfg in "cpu" "opencl" "opencl --placement search=device"; do
  left 40 || break
  step "net: hkv --engine $cfg -t 4; binary 16 x 16, K8 95% GET Zipf"
  port=$((port + 1))
  $D/hkv --engine $cfg -t 4 -p $port -U 0 -m 1024 & pid=$!
  sleep 2
  timeout 25 $B net --target 127.0.0.1:$port --protocol binary --dataset k8 --workload b --dist zipf --conns 16 --pipeline 16 --threads 4 --duration 5 --server-pid $pid | grep -E "preload|median|run 1"
  stats $port "STAT (engine |batch_interval_us|avg_batch|placement_(table|current|search_|insert_dev|mirror|splits|dispatch))"
  kill $pid; wait $pid 2>/dev/null
done
for b in 256 4096 32768 131072; do
  left 60 || break
  step "engine: GPU search rate, search=device without split, batch $b"
  HKV_OPENCL_DISPATCH=0 timeout 40 $B engine --engine opencl --placement search=device --dataset k8 --keys 1000000 --queries 2000000 --workload c --dist uniform --runs 2 --batch $b --no-hashbrown
done
for p in "search=device" auto cpu; do
  left 60 || break
  step "engine: --placement $p (split with the thread where device), batch 32768"
  timeout 40 $B engine --engine opencl --placement $p --dataset k8 --keys 1000000 --queries 2000000 --workload c --dist uniform --runs 2 --batch 32768 --no-hashbrown
done
if left 100; then
  step "placement: DIDO's 24 workloads, batch 256"
  timeout 170 $B placement
fi
if left 60; then
  step "placement: large batches (16384)"
  timeout 70 $B placement --dataset k8,k128 --workload c,b --dist uniform --batch 16384 --runs 3
fi
if left 50; then
  step "timeline"
  mkdir -p $OUT/tl
  timeout 80 $B timeline --placements "auto;cpu;search=device" --cycles 2 --phase-seconds 3 --rounds 1 --server-threads 2 --device-label "$label" --out $OUT/tl --markdown $OUT/tl/timeline.md 2>&1 | tail -12
fi
step done

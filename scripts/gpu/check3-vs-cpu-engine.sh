#!/bin/bash
# GPU check 3: the OpenCL engine (auto placement, mirrored table) against the CPU engine on
# the same machine, interleaved rounds (scripts/cpu-split.py), read-only, 95% and 50% GET.
exec > >(tee -a "$OUT/log.txt") 2>&1
D=$PWD/.dev
lib=$(ldconfig -p | awk '/libnvidia-opencl.so.1/{print $NF; exit}')
mkdir -p /tmp/icd && echo "$lib" > /tmp/icd/nvidia.icd
export OCL_ICD_VENDORS=/tmp/icd LD_LIBRARY_PATH=$D:$LD_LIBRARY_PATH PYTHONUNBUFFERED=1
mkdir -p target/release && cp $D/hkv $D/hkv-bench target/release/
nvidia-smi -L
for w in c b a; do
  echo "=== workload $w (t=${SECONDS}s)"
  timeout 65 python3 scripts/cpu-split.py --a "target/release/hkv -t 4 -m 1024" \
    --b "target/release/hkv --engine opencl -t 4 -m 1024" --protocol binary --rounds 4 --seconds 3 \
    -- --workload $w --dataset k8 --conns 16 --pipeline 16 --threads 4 | tail -6
done

#!/bin/bash
# Lead's merged-main device call 2 (2026-11-23b): issue 11's accuracy/time table at its own shape
# (bench/accuracy_modes.py), then issue 8's GPU attack on the merged bounds (bench/bounds_attack_gpu.sh:
# N_k = 65536 all 28 pairs, the long query axis, N_k 512/4096, 16384). Logs under $OUT.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
t=$(date +%s)
timeout -k 5 ${TA:-75} python3 bench/accuracy_modes.py --out "$OUT" > "$OUT/accuracy_modes.log" 2>&1
echo "accuracy_modes rc=$? in $(( $(date +%s) - t )) s"
grep -E "^\| (normal|outliers|large_logits) \| (output|ours|cuDNN|SDPA)" "$OUT/accuracy_modes.log" | head -24
grep -E "^\| .*2048" "$OUT/accuracy_modes.log" | head -8
T1=${T1:-280} T2=${T2:-90} T3=${T3:-60} T4=${T4:-30} bash bench/bounds_attack_gpu.sh

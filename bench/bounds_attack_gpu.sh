#!/bin/bash
# The GPU attack of issue 8 in one device call (bench/bounds_attack.py), stages in order of value so that
# a kill at the time limit loses the least; partial results in $OUT as they come:
#  1. N_k = 65536: every family + random x fp32 ieee/tf32, fp16, bf16 (28 cases, seed 0; ~2 waves of 14 workers)
#  2. long query axis (dK/dV accumulate over N_q = 8192 rows, N_k = 512): fp32 ieee and fp16 x
#     constant_v, v_large_mean, random (6 cases)
#  3. N_k = 512 and 4096 (all 28 pairs, seed 0), then N_k = 16384 (seed 1) with what time is left.
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
W=${WORKERS:-14}
{ nvidia-smi -L; python3 -c "import torch, triton, numpy; print('torch', torch.__version__, 'triton', triton.__version__, 'numpy', numpy.__version__)"; } > "$OUT/versions.txt" 2>&1
cat "$OUT/versions.txt"
A="python3 bench/bounds_attack.py --source kernel --device cuda --workers $W --out $OUT/attack.jsonl"
timeout ${T1:-300} $A --check-exp2 "$OUT/exp2.json" --nk 65536 --seeds 0 > "$OUT/log_1.txt" 2>&1; echo "stage 1 rc=$?"
timeout ${T2:-110} $A --nq 8192 --nk 512 --seeds 0 --precisions float32:ieee float16:fp16 \
    --families constant_v v_large_mean random > "$OUT/log_2.txt" 2>&1; echo "stage 2 rc=$?"
timeout ${T3:-60} $A --nk 512 4096 --seeds 0 > "$OUT/log_3.txt" 2>&1; echo "stage 3 rc=$?"
timeout ${T4:-40} $A --nk 16384 --seeds 1 > "$OUT/log_4.txt" 2>&1; echo "stage 4 rc=$?"
cat "$OUT/exp2.json"; echo
echo "cases: $(grep -c . "$OUT/attack.jsonl")"
grep -h "over=[1-9]" "$OUT"/log_*.txt | head -20
grep -h "Error\|Traceback" "$OUT"/log_*.txt | head -5
python3 bench/bounds_attack.py --table-from "$OUT/attack.jsonl" | tee "$OUT/table.md"

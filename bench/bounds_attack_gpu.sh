#!/bin/bash
# The GPU attack of issue 8 in one device call (bench/bounds_attack.py): every family + random,
# fp32 ieee/tf32, fp16, bf16; N_k 512, 4096 (3 seeds), 65536 (1 seed), 16384 (2 seeds), in that order
# so that a kill at the time limit loses the least; partial results in $OUT as they come.
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
W=${WORKERS:-14}
{ nvidia-smi -L; python3 -c "import torch, triton, numpy; print('torch', torch.__version__, 'triton', triton.__version__, 'numpy', numpy.__version__)"; } > "$OUT/versions.txt" 2>&1
cat "$OUT/versions.txt"
A="python3 bench/bounds_attack.py --source kernel --device cuda --workers $W --out $OUT/attack.jsonl"
timeout ${T1:-120} $A --check-exp2 "$OUT/exp2.json" --nk 512 4096 --seeds 0 1 2 > "$OUT/log_1.txt" 2>&1; echo "stage 1 rc=$?"
timeout ${T2:-170} $A --nk 65536 --seeds 0 > "$OUT/log_2.txt" 2>&1; echo "stage 2 rc=$?"
timeout ${T3:-140} $A --nk 16384 --seeds 0 1 > "$OUT/log_3.txt" 2>&1; echo "stage 3 rc=$?"
cat "$OUT/exp2.json"; echo
echo "cases: $(grep -c . "$OUT/attack.jsonl")"
grep -h "over=[1-9]" "$OUT"/log_*.txt | head -20
grep -h "Error\|Traceback" "$OUT"/log_*.txt | head -5
python3 bench/bounds_attack.py --table-from "$OUT/attack.jsonl" | tee "$OUT/table.md"

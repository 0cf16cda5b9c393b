#!/bin/bash
# The GPU attack of issue 8 in one device call (bench/bounds_attack.py): every family + random,
# fp32 ieee/tf32, fp16, bf16, N_k 512..16384 (3 seeds) then 65536 (1 seed); partial results in $OUT.
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
W=${WORKERS:-14}
{ nvidia-smi -L; python3 -c "import torch, triton, numpy; print('torch', torch.__version__, 'triton', triton.__version__, 'numpy', numpy.__version__)"; } > "$OUT/versions.txt" 2>&1
cat "$OUT/versions.txt"
timeout ${T1:-230} python3 bench/bounds_attack.py --source kernel --device cuda --check-exp2 "$OUT/exp2.json" \
    --nk 512 4096 16384 --seeds 0 1 2 --workers "$W" --out "$OUT/attack.jsonl" > "$OUT/log_short.txt" 2>&1
echo "short rc=$?"
timeout ${T2:-170} python3 bench/bounds_attack.py --source kernel --device cuda \
    --nk 65536 --seeds 0 --workers "$W" --out "$OUT/attack.jsonl" > "$OUT/log_long.txt" 2>&1
echo "long rc=$?"
cat "$OUT/exp2.json"; echo
grep -c . "$OUT/attack.jsonl"
grep -h "over=[1-9]" "$OUT"/log_*.txt | head -20
python3 bench/bounds_attack.py --table-from "$OUT/attack.jsonl" | tee "$OUT/table.md"

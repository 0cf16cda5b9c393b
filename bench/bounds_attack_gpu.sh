#!/bin/bash
# The GPU attack of issue 8 in one device call (bench/bounds_attack.py). Two lanes run at once, because the
# fp32-ieee cases at N_k = 65536 take minutes of host time each (the backward bound's grouped sums) while the
# GPU work is seconds; partial results land in $OUT as they come:
#  lane A: N_k = 65536, every family + random x fp32 ieee/tf32, fp16, bf16 (28 cases, seed 0), A_WORKERS workers
#  lane B: long query axis (dK/dV accumulate over N_q = 8192 rows, N_k = 512; fp32 ieee and fp16 x constant_v,
#          v_large_mean, random), then N_k = 512, 4096 with seed 1 (seed 0 is in h100-2026-11-23b/final-2),
#          then N_k = 16384 with seeds 0 and 1 while time is left, B_WORKERS workers
# Each step runs under its own `timeout`: a kill loses that step's unfinished cases, not the call.
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
{ nvidia-smi -L; python3 -c "import torch, triton, numpy; print('torch', torch.__version__, 'triton', triton.__version__, 'numpy', numpy.__version__)"; nproc; } > "$OUT/versions.txt" 2>&1
cat "$OUT/versions.txt"
run() {  # run LANE LIMIT LOG ARGS...: one bounds_attack.py step
  local lane=$1 limit=$2 log=$3; shift 3
  local w; [ "$lane" = A ] && w=${A_WORKERS:-11} || w=${B_WORKERS:-4}
  timeout "$limit" python3 bench/bounds_attack.py --source kernel --device cuda --workers "$w" \
      --out "$OUT/attack.jsonl" "$@" > "$OUT/$log" 2>&1
  local rc=$?
  echo "[$(( $(date +%s) - T0 )) s] lane $lane $log rc=$rc (124: cut at ${limit} s)"
}
T0=$(date +%s)
( run A ${TA:-500} log_a65536.txt --check-exp2 "$OUT/exp2.json" --nk 65536 --seeds 0 ) &
(
  run B ${TB1:-120} log_b_nq8192.txt --nq 8192 --nk 512 --seeds 0 --precisions float32:ieee float16:fp16 \
      --families constant_v v_large_mean random
  run B ${TB2:-120} log_b_seed1.txt --nk 512 4096 --seeds 1
  run B ${TB3:-250} log_b_16384.txt --nk 16384 --seeds 0 1
) &
wait
cat "$OUT/exp2.json"; echo
echo "cases: $(grep -c . "$OUT/attack.jsonl")"
grep -h "over=[1-9]" "$OUT"/log_*.txt | head -20
grep -h "Error\|Traceback" "$OUT"/log_*.txt | head -5
python3 bench/bounds_attack.py --table-from "$OUT/attack.jsonl" | tee "$OUT/table.md" | tail -60

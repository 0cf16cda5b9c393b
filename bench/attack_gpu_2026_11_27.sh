#!/bin/bash
# Session 2026-11-27, one device call: the merged delta-tree and masked-chains work on the H100 kernel.
#  1. the Delta dot's tree read off this Triton's PTX (Triton 3.6.0 on the device machine): --record-delta into
#     the compiled-code record, copied to $OUT to be committed (ours_precision claims the tree from it)
#  2. at once, with the record in place:
#     lane B: N_k 512, 4096 (N_q 64, seed 0), every family x PRECS, unmasked, B_WORKERS workers
#     lane M: the same under bottom-right causal (masked heads: each backward program's own tile order), fp32 ieee
#             and fp16, M_WORKERS workers
#     lane V: the coherent-residue adversaries on the kernel, unmasked and masked (--masking key causal window)
# Files: $OUT/record_delta.log, forward_compiled_triton<ver>.json, attack.jsonl, log_*.txt, adversaries.txt, table.md
export PYTHONPATH=${PYTHONPATH:-$PWD} PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
{ nvidia-smi -L; python3 -c "import torch, triton, numpy; print('torch', torch.__version__, 'triton', triton.__version__, 'numpy', numpy.__version__)"; nproc; } > "$OUT/versions.txt" 2>&1
cat "$OUT/versions.txt"
T0=$(date +%s)
VER=$(python3 -c "import triton; print(triton.__version__)")
REC=proofs/measurements/forward_compiled_triton$VER.json
TRITON_INTERPRET=0 timeout ${TR:-200} python3 bench/compile_forward.py --record-delta "$REC" --workers ${R_WORKERS:-14} \
    > "$OUT/record_delta.log" 2>&1
echo "[$(( $(date +%s) - T0 )) s] record-delta rc=$?"; tail -3 "$OUT/record_delta.log"
cp "$REC" "$OUT/"
python3 -c "
import json; d = json.load(open('$REC'))
cf = d.get('configs', d) if isinstance(d, dict) else d
print('configs with a delta entry:', sum(1 for c in (cf if isinstance(cf, list) else cf.values()) if isinstance(c, dict) and 'delta' in c))" 2>&1 | tail -1
run() {  # run LIMIT LOG WORKERS ARGS...: one bounds_attack.py step
  local limit=$1 log=$2 w=$3; shift 3
  timeout "$limit" python3 bench/bounds_attack.py --source kernel --device cuda --workers "$w" \
      --out "$OUT/attack.jsonl" "$@" > "$OUT/$log" 2>&1
  echo "[$(( $(date +%s) - T0 )) s] $log rc=$? (124: cut at ${limit} s)"
}
adv() {  # adv LIMIT NAME ARGS...: one adversary on the kernel
  local limit=$1 name=$2; shift 2
  echo "== $name" >> "$OUT/adversaries.txt"
  timeout "$limit" python3 "$@" --source kernel --device cuda >> "$OUT/adversaries.txt" 2>&1
  echo "[$(( $(date +%s) - T0 )) s] $name rc=$?"
}
PRECS=${PRECS:-float32:ieee float32:tf32 float16:fp16 bfloat16:bf16}
TL=${TL:-330}
( run $TL log_b.txt ${B_WORKERS:-6} --nk 512 4096 --nq 64 --seeds 0 --precisions $PRECS ) &
( run $TL log_m.txt ${M_WORKERS:-5} --nk 512 4096 --nq 64 --seeds 0 --precisions ${PRECS_M:-float32:ieee float16:fp16} \
      --causal bottom_right ) &
(
  adv 70 constant_residue_dq_cancel bench/adversaries/constant_residue_dq.py --n 4096 16384 --cancel
  adv 80 constant_residue_dq_masked bench/adversaries/constant_residue_dq.py --n 4096 --balanced --masking key window
  adv 70 constant_residue_rows bench/adversaries/constant_residue_rows.py --n 4096 16384
  adv 90 constant_residue_rows_masked bench/adversaries/constant_residue_rows.py --n 4096 --masking key causal window
) &
wait
cat "$OUT/adversaries.txt" | grep -v "^\s*warnings.warn\|resource_tracker"
echo "cases: $(grep -c . "$OUT/attack.jsonl")"
grep -h "over=[1-9]" "$OUT"/log_*.txt | head -20
grep -h "Error\|Traceback" "$OUT"/log_*.txt "$OUT/adversaries.txt" | head -5
python3 bench/bounds_attack.py --table-from "$OUT/attack.jsonl" | tee "$OUT/table.md" | tail -45

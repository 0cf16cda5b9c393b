#!/bin/bash
# Session 2026-11-27, the second attack call: the forward's masked rows per query block (merged fwd-masked) on the H100.
#  lane M: bottom-right causal, N_k 512 / 4096 (N_q 64, seed 0), every family x PRECS, M_WORKERS workers
#  lane U: unmasked N_k 16384 (N_q 16) for tf32, fp16, bf16 (fp32 ieee at 16384: h100-2026-11-27/enclosure), U_WORKERS
#  lane V: step_sign_o --masked-key on the kernel (the forward's FMA chain on masked rows, each block's order)
#  lane T: the GPU tests that failed or were cut in the suite call (PYTEST_WORKERS)
export PYTHONPATH=${PYTHONPATH:-$PWD} PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
{ nvidia-smi -L; python3 -c "import torch, triton, numpy; print('torch', torch.__version__, 'triton', triton.__version__, 'numpy', numpy.__version__)"; } > "$OUT/versions.txt" 2>&1
cat "$OUT/versions.txt"
T0=$(date +%s)
run() {  # run LIMIT LOG WORKERS ARGS...
  local limit=$1 log=$2 w=$3; shift 3
  timeout "$limit" python3 bench/bounds_attack.py --source kernel --device cuda --workers "$w" \
      --out "$OUT/attack.jsonl" "$@" > "$OUT/$log" 2>&1
  echo "[$(( $(date +%s) - T0 )) s] $log rc=$? (124: cut at ${limit} s)"
}
PRECS=${PRECS:-float32:ieee float32:tf32 float16:fp16 bfloat16:bf16}
TL=${TL:-380}
( run $TL log_m.txt ${M_WORKERS:-8} --nk 512 4096 --nq 64 --seeds 0 --precisions $PRECS --causal bottom_right ) &
( run $TL log_u16384.txt ${U_WORKERS:-3} --nk 16384 --nq 16 --seeds 0 --precisions float32:tf32 float16:fp16 bfloat16:bf16 ) &
( timeout 200 python3 bench/adversaries/step_sign_o.py --masked-key --n 4096 16384 65536 --source kernel --device cuda \
      > "$OUT/adversaries.txt" 2>&1; echo "[$(( $(date +%s) - T0 )) s] step_sign_o --masked-key rc=$?" ) &
( CI=true timeout $TL python3 -m pytest -q -rf -p no:cacheprovider -n ${PYTEST_WORKERS:-4} -m "not slow" \
      tests/test_delta_tree.py tests/test_masked_chains.py tests/test_masked_forward.py \
      tests/test_kernel_backward.py tests/test_kernel_forward.py "tests/test_kernel_gpu.py::test_gpu_every_head_dim" \
      > "$OUT/pytest.txt" 2>&1; echo "[$(( $(date +%s) - T0 )) s] pytest rc=$?"; tail -15 "$OUT/pytest.txt" ) &
wait
grep -v "warnings.warn\|resource_tracker" "$OUT/adversaries.txt"
echo "cases: $(grep -c . "$OUT/attack.jsonl")"
grep -h "over=[1-9]" "$OUT"/log_*.txt | head -20
grep -h "Error\|Traceback" "$OUT"/log_*.txt "$OUT/adversaries.txt" | head -5
python3 bench/bounds_attack.py --table-from "$OUT/attack.jsonl" | tee "$OUT/table.md" | tail -45

#!/usr/bin/env bash
# Session 2026-11-28e's device calls (the fused d = 64 backward, issue 10), from the repo root:
#   bash bench/gpu_2026_11_28e.sh a   # its GPU tests and the Gluon ones beside them, the table, the fused attack (bf16)
#   bash bench/gpu_2026_11_28e.sh b   # the fused attack (fp16), then the suite's first half
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-device-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)"
T0=$(date +%s)
step() { echo "== [$(( $(date +%s) - T0 )) s] $*"; }
attack() {  # the fused backward forced on every unbanded call (--fused-dq), N_k 65536, one query tile
  step "attack $1"
  OMP_NUM_THREADS=1 timeout "$2" python3 bench/bounds_attack.py --source kernel --device cuda --workers 14 --seeds 0 \
      --precisions "$1" --d 64 --nk 65536 --nq 64 --fused-dq --out "$OUT/attack-${1%%:*}.jsonl" \
      --table "$OUT/attack-${1%%:*}.md" > "$OUT/attack-${1%%:*}.log" 2>&1
  echo "exit $?"; tail -12 "$OUT/attack-${1%%:*}.md" 2>/dev/null || tail -5 "$OUT/attack-${1%%:*}.log"
}
case "${1:-a}" in
  a)
    step "tests"
    timeout 240 python3 -m pytest -q -p no:cacheprovider -rf tests/test_gluon_fused_bwd.py tests/test_gluon_forward.py \
        tests/test_long_tile.py > "$OUT/tests.log" 2>&1
    echo "exit $?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/tests.log" | tail -12
    step "table"
    timeout 150 python3 bench/run.py --grid table --dtype bfloat16 --backends ours,torch-sdpa-cudnn,torch-sdpa-flash \
        --no-memory --rounds 3 --out "$OUT/table" > "$OUT/table.log" 2>&1
    echo "exit $?"; tail -30 "$OUT/table.log"
    attack bfloat16:bf16 200
    ;;
  b)
    attack float16:fp16 150
    step "suite, first half"
    O=$OUT; OUT=$O/tests T1=${T1:-380} WORKERS=16 bash bench/validate_gpu.sh suite tests --ignore=tests/test_catalog.py \
        --ignore=tests/test_audit.py
    ;;
esac
step "done"

#!/usr/bin/env bash
# One device call (~6 min) for the Gluon engine of the checked-out branch (bench/NOTES.md, "Gluon forward"):
#   OUT=$OUT bash bench/gluon_check.sh
# 1. its GPU tests (tests/test_gluon_forward.py: outputs and gradients within the derived bounds, -n 8);
# 2. host time per forward call of each engine (bench/engine_host.py);
# 3. issue 10's table with the engine on ("ours") beside the triton engine and cuDNN, ROUNDS interleaved rounds.
# Each step under its own timeout, so a hang costs its limit, not the call.
set -uo pipefail
export PYTHONPATH=$PWD
OUT=${OUT:-device-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
git log --oneline -1 2>/dev/null || true
timeout "${T_TESTS:-240}" python3 -m pytest -q -n 8 -p no:cacheprovider -rf --tb=short --durations=8 \
    tests/test_gluon_forward.py > "$OUT/gluon_tests.log" 2>&1
echo "tests rc $?"
tail -15 "$OUT/gluon_tests.log" | cut -c1-400
timeout 90 python3 bench/engine_host.py --n 200 --out "$OUT/host"
FLASHCHECK_FORWARD_ENGINE=gluon timeout "${T_TABLE:-240}" python3 bench/run.py --grid table --dtype bfloat16 \
    --backends ours,ours-triton,torch-sdpa-cudnn --no-memory --rounds "${ROUNDS:-2}" --out "$OUT/table" \
    > "$OUT/table.log" 2>&1
echo "table rc $?"
grep "^| d=" "$OUT/table.log" | tail -24

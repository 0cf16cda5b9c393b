#!/usr/bin/env bash
# Session 2026-11-29e's device calls (bench/NOTES.md "Session 2026-11-29e"): the WIDE forward (three consumer
# warpgroups at d = 64, attention._gluon_wide) against main's tree in _base/ (`mkdir -p _base && git archive <main's
# commit before it> flashcheck kernels proofs reference | tar -x -C _base`):
#   bash bench/gpu_2026_11_29e.sh a   # tests/test_gluon_forward.py on the GPU + A/B of the d = 64 cells (~5 min)
#   bash bench/gpu_2026_11_29e.sh b   # A/B at N = 4k, 6 rounds (fwd+bwd there scattered in a), then issue 10's table
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
O=${OUT:-/tmp/gpu_2026_11_29e}
mkdir -p "$O"
[ -d _base/kernels ] || { echo "no _base/: see the header"; exit 2; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$O/device.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >> "$O/device.txt"
case "${1:-}" in
  a)
    timeout 250 python3 -m pytest -q -n 14 -p no:cacheprovider tests/test_gluon_forward.py 2>&1 | tail -4 \
      | tee "$O/gtests.log"
    timeout 300 python3 bench/ab_trees.py --base _base --rounds 3 --out "$O/ab" \
      --cells 64:4096:0,64:8192:0,64:16384:0,64:2048:0,64:16384:1 2>&1 | grep -v "^round" | tee "$O/ab.log"
    ;;
  b)
    timeout 260 python3 bench/ab_trees.py --base _base --rounds 6 --out "$O/ab4k" --cells 64:4096:0 2>&1 \
      | grep -v "^round" | tee "$O/ab4k.log"
    timeout 200 python3 bench/run.py --grid table --dtype bfloat16 --backends ours,torch-sdpa-cudnn,torch-sdpa-flash \
      --rounds 2 --no-memory --out "$O/table" 2>&1 | tail -40 | tee "$O/table.log"
    ;;
  *)
    echo "usage: bash bench/gpu_2026_11_29e.sh a|b"; exit 2 ;;
esac

#!/usr/bin/env bash
# Session 2026-11-29e's device calls (bench/NOTES.md "Session 2026-11-29e"): the WIDE forward (three consumer
# warpgroups at d = 64, attention._gluon_wide) against main's tree in _base/ (`mkdir -p _base && git archive <main's
# commit before it> flashcheck kernels proofs reference | tar -x -C _base`):
#   bash bench/gpu_2026_11_29e.sh a   # tests/test_gluon_forward.py on the GPU + A/B of the d = 64 cells (~5 min)
#   bash bench/gpu_2026_11_29e.sh b   # A/B at N = 4k, 6 rounds (fwd+bwd there scattered in a), then issue 10's table
# and for the next session (no _base/ needed):
#   bash bench/gpu_2026_11_29e.sh s1  # the GPU suite's first half (~9 min)
#   bash bench/gpu_2026_11_29e.sh s2  # its second half (~5 min), then the banded d = 64 short forward: the Gluon
#                                     # kernel ("kernel") against what "auto" runs there, triton_fwd ("product")
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
O=${OUT:-/tmp/gpu_2026_11_29e}
mkdir -p "$O"
case "${1:-}" in a|b) [ -d _base/kernels ] || { echo "no _base/: see the header"; exit 2; } ;; esac
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
  s1)
    OUT=$O/tests T1=500 WORKERS=16 bash bench/validate_gpu.sh suite tests --ignore=tests/test_catalog.py \
      --ignore=tests/test_audit.py
    ;;
  s2)
    OUT=$O/tests2 T1=265 WORKERS=16 bash bench/validate_gpu.sh suite tests/test_catalog.py flashcheck/properties \
      tests/test_audit.py
    timeout 200 python3 bench/fwd_variants.py --variants kernel --rounds 3 --out "$O/short_causal" \
      --cells 64:1024:1,64:2048:1,128:1024:1 2>&1 | tee "$O/short_causal.log"
    ;;
  *)
    echo "usage: bash bench/gpu_2026_11_29e.sh a|b|s1|s2"; exit 2 ;;
esac

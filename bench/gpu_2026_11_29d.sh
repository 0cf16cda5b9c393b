#!/usr/bin/env bash
# The next session's device calls for branch lpt-interval (bench/NOTES.md "Session 2026-11-29d", Next 0): lpt-order
# and interval-mask together, against main. From the branch's checkout, with main's tree beside it (the device has no
# git history):
#   git checkout lpt-interval && mkdir -p _base
#   git archive main flashcheck kernels proofs reference | tar -x -C _base
# then one device call a stage (each < 10 min):
#   bash bench/gpu_2026_11_29d.sh a   # A/B timing of issue 10's 12 cells, both trees, outputs bit for bit (~6-9 min)
#   bash bench/gpu_2026_11_29d.sh b   # the Gluon kernels bit for bit against main's (bench/gluon_bitwise.py, ~4 min)
#                                     # + tests/test_gluon_forward.py (its new ragged d = 128 case) and
#                                     # tests/test_program_order.py on the GPU
#   bash bench/gpu_2026_11_29d.sh c   # the d = 64 forward with two consumer warpgroups and three (~2 min)
# Output under $OUT (the device tool's folder).
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
O=${OUT:-/tmp/gpu_2026_11_29d}
mkdir -p "$O"
[ -d _base/kernels ] || { echo "no _base/: see the header"; exit 2; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$O/device.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" \
  | tee -a "$O/device.txt"
case "${1:-}" in
  a)
    # both trees compile every kernel in their first round (~1.5 min each), then ~30 s a worker
    timeout 560 python3 bench/ab_trees.py --base _base --rounds 3 --out "$O/ab" 2>&1 | tee "$O/ab.log"
    ;;
  b)
    FLASHCHECK_FORWARD_ENGINE=gluon timeout 330 python3 bench/gluon_bitwise.py --base-fwd _base/kernels/gluon_fwd.py \
      --base-bwd _base/kernels/gluon_bwd.py > "$O/bitwise.log" 2>&1 &
    timeout 300 python3 -m pytest -q -n 12 -p no:cacheprovider tests/test_gluon_forward.py tests/test_program_order.py \
      2>&1 | tail -3 | tee "$O/gtests.log"
    wait
    tail -35 "$O/bitwise.log"
    ;;
  c)
    # three consumer warpgroups at d = 64 (NOTES Next 4; since 2026-11-29e the kernel's WIDE build: narrow / wide)
    timeout 400 python3 bench/fwd_variants.py --variants narrow,wide --rounds 3 --out "$O/wg3" \
      --cells 64:1024:0,64:2048:0,64:4096:0,64:16384:0,64:4096:1 2>&1 | tee "$O/wg3.log"
    ;;
  *)
    echo "usage: bash bench/gpu_2026_11_29d.sh a|b|c"; exit 2 ;;
esac

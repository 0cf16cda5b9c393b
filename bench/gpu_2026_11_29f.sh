#!/usr/bin/env bash
# Session 2026-11-29f's device calls (bench/NOTES.md "Session 2026-11-29f"):
#   bash bench/gpu_2026_11_29f.sh e1   # the d = 64 engines by key count from N = 1k: the Gluon backward against
#                                      # triton_bwd where "auto" runs the latter (N_k < LONG_KEYS), cuDNN beside
#   bash bench/gpu_2026_11_29f.sh e2   # after LONG_KEYS 4096 -> 2048: the GPU tests of the d = 64 tiles by key count
# and for the next session, the GPU suite in three calls (its halves no longer fit their limits: NOTES 29f item 1):
#   bash bench/gpu_2026_11_29f.sh s1   # the first half, 545 s
#   bash bench/gpu_2026_11_29f.sh s2   # the second half without the three float32 backward properties, 300 s
#   bash bench/gpu_2026_11_29f.sh p32  # those three alone, one worker each, 540 s
# and for branch short-bwd (checked out, main's tree in _base/: `mkdir -p _base && git archive main flashcheck kernels
# proofs reference | tar -x -C _base`):
#   bash bench/gpu_2026_11_29f.sh sb   # its GPU tests of the d = 64 tiles by key count, then the A/B at N = 1k / 1.5k
# and for branch band-pairs (checked out; no _base/ needed):
#   bash bench/gpu_2026_11_29f.sh bp   # paired programs bit for bit the unpaired ones (banded cases included), then
#                                      # the banded pairs timed against one block a program (fwd_variants)
set -uf  # (no globbing: the node ids hold [brackets])
export PYTHONPATH=. PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
O=${OUT:-/tmp/gpu_2026_11_29f}
mkdir -p "$O"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$O/device.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >> "$O/device.txt"
# the float32 backward properties: ~280 s each alone, unfinished in 265 s and 330 s this session
P32="flashcheck/properties/test_backward_dk.py::test_dk_within_bound[float32]
flashcheck/properties/test_backward_dq.py::test_dq_within_bound[float32]
flashcheck/properties/test_backward_dv.py::test_dv_within_bound[float32]"
case "${1:-}" in
  e1)
    if [ -f _cut1.txt ]; then  # tests a suite half's time limit cut (node ids, one a line)
      xargs -d '\n' -a _cut1.txt timeout 200 python3 -m pytest -q -n 15 -p no:cacheprovider 2>&1 | tail -6 \
        | tee "$O/cut1.log"
    fi
    timeout 340 python3 bench/run.py --grid d64 --dtype bfloat16 \
      --backends ours,ours-gluon,ours-triton,torch-sdpa-cudnn --rounds 3 --no-memory --out "$O/d64" 2>&1 \
      | grep -v "^bench:" | tail -80 | tee "$O/d64.log"
    ;;
  e2)
    timeout 400 python3 -m pytest -q -n 12 -p no:cacheprovider tests/test_long_tile.py tests/test_short_tile.py \
      tests/test_gluon_forward.py -k "d64 or long or short or dense" 2>&1 | tail -6 | tee "$O/e2_tests.log"
    ;;
  s1)
    OUT=$O/tests1 T1=545 WORKERS=16 bash bench/validate_gpu.sh suite tests --ignore=tests/test_catalog.py \
      --ignore=tests/test_audit.py
    ;;
  s2)
    OUT=$O/tests2 T1=300 WORKERS=16 bash bench/validate_gpu.sh suite tests/test_catalog.py flashcheck/properties \
      tests/test_audit.py $(for x in $P32; do echo --deselect "$x"; done)
    ;;
  p32)
    OUT=$O/tests3 T1=540 WORKERS=3 bash bench/validate_gpu.sh suite $P32
    ;;
  sb)
    [ -d _base/kernels ] || { echo "no _base/: see the header"; exit 2; }
    timeout 300 python3 -m pytest -q -n 12 -p no:cacheprovider tests/test_long_tile.py tests/test_short_tile.py \
      tests/test_gluon_forward.py -k "d64 or long or short or dense or launches" 2>&1 | tail -6 | tee "$O/sb_tests.log"
    timeout 250 python3 bench/ab_trees.py --base _base --rounds 5 --out "$O/ab_short_bwd" \
      --cells 64:1024:0,64:1536:0,64:1024:1,64:4096:0 2>&1 | grep -v "^round" | tee "$O/ab_short_bwd.log"
    ;;
  bp)
    timeout 300 python3 -m pytest -q -n 12 -p no:cacheprovider tests/test_gluon_forward.py -k "paired or compiles" \
      2>&1 | tail -6 | tee "$O/bp_tests.log"
    timeout 250 python3 bench/fwd_variants.py --variants unpaired,paired --rounds 3 --out "$O/band_pairs" \
      --cells 128:1024:1,128:2048:1,128:4096:1,64:1024:1,64:2048:1,64:4096:1 2>&1 | tee "$O/band_pairs.log"
    ;;
  *)
    echo "usage: bash bench/gpu_2026_11_29f.sh e1|e2|s1|s2|p32|sb|bp"; exit 2 ;;
esac

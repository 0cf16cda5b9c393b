#!/usr/bin/env bash
# Session 2026-11-29h's device calls (bench/NOTES.md "Session 2026-11-29h"):
#   bash bench/gpu_2026_11_29g.sh prof; bash bench/gpu_2026_11_29g.sh loop   # call 1: ncu on the backward's two
#                                           # kernels and the d 64 1k causal forward; the loop probe
#   bash bench/results/h200-2026-11-29h/probe_matrix.sh [spec|variants]      # calls 2-5: the loop-around-the-block
#                                           # forward localized (item 1)
#   bash bench/gpu_2026_11_29h.sh streams   # call 6: the backward's dQ kernel on a second stream
#                                           # (results/h200-2026-11-29h/dq_stream.patch applied to kernels/attention.py,
#                                           # without its STREAM_KEYS rule; main's tree in _base/, see ab_trees'
#                                           # header):
#                                           # A/B on issue 10's 12 cells (fwd + bwd, bit for bit against _base), then
#                                           # the backward's GPU tests
#   bash bench/gpu_2026_11_29h.sh streams2  # call 7: the patch as it is (from STREAM_KEYS = 4096 keys on): five
#                                           # cells, then the tests. Not merged: the gain did not repeat (item 2)
set -uf
export PYTHONPATH=. PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
O=${OUT:-/tmp/gpu_2026_11_29h}
mkdir -p "$O"
if [ "${1:-}" = streams ]; then
  [ -d _base/kernels ] || { echo "no _base/: see the header"; exit 2; }
  t0=$SECONDS
  python3 bench/ab_trees.py --base _base --rounds 3 --budget 300 --out "$O/ab_streams" 2>&1 | grep -v "^round" \
    | tee "$O/ab_streams.log"
  echo "A/B done at $((SECONDS - t0)) s"
  timeout 240 python3 -m pytest -q -n 15 -p no:cacheprovider -m "not slow" tests/test_kernel_backward.py \
    tests/test_kernel_gpu.py tests/test_gluon_fused_bwd.py tests/test_gluon_forward.py -k "not compiles" 2>&1 \
    | tail -8 | tee "$O/tests_streams.log"
  echo "done at $((SECONDS - t0)) s"
  exit 0
fi
if [ "${1:-}" = streams2 ]; then
  [ -d _base/kernels ] || { echo "no _base/: see the header"; exit 2; }
  t0=$SECONDS
  python3 bench/ab_trees.py --base _base --rounds 3 --budget 170 --out "$O/ab_streams2" \
    --cells 128:16384:0,128:4096:1,128:4096:0,64:16384:0,128:1024:1 2>&1 | grep -v "^round" | tee "$O/ab_streams2.log"
  echo "A/B done at $((SECONDS - t0)) s"
  timeout 270 python3 -m pytest -q -n 15 -p no:cacheprovider -m "not slow" tests/test_kernel_backward.py \
    tests/test_kernel_gpu.py tests/test_gluon_fused_bwd.py 2>&1 | tail -8 | tee "$O/tests_streams2.log"
  echo "done at $((SECONDS - t0)) s"
  exit 0
fi
echo "usage: see the header"; exit 2

#!/usr/bin/env bash
# Session 2026-11-30b's device calls (bench/NOTES.md "Session 2026-11-30b"): the fused backward's rotated order. Each
# writes under $OUT and packs it into $OUT/call.tgz (the device tool returns few files).
#   bash bench/gpu_2026_11_30b.sh order CELLS [GROUP]  # bench/fused_order.py: two kernels, fused descending, rotated
#   bash bench/gpu_2026_11_30b.sh tests                # tests/test_gluon_forward.py + test_gluon_fused_bwd.py on the GPU
#   bash bench/gpu_2026_11_30b.sh table                # issue 10's table (ours, cuDNN, SDPA flash), then the tests
#   bash bench/gpu_2026_11_30b.sh suite                # the other GPU tests that run d = 64 backwards (structured
#                                                      # bounds, kernel, validate, audit), as long as the call allows
source "$(dirname "$0")/gpu_session.sh"  # set -uf, the environment, $O, device.txt, t0, pack, tests
case "${1:-}" in
  order)
    timeout 400 python3 bench/fused_order.py --rounds 3 --cells "$2" --group "${3:-1}" --out "$O/order" 2>&1 \
      | tee "$O/order.log" ;;
  tests) tests 400 tests/test_gluon_forward.py tests/test_gluon_fused_bwd.py ;;
  table)
    timeout 220 python3 bench/run.py --grid table --dtype bfloat16 --backends ours,torch-sdpa-cudnn,torch-sdpa-flash \
      --rounds 2 --no-memory --out "$O/table" 2>&1 | grep -v "^bench:" | tail -40 | tee "$O/table.log"
    echo "table done at $((SECONDS - t0)) s"
    tests $((570 - (SECONDS - t0))) tests/test_gluon_forward.py tests/test_gluon_fused_bwd.py ;;
  suite) tests $((${LIMIT:-560} - (SECONDS - t0))) tests/test_bounds_structured.py tests/test_kernel_gpu.py \
           tests/test_validate_gpu.py tests/test_audit.py tests/test_rowsum_depth.py ;;
  *) echo "usage: $0 order CELLS [GROUP] | tests | table | suite"; exit 2 ;;
esac
echo "done at $((SECONDS - t0)) s"
pack

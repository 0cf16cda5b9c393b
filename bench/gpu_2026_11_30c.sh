#!/usr/bin/env bash
# Session 2026-11-30c's device calls (bench/NOTES.md "Session 2026-11-30c"). Each writes under $OUT and packs it into
# $OUT/call.tgz (the device tool returns few files).
#   bash bench/gpu_2026_11_30c.sh groups   # bench/fused_order.py at GQA 4 and 8, then test_gluon_forward + fused tests
#   bash bench/gpu_2026_11_30c.sh tests    # tests/test_gluon_forward.py + test_gluon_fused_bwd.py on the GPU
#   bash bench/gpu_2026_11_30c.sh band     # branch fused-band: the banded fused kernel against the two kernels, causal
#   bash bench/gpu_2026_11_30c.sh band2    # the same, and unbanded, after the reorder (dV issued after dS)
#   bash bench/gpu_2026_11_30c.sh check    # causal fused_order 1k-8k, then the fused and Gluon GPU tests
#   bash bench/gpu_2026_11_30c.sh suite    # the other GPU tests that run d = 64 backwards, as long as the call allows
#   bash bench/gpu_2026_11_30c.sh table    # issue 10's table (ours, cuDNN, SDPA flash)
#   bash bench/gpu_2026_11_30c.sh attack   # bench/bounds_attack.py on the banded fused kernel, causal N = 2048
#   bash bench/gpu_2026_11_30c.sh dsfirst  # gluon_bwd with dS before dV's issue against main's (carry bench/_scratch)
source "$(dirname "$0")/gpu_session.sh"  # set -uf, the environment, $O, device.txt, t0, pack, tests
order() {  # order NAME CELLS 'GROUP [--causal]' LIMIT
  timeout "$4" python3 bench/fused_order.py --rounds 3 --cells "$2" --group $3 --out "$O/$1" 2>&1 | tee "$O/$1.log"
  echo "$1 done at $((SECONDS - t0)) s"
}
case "${1:-}" in
  groups)
    order g4 4096,1024 4 150
    order g8 4096,1024 8 150
    tests $((570 - (SECONDS - t0))) tests/test_gluon_forward.py tests/test_gluon_fused_bwd.py ;;
  band)
    order g1c 1024,2048,4096,8192,16384 "1 --causal" 330
    order g2c 4096,1024 "2 --causal" 200 ;;
  band2)
    order g1 1024,4096,16384 1 150
    order g1c 1024,4096,16384 "1 --causal" 150
    order g2c 4096,1024 "2 --causal" 150 ;;
  check)
    order g1c 1024,2048,4096,8192 "1 --causal" 120
    tests $((560 - (SECONDS - t0))) tests/test_gluon_fused_bwd.py tests/test_gluon_forward.py ;;
  suite) tests $((${LIMIT:-560} - (SECONDS - t0))) tests/test_bounds_structured.py tests/test_kernel_gpu.py \
           tests/test_validate_gpu.py tests/test_audit.py tests/test_rowsum_depth.py ;;
  table)
    timeout 220 python3 bench/run.py --grid table --dtype bfloat16 --backends ours,torch-sdpa-cudnn,torch-sdpa-flash \
      --rounds 2 --no-memory --out "$O/table" 2>&1 | grep -v "^bench:" | tail -40 | tee "$O/table.log" ;;
  attack)  # the banded fused kernel (given fused tiles) against the bounds, causal, 7 families x bf16 / fp16
    mkdir -p "$O/attack"
    timeout 430 python3 bench/bounds_attack.py --source kernel --device cuda --workers 14 --seeds 0 --d 64 --nk 2048 \
      --nq 2048 --fused-dq --causal top_left --precisions bfloat16:bf16 float16:fp16 --out "$O/attack/attack.jsonl" \
      --table "$O/attack/table.md" 2>&1 | tail -5 ;;
  dsfirst)  # the working tree's gluon_bwd (dS before dV's issue) against bench/_scratch/base_bwd_main.py: timed, then
            # bit for bit
    timeout 200 python3 bench/gluon_ab.py --base-fwd kernels/gluon_fwd.py --base-bwd bench/_scratch/base_bwd_main.py \
      --rounds 3 --cells 128:4096:0,128:16384:0,128:4096:1 --out "$O/ab" 2>&1 | grep -v "^round" | tee "$O/ab.log"
    FLASHCHECK_FORWARD_ENGINE=gluon timeout 150 python3 bench/gluon_bitwise.py --base-fwd kernels/gluon_fwd.py \
      --base-bwd bench/_scratch/base_bwd_main.py 2>&1 | tee "$O/bitwise.log" | tail -8 ;;
  tests) tests 500 tests/test_gluon_forward.py tests/test_gluon_fused_bwd.py ;;
  *) echo "usage: $0 groups | tests | band | band2 | check | suite | table | attack | dsfirst"; exit 2 ;;
esac
echo "done at $((SECONDS - t0)) s"
pack

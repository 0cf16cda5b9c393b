#!/usr/bin/env bash
# Session 2026-11-29g's device calls (bench/NOTES.md "Session 2026-11-29g"):
#   bash bench/gpu_2026_11_29g.sh m    # after both merges (main's previous tree cc0b647 in _base/): the GPU tests the
#                                      # merges touch, the A/B against cc0b647 on the cells they move, issue 10's table
#   bash bench/gpu_2026_11_29g.sh m2   # the same tests again, -v (m's limit cut 6 unnamed ones), and the A/B shorter
#                                      # (as run: `-m gpu` let the slow tier in; `-m "gpu and not slow"` leaves it out)
# and for the next session (NOTES 29g Next 1):
#   bash bench/gpu_2026_11_29g.sh prof # ncu on the Gluon backward's two kernels, d = 128 N = 16k bf16, and the d = 64
#                                      # N = 1k causal forward, triton_fwd against Gluon (~5 min): why the
#                                      # dK/dV kernel runs its products ~20 % slower than the dQ kernel (pipes, stalls,
#                                      # the SM clock under the power cap, shared-memory traffic)
#   bash bench/gpu_2026_11_29g.sh loop # the loop-around-the-block forward (NOTES 29g Next 2) on its failing case,
#                                      # block by block, then under compute-sanitizer (~2 min)
# and the call for the two branches, before their merge:
# branch short-bwd checked out, main's tree in _base/ and branch band-pairs' whole tree in _bp/:
#   git checkout short-bwd && mkdir -p _base _bp
#   git archive main flashcheck kernels proofs reference | tar -x -C _base
#   git archive band-pairs | tar -x -C _bp
#   bash bench/gpu_2026_11_29g.sh
# Both branches' GPU tests at once (correctness only, 8 workers each), then the two timings alone, one after the other.
set -uf  # (no globbing)
export PYTHONPATH=. PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
O=${OUT:-/tmp/gpu_2026_11_29g}
mkdir -p "$O"
if [ "${1:-}" = loop ]; then
  timeout 120 python3 bench/loop_pair_probe.py 2>&1 | tail -40 | tee "$O/loop_probe.log"
  timeout 100 python3 bench/loop_pair_probe.py --B 1 --H 2 --N 1000 --d 64 2>&1 | tail -20 | tee "$O/loop_probe64.log"
  CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  if [ -n "$CS" ]; then
    timeout 300 "$CS" --tool memcheck --show-backtrace device python3 bench/loop_pair_probe.py 2>&1 | head -80 \
      | tee "$O/loop_memcheck.log"
  else
    echo "no compute-sanitizer on this machine"
  fi
  exit 0
fi
if [ "${1:-}" = prof ]; then
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  [ -n "$NCU" ] || { echo "no ncu on this machine"; exit 2; }
  SEC="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
    --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy"
  MET="--metrics sm__cycles_elapsed.avg.per_second,sm__inst_executed_pipe_tensor_op_gmma.sum,\
sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,\
l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__sass_inst_executed_op_local_ld.sum"
  for k in dkdv dq; do  # the sections, then the metrics apart (a metric this ncu does not know fails its run only)
    for what in sections metrics; do
      opts=$SEC; [ $what = metrics ] && opts=$MET
      timeout 120 "$NCU" --clock-control none --kernel-name "regex:attn_bwd_${k}_gluon_kernel" --launch-skip 2 \
        --launch-count 1 $opts python3 bench/kernel_speed.py --profile-once --d 128 --N 16384 --backward \
        > "$O/ncu_${k}_${what}.log" 2>&1
      echo "== $k $what"; grep -E "Duration|SM Frequency|Throughput|Pipe|gmma|Issue Slots|No Eligible|Stall|Warp \
Cycles |local_ld|shared|Registers|per_second|inst_executed|==ERROR==" "$O/ncu_${k}_${what}.log" | head -50
    done
  done
  # the worst forward cell, d = 64 N = 1k causal: triton_fwd's 64 x 64 tile ("auto") against the paired Gluon
  # forward (FLASHCHECK_FORWARD_ENGINE=gluon), 270 vs 250 TFLOP/s this session, cuDNN 333
  for eng in auto gluon; do
    kern=attn_fwd_kernel; [ $eng = gluon ] && kern=attn_fwd_gluon_kernel
    FLASHCHECK_FORWARD_ENGINE=$eng timeout 120 "$NCU" --clock-control none --kernel-name "regex:^$kern" \
      --launch-skip 2 --launch-count 1 $SEC python3 bench/kernel_speed.py --profile-once --d 64 --N 1024 --causal \
      > "$O/ncu_fwd64_1k_causal_$eng.log" 2>&1
    echo "== fwd d64 1k causal $eng"; grep -E "Duration|SM Frequency|Throughput|Pipe|Issue Slots|No Eligible|Stall|\
Warp Cycles |Registers|Waves|==ERROR==" "$O/ncu_fwd64_1k_causal_$eng.log" | head -30
  done
  exit 0
fi
if [ "${1:-}" = m2 ]; then
  [ -d _base/kernels ] || { echo "no _base/: see the header"; exit 2; }
  t0=$SECONDS
  timeout 290 python3 -m pytest -v -n 15 -p no:cacheprovider -m gpu tests/test_gluon_forward.py \
    tests/test_kernel_gpu.py 2>&1 | grep -E "PASSED|FAILED|ERROR|passed|failed" > "$O/m2_tests.log"
  echo "tests done at $((SECONDS - t0)) s"; grep -c PASSED "$O/m2_tests.log"
  grep -E "FAILED|ERROR" "$O/m2_tests.log" | head
  tail -2 "$O/m2_tests.log"
  timeout 110 python3 bench/ab_trees.py --base _base --rounds 2 --out "$O/ab_merged" \
    --cells 128:1024:1,64:1024:0,64:2048:1 2>&1 | grep -v "^round" | tee "$O/ab_merged.log"
  echo "done at $((SECONDS - t0)) s"
  exit 0
fi
if [ "${1:-}" = m ]; then
  [ -d _base/kernels ] || { echo "no _base/: see the header"; exit 2; }
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$O/device.txt"
  t0=$SECONDS
  timeout 260 python3 -m pytest -q -n 15 -p no:cacheprovider -m gpu tests/test_gluon_forward.py \
    tests/test_short_tile.py tests/test_long_tile.py tests/test_kernel_gpu.py tests/test_kernel_forward.py \
    tests/test_kernel_masks.py \
    tests/test_program_order.py tests/test_band_tile.py 2>&1 | tail -8 | tee "$O/m_tests.log"
  echo "tests done at $((SECONDS - t0)) s"
  timeout 150 python3 bench/ab_trees.py --base _base --rounds 4 --out "$O/ab_merged" \
    --cells 128:1024:1,64:1024:0,64:2048:1,128:2048:1 2>&1 | grep -v "^round" | tee "$O/ab_merged.log"
  echo "A/B done at $((SECONDS - t0)) s"
  timeout $((585 - (SECONDS - t0))) python3 bench/run.py --grid table --dtype bfloat16 \
    --backends ours,torch-sdpa-cudnn,torch-sdpa-flash --rounds 2 --no-memory --out "$O/table" 2>&1 \
    | grep -v "^bench:" | tail -40 | tee "$O/table.log"
  echo "done at $((SECONDS - t0)) s"
  exit 0
fi
[ -d _base/kernels ] && [ -d _bp/kernels ] || { echo "no _base/ or _bp/: see the header"; exit 2; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$O/device.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >> "$O/device.txt"
t0=$SECONDS
(timeout 220 python3 -m pytest -q -n 8 -p no:cacheprovider tests/test_long_tile.py tests/test_short_tile.py \
  tests/test_gluon_forward.py -k "d64 or long or short or dense or launches" > "$O/sb_tests.log" 2>&1) &
(cd _bp && timeout 220 python3 -m pytest -q -n 8 -p no:cacheprovider tests/test_gluon_forward.py \
  -k "paired or compiles" > "$O/bp_tests.log" 2>&1) &
wait
echo "tests done at $((SECONDS - t0)) s"
for f in sb_tests bp_tests; do echo "== $f"; tail -4 "$O/$f.log"; done
timeout 160 python3 bench/ab_trees.py --base _base --rounds 5 --out "$O/ab_short_bwd" \
  --cells 64:1024:0,64:1536:0,64:1024:1 2>&1 | grep -v "^round" | tee "$O/ab_short_bwd.log"
echo "A/B done at $((SECONDS - t0)) s"
(cd _bp && timeout $((575 - (SECONDS - t0))) python3 bench/fwd_variants.py --variants unpaired,paired --rounds 3 \
  --out "$O/band_pairs" --cells 128:1024:1,128:2048:1,64:1024:1,64:2048:1,128:4096:1,64:4096:1 2>&1 \
  | tee "$O/band_pairs.log")
echo "done at $((SECONDS - t0)) s"

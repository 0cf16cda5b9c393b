#!/usr/bin/env bash
# One call on the GPU machine (the device tool), from the repo root:
#   bash bench/device_session.sh tests   # GPU-marked tests + `validate ours` in bf16/fp16/fp32 on CUDA
#   bash bench/device_session.sh kernel  # every tests/test_kernel_*.py on CUDA + validate ours
#   bash bench/device_session.sh speed   # bench/run.py side by side + the GPU audit
#   bash bench/device_session.sh suite   # the whole pytest suite on CUDA (-n 16; the answer key is slow tier), then
#                                        # the validate answer key (tests/test_validate_gpu.py) alone
#   bash bench/device_session.sh variants  # ncu profile of the forward (d=128 default, d=64 accurate),
#                                        # then bench/kernel_speed.py --variants (fwd variants beside cuDNN)
#   bash bench/device_session.sh tuned   # after a tile/code-generation change: accurate/default forward
#                                        # cost A/B, kernel + audit tests on CUDA, the GPU audit with both
#                                        # modes (bf16, N sweep + published), bench/run.py ours/cuDNN/FA2 bf16
#   bash bench/device_session.sh modes   # cost of the accurate backward (A/B), bench/run.py bf16 (+ memory)
#                                        # and fp16, the kernel-mode tests on CUDA
# Logs and reports go under $OUT (the device tool brings them back).
set -uo pipefail
export PYTHONPATH=. PYTHONUNBUFFERED=1 CI=true
OUT=${OUT:-device-out}
W=$(mktemp -d)   # everything is written here and packed into $OUT/results.tgz (the tool returns <= 8 files)
mkdir -p "$OUT"
trap 'tar czf "$OUT/results.tgz" -C "$W" . 2>/dev/null' EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)"
case "${1:-tests}" in
  tests)
    timeout ${T1:-330} python3 -m pytest -m "gpu and not slow" -q -n 8 -p no:cacheprovider tests 2>&1 | tee "$W/gpu_tests.log" | tail -40
    timeout ${T2:-170} python3 -m flashcheck validate ours --device cuda --dtype bfloat16,float16,float32 --profile ci \
        -n 4 --json "$W/validate_ours.json" 2>&1 | tee "$W/validate_ours.log" | tail -60
    ;;
  kernel)
    # every kernel test file on CUDA (not only the gpu-marked ones), then validate ours in all dtypes
    timeout ${T1:-300} python3 -m pytest -q -n 8 -p no:cacheprovider tests/test_kernel_*.py tests/test_audit.py \
        2>&1 | tee "$W/kernel_tests.log" | tail -25
    timeout ${T2:-250} python3 -m flashcheck validate ours --device cuda --dtype bfloat16,float16,float32 --profile ci \
        -n 8 --json "$W/validate_ours.json" 2>&1 | tee "$W/validate_ours.log" | tail -25
    ;;
  modes)
    timeout ${T1:-60} python3 bench/accuracy_modes.py --ab --out "$W" 2>&1 | tee "$W/ab.log" | grep "A/B"
    timeout ${T2:-235} python3 bench/run.py --dtype bfloat16 --out "$W/bf16" > "$W/bench_bf16.log" 2>&1
    timeout ${T3:-80} python3 -m pytest -q -n 8 -p no:cacheprovider tests/test_kernel_accurate.py \
        tests/test_kernel_gpu.py tests/test_kernel_compile.py 2>&1 | tee "$W/kernel_tests.log" | tail -4
    timeout ${T4:-70} python3 bench/run.py --dtype float16 --backends ours,torch-sdpa-cudnn,torch-sdpa-flash \
        --no-memory --out "$W/fp16" > "$W/bench_fp16.log" 2>&1
    for f in bf16 fp16; do [ -f "$W/$f/bench.md" ] && sed -n '/ours\/peer/,$p' "$W/$f/bench.md"; done
    ;;
  suite)
    # the answer key runs validate with -n 8 itself: alone, after the rest, so the two do not share cores
    OMP_NUM_THREADS=1 timeout ${T1:-480} python3 -m pytest -q -n 16 --dist worksteal -p no:cacheprovider -rf \
        --durations=12 2>&1 | tee "$W/suite.log" | tail -30
    FLASHCHECK_RESULTS="$W" timeout ${T2:-400} python3 -m pytest -q -s -p no:cacheprovider -rf \
        -m slow tests/test_validate_gpu.py 2>&1 | tee "$W/answer_key.log" | grep -E "ANSWER-KEY|passed|failed"
    ;;
  variants)
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    for prof in "128 default" "64 accurate"; do
      set -- $prof
      [ -n "$NCU" ] && timeout ${T0:-80} "$NCU" --clock-control none --kernel-name regex:attn_fwd_kernel \
          --launch-skip 2 --launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis \
          --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats \
          python3 bench/kernel_speed.py --profile-once --d "$1" --precision "$2" > "$W/ncu_d$1_$2.log" 2>&1
      grep -E "Throughput|Registers Per|Occupancy|Warp Cycles Per Issued|Issue Slots Busy|Executed Ipc A|No Eligible|Active Warps Per|Shared Memory Per Block|Block Limit|Duration|==PROF==|==ERROR==" \
          "$W/ncu_d$1_$2.log" | head -40
    done
    timeout ${T1:-300} python3 bench/kernel_speed.py --variants --out "$W" 2>&1 | tee "$W/variants.log" | grep -E "BEST|^d=|Error" | tail -24
    timeout ${T2:-100} python3 bench/kernel_speed.py --variants --ws --out "$W" 2>&1 | tee "$W/variants_ws.log" | grep -E "BEST|^d=|Error" | tail -14
    ;;
  tuned)
    timeout ${T1:-80} python3 bench/kernel_speed.py --accurate-ab --out "$W" 2>&1 | tee "$W/accurate_ab.log" | grep -E "^AB|Error"
    timeout ${T2:-150} python3 -m pytest -q -n 8 -p no:cacheprovider -m "not slow" tests/test_kernel_*.py tests/test_audit.py \
        2>&1 | tee "$W/kernel_tests.log" | tail -6
    timeout ${T3:-140} python3 -m flashcheck audit --device cuda --out "$W/audit" --dtype bfloat16 --N 128,256 \
        --sweeps N,published 2>&1 | tail -3
    [ -f "$W/audit/report.md" ] && sed -n '/^## bf16, N=2048/,/^## /p' "$W/audit/report.md" | head -16
    timeout ${T4:-120} python3 bench/run.py --dtype bfloat16 --backends ours,ours-accurate,torch-sdpa-cudnn,torch-sdpa-flash \
        --no-memory --out "$W/bench" > "$W/bench.log" 2>&1
    [ -f "$W/bench/bench.md" ] && sed -n '/ours\/peer/,$p' "$W/bench/bench.md"
    ;;
  speed)
    timeout ${T1:-240} python3 bench/run.py --out "$W/bench" 2>&1 | tee "$W/bench.log" | tail -30
    timeout ${T2:-250} python3 -m flashcheck audit --device cuda --out "$W/audit" ${AUDIT_ARGS:-} 2>&1 | tail -40
    ;;
esac

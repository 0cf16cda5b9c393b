#!/bin/bash
# Session 2026-11-26d: ncu on the worst forward cell (d 128, N 1k, causal) and on the backward's two kernels
# (d 128, N 16k; never profiled before). From the repo root on the device machine; logs in $OUT.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
SEC="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats --section MemoryWorkloadAnalysis"
KEEP="Throughput|Registers Per|Occupancy|Warp Cycles Per Issued|Issue Slots Busy|Executed Ipc A|No Eligible|Active Warps Per|Shared Memory Per Block|Block Limit|Duration|Waves Per SM|Grid Size|==PROF==|==ERROR=="
prof() {  # name kernel-regex args...
  local name=$1 kern=$2; shift 2
  timeout 100 "$NCU" --clock-control none --kernel-name "regex:$kern" --launch-skip 2 --launch-count 1 $SEC \
      python3 bench/kernel_speed.py --profile-once "$@" > "$OUT/ncu_$name.log" 2>&1
  echo "== $name"; grep -E "$KEEP" "$OUT/ncu_$name.log" | head -34
}
prof fwd_d128_N1k_causal attn_fwd_kernel --d 128 --N 1024 --causal
prof dkdv_d128_N16k attn_bwd_dkdv_kernel --d 128 --N 16384 --backward
prof dq_d128_N16k attn_bwd_dq_kernel --d 128 --N 16384 --backward

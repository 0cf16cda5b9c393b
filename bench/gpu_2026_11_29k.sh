#!/usr/bin/env bash
# Session 2026-11-29k's device calls (bench/NOTES.md "Session 2026-11-29k"): calls 1-4 were
# `bash bench/gpu_2026_11_29j.sh k | m | s1 | t2` on the branches merged (try-29k = main + bwd-ring-slot +
# d64-band-short); call 5's command is in bench/results/h200-2026-11-29k/call5/run.txt. For the next session:
#   bash bench/gpu_2026_11_29k.sh prof  # where the backward's warps wait, instruction by instruction: ncu's
#                                       # SourceCounters on the Gluon dK/dV and dQ kernels (d = 128 N = 16k; dK/dV also
#                                       # 4k causal), each report's SASS page summed by bench/ncu_source.py (~5 min)
#   bash bench/gpu_2026_11_29f.sh p32   # the three float32 backward properties (9 min), not run since 29g
source "$(dirname "$0")/gpu_session.sh"  # set -uf, the environment, $O, device.txt, t0, pack
case "${1:-}" in
  prof)
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
    [ -n "$NCU" ] || { echo "no ncu on this machine"; exit 2; }
    "$NCU" --version | tail -1 >> "$O/device.txt"
    SEC="--section SourceCounters --section WarpStateStats --section SpeedOfLight \
      --section MemoryWorkloadAnalysis_Tables"
    for job in "dkdv 16384" "dq 16384" "dkdv 4096 --causal"; do
      set -- $job
      k=$1; n=$2; name="${k}_$n${3:+_causal}"
      timeout 150 "$NCU" --clock-control none --kernel-name "regex:attn_bwd_${k}_gluon_kernel" --launch-skip 2 \
        --launch-count 1 $SEC --import-source no -o "$O/$name" -f python3 bench/kernel_speed.py --profile-once \
        --d 128 --N "$n" ${3:-} --backward > "$O/$name.log" 2>&1
      "$NCU" --import "$O/$name.ncu-rep" --page details > "$O/${name}_details.txt" 2>&1
      "$NCU" --import "$O/$name.ncu-rep" --page source --csv --print-source sass > "$O/${name}_sass.csv" 2>&1
      echo "== $name"; grep -E "Duration|SM Frequency|Warp Cycles Per Issued|Bank|==ERROR==" \
        "$O/${name}_details.txt" | head -12
      python3 bench/ncu_source.py "$O/${name}_sass.csv" --top 25 2>&1 | tee "$O/${name}_stalls.txt" | head -50
      gzip -f "$O/${name}_sass.csv"; rm -f "$O/$name.ncu-rep"  # (the report: binary, MBs; its pages are kept)
    done ;;
  *) echo "usage: $0 prof"; exit 2 ;;
esac

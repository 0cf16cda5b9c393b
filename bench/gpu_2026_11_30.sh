#!/usr/bin/env bash
# Session 2026-11-30's device calls (bench/NOTES.md "Session 2026-11-30"). Each writes under $OUT and packs it into
# one tarball ($OUT/call.tgz: the device tool returns few files). bench/_scratch is git-ignored locally (in
# .git/info/exclude): pass it in the device tool's `carry`.
#   bash bench/gpu_2026_11_30.sh ab VARIANTS  # A/B of kernels/gluon_bwd.py variants (bench/_scratch/var_<v>.py each,
#                                             # copied over kernels/gluon_bwd.py in turn) against
#                                             # bench/_scratch/base_bwd_main.py (main's), fwd + bwd through the
#                                             # launcher (bench/gluon_ab.py); with PROF=name, then ncu's
#                                             # SourceCounters of the last variant's dK/dV kernel (d 128 16k)
#   bash bench/gpu_2026_11_30.sh check        # the working tree's Gluon kernels bit for bit against main's
#                                             # (bench/gluon_bitwise.py), their GPU tests
#   bash bench/gpu_2026_11_30.sh table        # issue 10's table, then (unless NO_PROF) ncu of the d = 64 dK/dV (4k,
#                                             # 4k causal) and dQ (4k) kernels
#   bash bench/gpu_2026_11_30.sh fused        # (for the next session, on branch fused-lse-first) the fused d = 64
#                                             # kernel against bench/_scratch/base_fused_main.py (main's
#                                             # kernels/gluon_bwd_fused.py): gluon_ab at 16k / 8k, its GPU tests; then
#                                             # ncu of the fused kernel (16k) and of the forward at d = 64 1k causal
source "$(dirname "$0")/gpu_session.sh"  # set -uf, the environment, $O, device.txt, t0, pack
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
prof() {  # prof NAME KERNEL(dkdv|dq|fused|fwd) D N [--causal]: ncu SourceCounters, the SASS page summed by
          # bench/ncu_source.py --hot 0.5 (the tile loops apart from the producer's idle warps, by stall reason)
  local name=$1 k=$2 d=$3 n=$4 c=${5:-} re bwd=--backward
  if [ "$k" = fwd ]; then re=attn_fwd_gluon_kernel; bwd=; else re=attn_bwd_${k}_gluon_kernel; fi
  timeout 150 "$NCU" --clock-control none --kernel-name "regex:$re" --launch-skip 2 \
    --launch-count 1 --section SourceCounters --section WarpStateStats --section SpeedOfLight --import-source no \
    -o "$O/$name" -f python3 bench/kernel_speed.py --profile-once --d "$d" --N "$n" $c $bwd > "$O/$name.log" 2>&1
  "$NCU" --import "$O/$name.ncu-rep" --page details > "$O/${name}_details.txt" 2>&1
  "$NCU" --import "$O/$name.ncu-rep" --page source --csv --print-source sass > "$O/${name}_sass.csv" 2>&1
  echo "== $name"; grep -E "Duration|SM Frequency|Compute \(SM\)|Warp Cycles Per Issued" "$O/${name}_details.txt"
  python3 bench/ncu_source.py "$O/${name}_sass.csv" --top 12 --hot 0.5 2>&1 | tee "$O/${name}_stalls.txt" | tail -22
  gzip -f "$O/${name}_sass.csv"; rm -f "$O/$name.ncu-rep"
}
case "${1:-}" in
  ab)
    cp kernels/gluon_bwd.py "$O/main_gluon_bwd.py"
    for v in ${2//,/ }; do
      cp "bench/_scratch/var_$v.py" kernels/gluon_bwd.py
      echo "=== variant $v at $((SECONDS - t0)) s"
      timeout $((${AB_LIMIT:-200})) python3 bench/gluon_ab.py --base-fwd kernels/gluon_fwd.py \
        --base-bwd bench/_scratch/base_bwd_main.py --rounds "${ROUNDS:-3}" --cells "${CELLS:-128:16384:0,128:4096:1}" \
        --out "$O/ab_$v" 2>&1 | tee "$O/ab_$v.log"
    done
    [ -n "${PROF:-}" ] && prof "dkdv_${PROF}" dkdv 128 16384
    cp "$O/main_gluon_bwd.py" kernels/gluon_bwd.py ;;
  check)  # the working tree's kernels: bit for bit against bench/_scratch/base_bwd_main.py, then the Gluon GPU
           # tests
    FLASHCHECK_FORWARD_ENGINE=gluon timeout 220 python3 bench/gluon_bitwise.py --base-fwd kernels/gluon_fwd.py \
      --base-bwd bench/_scratch/base_bwd_main.py 2>&1 | tee "$O/bitwise.log" | tail -8
    echo "bitwise done at $((SECONDS - t0)) s"
    timeout $((${TESTS_LIMIT:-240})) python3 -m pytest -q -n 15 -p no:cacheprovider -m "gpu and not slow" \
      tests/test_gluon_forward.py tests/test_gluon_fused_bwd.py 2>&1 | grep -E "passed|failed|^E  |^FAILED" | head -20 \
      | tee "$O/tests.log"
    echo "tests done at $((SECONDS - t0)) s" ;;
  table)
    timeout 200 python3 bench/run.py --grid table --dtype bfloat16 --backends ours,torch-sdpa-cudnn,torch-sdpa-flash \
      --rounds 2 --no-memory --out "$O/table" 2>&1 | grep -v "^bench:" | tail -40 | tee "$O/table.log"
    echo "table done at $((SECONDS - t0)) s"
    if [ -z "${NO_PROF:-}" ]; then
      prof dkdv64_4k dkdv 64 4096
      prof dkdv64_4k_causal dkdv 64 4096 --causal
      prof dq64_4k dq 64 4096
    fi ;;
  fused)
    [ -f bench/_scratch/base_fused_main.py ] || { echo "first, locally: mkdir -p bench/_scratch && git show \
main:kernels/gluon_bwd_fused.py > bench/_scratch/base_fused_main.py (and carry bench/_scratch)"; exit 2; }
    timeout 150 python3 bench/gluon_ab.py --base-fused bench/_scratch/base_fused_main.py --rounds "${ROUNDS:-5}" \
      --cells 64:16384:0,64:8192:0 --out "$O/ab_fused" 2>&1 | tee "$O/ab_fused.log"
    echo "ab done at $((SECONDS - t0)) s"
    timeout 200 python3 -m pytest -q -n 15 -p no:cacheprovider -m "gpu and not slow" tests/test_gluon_fused_bwd.py \
      2>&1 | grep -E "passed|failed|^E  |^FAILED" | head -20 | tee "$O/tests.log"
    echo "tests done at $((SECONDS - t0)) s"
    prof fused64_16k fused 64 16384
    prof fwd64_1k_causal fwd 64 1024 --causal ;;
  *) echo "usage: $0 ab VARIANTS | check | table | fused"; exit 2 ;;
esac
echo "done at $((SECONDS - t0)) s"
pack

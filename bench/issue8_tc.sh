#!/usr/bin/env bash
# Issue 8's closing table, second call: the tensor-core precisions (tf32, fp16, bf16) on one commit, every family,
# N_k 512 / 4096 (N_q 64, seeds 0 1), 16384 and 65536 (N_q 16, seed 0), unmasked (the bottom-right causal lane is
# bench/results/h100-2026-11-27b/causal_tc); then fp32 ieee seed 1 at 512 / 4096. Logs and JSONL in $OUT.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
OUT=${OUT:-device-out}; mkdir -p "$OUT"
T0=$(date +%s)
run() { local lim=$1 name=$2; shift 2; local t=$(date +%s)
  timeout -k 10 "$lim" "$@" > "$OUT/$name.log" 2>&1; echo "== $name: exit $? in $(( $(date +%s) - t )) s (at $(( $(date +%s) - T0 )) s)"
  tail -${TAIL:-17} "$OUT/$name.log"; }
A="python3 bench/bounds_attack.py --source kernel --device cuda --workers 14"
P="--precisions float32:tf32 float16:fp16 bfloat16:bf16"
TAIL=17 run 200 tc_short $A $P --nk 512 4096 --nq 64 --seeds 0 1 --out "$OUT/tc_short.jsonl"
TAIL=17 run 330 tc_long $A $P --nk 16384 65536 --nq 16 --seeds 0 --out "$OUT/tc_long.jsonl"
if [ -n "${IEEE_S1:-}" ]; then TAIL=7 run 150 ieee_s1 $A --precisions float32:ieee --nk 512 4096 --nq 64 --seeds 1 --out "$OUT/ieee_s1.jsonl"; fi

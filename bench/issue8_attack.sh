#!/usr/bin/env bash
# Issue 8's last device call: the final bounds (9e24df4) against our fp32 "ieee" kernel on the GPU.
# Each step under its own timeout; logs and JSONL in $OUT.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
OUT=${OUT:-device-out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/versions.txt"
python3 -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/versions.txt"
T0=$(date +%s)
run() { local lim=$1 name=$2; shift 2; local t=$(date +%s)
  timeout -k 10 "$lim" "$@" > "$OUT/$name.log" 2>&1; echo "== $name: exit $? in $(( $(date +%s) - t )) s (at $(( $(date +%s) - T0 )) s)"
  tail -${TAIL:-8} "$OUT/$name.log"; }
A="python3 bench/bounds_attack.py --source kernel --device cuda --workers 14 --seeds 0 --precisions float32:ieee"
TAIL=6 run ${T_DELTA:-170} delta python3 bench/adversaries/delta_residue.py --source kernel --device cuda --n 1024 4096 16384
run ${T_U:-200} ieee_u $A --nk 512 4096 --nq 64 --out "$OUT/ieee_u.jsonl" --table "$OUT/ieee_u.md"
run ${T_C:-150} ieee_c $A --nk 512 4096 --nq 64 --causal bottom_right --out "$OUT/ieee_c.jsonl" --table "$OUT/ieee_c.md"
run ${T_L:-150} ieee_16k $A --nk 16384 --nq 16 --out "$OUT/ieee_16k.jsonl" --table "$OUT/ieee_16k.md"

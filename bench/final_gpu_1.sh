#!/bin/bash
# Lead's merged-main device call 1 (2026-11-23b): the kernel tests on CUDA (kern's 128x128 default tile,
# the accurate forward's descriptors), then the GPU audit with both of our modes beside FA2, cuDNN,
# efficient, flex and math (issue 11). Logs under $OUT.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 CI=true OMP_NUM_THREADS=2
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)"
t=$(date +%s)
timeout -k 10 ${T1:-190} python3 -m pytest -q -rf -n 14 -p no:cacheprovider -m "not slow" tests/test_kernel_*.py \
    > "$OUT/kernel_tests.log" 2>&1; echo "kernel tests rc=$? in $(( $(date +%s) - t )) s"
grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/kernel_tests.log" | tail -12
t=$(date +%s)
timeout -k 10 ${T2:-230} python3 -m flashcheck audit --device cuda --out "$OUT/audit" --dtype bfloat16 --N 128,256 \
    --sweeps N,published > "$OUT/audit.log" 2>&1; echo "audit rc=$? in $(( $(date +%s) - t )) s"
tail -3 "$OUT/audit.log"
[ -f "$OUT/audit/report.md" ] && grep -n "^## " "$OUT/audit/report.md" | head -20
[ -f "$OUT/audit/report.md" ] && sed -n '/^## bf16, N=2048/,/^## /p' "$OUT/audit/report.md" | head -24
cd "$OUT" && tar czf audit.tgz audit && rm -rf audit

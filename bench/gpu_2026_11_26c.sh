#!/bin/bash
# Session 2026-11-26c, first device call: the compiled-code record of the device's Triton (the rowsum's
# addition tree and the exponent arguments' forms, bench/compile_forward.py --record), then the attack of
# bench/attack_gpu_2026_11_26.sh with that record in place (ours_precision reads it from proofs/measurements/).
#   RECORD_WORKERS (12), then the attack's variables (PRECS, SEEDS_B, NK_C, TA, TB, TC, *_WORKERS).
# The record lands in $OUT/ as well: commit it as proofs/measurements/forward_compiled_triton<version>.json.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
T0=$(date +%s)
V=$(python3 -c "import triton; print(triton.__version__)")
REC=proofs/measurements/forward_compiled_triton$V.json
timeout "${TR:-200}" python3 bench/compile_forward.py --record "$REC" --workers "${RECORD_WORKERS:-12}" \
    > "$OUT/record.log" 2>&1
echo "[$(( $(date +%s) - T0 )) s] record rc=$? ($REC)"
grep -v -i warn "$OUT/record.log" | tail -32
cp "$REC" "$OUT/" 2>/dev/null
python3 bench/compile_forward.py --dtype float32 --dot ieee --d 64 2>&1 | grep -v -i warn | grep -v "^TTGIR #loc" \
    > "$OUT/forward_fp32_ieee_d64.txt"
tail -3 "$OUT/forward_fp32_ieee_d64.txt"
bash bench/attack_gpu_2026_11_26.sh
echo "[$(( $(date +%s) - T0 )) s] done"

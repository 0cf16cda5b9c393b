#!/bin/bash
# Lead's merged-main device call (2026-11-23c): issue 9's answer key on an idle machine (bench/validate_gpu.sh key:
# six targets, bf16, ci profile, -n 8, each <= 90 s), then issue 8's attack at N_k = 65536 with N_q = 16 (all 28
# (precision, family) pairs, seed 0, every core) with the time left. Logs under $OUT.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
t=$(date +%s)
T1=${TK:-380} bash bench/validate_gpu.sh key
echo "key step: $(( $(date +%s) - t )) s"
export OMP_NUM_THREADS=1
left=$(( ${TOTAL:-570} - ($(date +%s) - t) ))
echo "attack: N_k = 65536, N_q = 16, limit ${left} s"
timeout -k 5 "$left" python3 bench/bounds_attack.py --source kernel --device cuda --workers 15 \
    --out "$OUT/attack_nq16.jsonl" --nk 65536 --nq 16 --seeds 0 > "$OUT/log_attack_nq16.txt" 2>&1
echo "attack rc=$? (124: cut)"
pkill -f bounds_attack.py
grep -c . "$OUT/attack_nq16.jsonl"
grep -h "over=[1-9]\|Error\|Traceback" "$OUT/log_attack_nq16.txt" | head -10
python3 bench/bounds_attack.py --table-from "$OUT/attack_nq16.jsonl" | tee "$OUT/table_nq16.md" | tail -25

#!/usr/bin/env bash
# bench/NOTES.md "Session 2026-11-29h" item 1: where the loop-around-the-block forward (29b's gluon_fwd_loop.py) goes
# wrong, one line a case (bench/loop_pair_probe.py: blocks compared, blocks that differ, a CUDA error).
#   bash bench/results/h200-2026-11-29h/probe_matrix.sh            # call 3: ragged / banded / divisible N, if-wrap
#   bash bench/results/h200-2026-11-29h/probe_matrix.sh spec       # call 4: N % 16 == 0 yet ragged
#   bash bench/results/h200-2026-11-29h/probe_matrix.sh variants   # call 5: four source variants at N = 256
# (as run, call 5 ran call 3's cases first too: a slip in the script's flow, mended here; its log has both)
export PYTHONPATH=. PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
R=/tmp/loop_variants  # the variants, written from 29b's source by loop_variants.py
python3 bench/results/h200-2026-11-29h/loop_variants.py $R
V1=bench/results/h200-2026-11-29b/gluon_fwd_loop.py
V2=$R/gluon_fwd_loop_ifpartial.py
run() { v=$1; shift; r=$(timeout 60 python3 bench/loop_pair_probe.py --variant $v --B 1 --H 2 "$@" 2>&1)
  echo "$(basename $v) $*: blocks $(echo "$r" | grep -c '^b=') differ $(echo "$r" | grep -c differs) \
$(echo "$r" | grep -m1 -oE 'illegal memory access|Error.*')"; }
case "${1:-}" in
  "")
    run $V1 --d 128 --N 1000; run $V1 --d 128 --N 1024 --causal; run $V1 --d 64 --N 512 --causal
    run $V1 --d 64 --N 1000
    run $V2 --d 128 --N 256; run $V2 --d 64 --N 256; run $V2 --d 128 --N 1000; run $V2 --d 64 --N 512 --causal
    run $V2 --d 128 --N 1024 --causal; run $V2 --d 128 --N 1024; run $V2 --d 64 --N 1024 ;;
  spec)  # the specialization (N % 16 == 0) or the runtime path (no partial tile)?
    run $V1 --d 128 --N 1008; run $V1 --d 64 --N 1008; run $V1 --d 128 --N 1016; run $V1 --d 128 --N 1008 --causal ;;
  variants)  # which source change makes the no-partial-tile case right
    for n in once barrier offset sepzero; do for d in 128 64; do
      run $R/gluon_fwd_loop_$n.py --d $d --N 256
      [ $n = once ] && timeout 60 python3 bench/loop_pair_probe.py --variant $R/gluon_fwd_loop_once.py --B 1 --H 2 \
        --d $d --N 256 2>&1 | grep "^b="
    done; done ;;
esac

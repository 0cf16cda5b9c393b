#!/usr/bin/env bash
# Session 2026-11-29j's device calls (bench/NOTES.md "Session 2026-11-29j"):
#   bash bench/gpu_2026_11_29j.sh a   # (branch persistent-banded) the PERSISTENT build's GPU tests, banded cases
#                                     # included (29i's h), then the banded PERSISTENT build timed against the banded
#                                     # pairs and, at d = 64, the product (triton_fwd below LONG_KEYS banded), an
#                                     # unbanded control beside (29i's i, more cells)
#   bash bench/gpu_2026_11_29j.sh b   # the banded PERSISTENT build with its items in the one-block programs' grouped
#                                     # order (kernels/tiles.py grouped_order), timed
#   bash bench/gpu_2026_11_29j.sh c   # the banded PERSISTENT build with each head's blocks heaviest first, heads in
#                                     # order: its GPU tests, then timed
#   bash bench/gpu_2026_11_29j.sh d   # c's build at 8k and 16k causal
#   bash bench/gpu_2026_11_29j.sh s1  # merged main: the GPU suite's first half
#   bash bench/gpu_2026_11_29j.sh t2  # issue 10's table, then the suite's second half
#   bash bench/gpu_2026_11_29j.sh k   # (branch bwd-ring-slot) the dK/dV ring slot through a select: bit for bit,
#                                     # then timed against the kernel without it
#   bash bench/gpu_2026_11_29j.sh m   # (branch d64-band-short) its GPU tests, then issue 10's table
source "$(dirname "$0")/gpu_session.sh"  # set -uf, the environment, $O, device.txt, t0, pack
case "${1:-}" in
  a)
    timeout 150 python3 -m pytest -q -n 15 -p no:cacheprovider -m "gpu and not slow" tests/test_gluon_forward.py \
      -k persistent 2>&1 | grep -E "passed|failed|^E  " | head -12 | tee "$O/persistent_tests.log"
    echo "tests done at $((SECONDS - t0)) s"
    timeout $((560 - SECONDS + t0)) python3 bench/fwd_variants.py --variants persistent,paired --rounds 3 \
      --out "$O/banded_persistent" \
      --cells 128:1024:1,64:1024:1,128:512:1,128:2048:1,64:2048:1,128:4096:1,64:4096:1,128:1024:0 2>&1 \
      | tee "$O/banded_persistent.log"
    echo "done at $((SECONDS - t0)) s" ;;
  b)  # the banded PERSISTENT build's items in the one-block programs' grouped order (tiles.grouped_order) timed
    timeout 300 python3 bench/fwd_variants.py --variants persistent --rounds 3 --out "$O/grouped" \
      --cells 128:1024:1,64:1024:1,128:2048:1,64:2048:1,128:4096:1,64:4096:1 2>&1 | tee "$O/grouped.log"
    echo "done at $((SECONDS - t0)) s" ;;
  c)  # the banded PERSISTENT build with a head's blocks heaviest first, the heads in order (one division a work
      # item, no spill): its GPU tests, then timed
    timeout 150 python3 -m pytest -q -n 15 -p no:cacheprovider -m "gpu and not slow" tests/test_gluon_forward.py \
      -k persistent 2>&1 | grep -E "passed|failed|^E  " | head -12 | tee "$O/persistent_tests_c.log"
    echo "tests done at $((SECONDS - t0)) s"
    timeout 300 python3 bench/fwd_variants.py --variants persistent --rounds 3 --out "$O/headmajor" \
      --cells 128:1024:1,64:1024:1,128:512:1,128:2048:1,64:2048:1,128:4096:1,64:4096:1 2>&1 | tee "$O/headmajor.log"
    echo "done at $((SECONDS - t0)) s" ;;
  d)  # c's build at long banded calls: 8k, 16k causal (d = 128 16k: B 1, H 16, 128 blocks a head, a static
      # imbalance of 1.54 predicted on 132 programs; the others about 1.03)
    timeout 400 python3 bench/fwd_variants.py --variants persistent --rounds 3 --out "$O/headmajor_long" \
      --cells 128:8192:1,64:8192:1,128:16384:1,64:16384:1 2>&1 | tee "$O/headmajor_long.log"
    echo "done at $((SECONDS - t0)) s" ;;
  s1)  # merged main (banded calls PERSISTENT up to BAND_PERSIST_KEYS): the GPU suite's first half (29f's s1)
    OUT=$O/tests1 T1=540 WORKERS=16 bash bench/validate_gpu.sh suite tests --ignore=tests/test_catalog.py \
      --ignore=tests/test_audit.py ;;
  t2)  # s1's cut gluon cases (d = 64 long calls, banded ones PERSISTENT now), issue 10's table, then the suite's
       # second half (29f's s2: catalog, flashcheck/properties, audit; the three float32 backward properties left
       # out, as there)
    timeout 120 python3 -m pytest -q -n 15 -p no:cacheprovider -m "gpu and not slow" tests/test_gluon_forward.py \
      -k "auto_runs_the_gluon_kernels_on_long_d64" 2>&1 | grep -E "passed|failed|^E  " | head -12 | tee "$O/cut1.log"
    echo "cut1 done at $((SECONDS - t0)) s"
    timeout 200 python3 bench/run.py --grid table --dtype bfloat16 --backends ours,torch-sdpa-cudnn,torch-sdpa-flash \
      --rounds 2 --no-memory --out "$O/table" 2>&1 | grep -v "^bench:" | tail -40 | tee "$O/table.log"
    echo "table done at $((SECONDS - t0)) s"
    P32=$(sed -n '/^P32="/,/"$/p' bench/gpu_2026_11_29f.sh | tr -d '"' | sed 's/^P32=//')
    OUT=$O/tests2 T1=$((570 - SECONDS + t0)) WORKERS=16 bash bench/validate_gpu.sh suite tests/test_catalog.py \
      flashcheck/properties tests/test_audit.py $(for x in $P32; do echo --deselect "$x"; done) ;;
  k)  # (branch bwd-ring-slot, next session) the dK/dV kernel's ring slot through a select (no spilled address in
      # its tile loops): bit for bit against the kernel without it (the same arithmetic), then timed
    grep -q "where(Nq < 0" kernels/gluon_bwd.py || { echo "not branch bwd-ring-slot"; exit 2; }
    sed 's/^    slot = gl.where(Nq < 0, 0, it % STAGES)$/    slot = it % STAGES/' kernels/gluon_bwd.py \
      > /tmp/base_bwd.py
    grep -q "where(Nq < 0" /tmp/base_bwd.py && { echo "the base edit no longer applies"; exit 2; }
    FLASHCHECK_FORWARD_ENGINE=gluon timeout 200 python3 bench/gluon_bitwise.py --base-fwd kernels/gluon_fwd.py \
      --base-bwd /tmp/base_bwd.py 2>&1 | tail -30 | tee "$O/bitwise.log"
    echo "bitwise done at $((SECONDS - t0)) s"
    timeout $((560 - SECONDS + t0)) python3 bench/gluon_ab.py --base-fwd kernels/gluon_fwd.py \
      --base-bwd /tmp/base_bwd.py \
      --rounds 5 --cells 128:16384:0,128:4096:0,128:16384:1,128:4096:1,64:4096:1,64:16384:1,128:1024:0 \
      --out "$O/ab_slot" 2>&1 | tail -20 | tee "$O/ab_slot.log"
    echo "done at $((SECONDS - t0)) s" ;;
  m)  # (branch d64-band-short, next session) banded d = 64 calls from SHORT_KEYS keys on gluon_fwd (PERSISTENT),
      # triton_bwd behind: the new GPU tests and the d = 64 Gluon ones, then issue 10's table
    [ -f tests/test_band_short_tile.py ] || { echo "not branch d64-band-short"; exit 2; }
    timeout 300 python3 -m pytest -q -n 15 -p no:cacheprovider -m "gpu and not slow" tests/test_gluon_forward.py \
      -k "d64 or band_short or persistent" 2>&1 | grep -E "passed|failed|^E  " | head -12 \
      | tee "$O/band_short_tests.log"
    echo "tests done at $((SECONDS - t0)) s"
    timeout 200 python3 bench/run.py --grid table --dtype bfloat16 --backends ours,torch-sdpa-cudnn \
      --rounds 2 --no-memory --out "$O/table" 2>&1 | grep -v "^bench:" | tail -16 | tee "$O/table.log"
    echo "done at $((SECONDS - t0)) s" ;;
  *) echo "usage: $0 a|b|c|d|s1|t2|k|m"; exit 2 ;;
esac

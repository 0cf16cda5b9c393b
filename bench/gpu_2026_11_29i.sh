#!/usr/bin/env bash
# Session 2026-11-29i's device calls (bench/NOTES.md "Session 2026-11-29i"):
# _ptxas129/ptxas.xz (calls a, g; in .gitignore): `mkdir -p _ptxas129 && xz -9c
# $(python3 -c "import triton, os; print(os.path.dirname(triton.__file__))")/backends/nvidia/bin/ptxas >
# _ptxas129/ptxas.xz` with Triton 3.9 installed (its ptxas is CUDA 12.9's; the tree plus the plain binary passed the
# carry limit), then `run(..., carry=["_ptxas129"])`.
#   bash bench/gpu_2026_11_29i.sh a   # the ptxas 12.8 diagnosis checked on the device (29b's loop variant bit for bit
#                                     # when ptxas 12.9 compiles it: carry _ptxas129/ptxas.xz, Triton 3.9's ptxas,
#                                     # xz-compressed to fit the carry limit; the qfull variant with Triton 3.6's
#                                     # own), then the PERSISTENT build's GPU tests (bit for bit the one-block
#                                     # programs, 3 programs or one an SM)
#   bash bench/gpu_2026_11_29i.sh c   # where the PERSISTENT build differs from one block a program (bench/
#                                     # persistent_probe.py), and one failing test's message
#   bash bench/gpu_2026_11_29i.sh d|e # the illegal instruction: probes, one test's traceback; compute-sanitizer
#   bash bench/gpu_2026_11_29i.sh f   # PERSISTENT unbanded only: its GPU tests, then timed as b does (unbanded cells)
#   bash bench/gpu_2026_11_29i.sh s1  # with PERSIST_KEYS = 2048: the GPU suite's first half; then `table`: issue 10's
#                                     # table (bench/run.py --grid table)
#   bash bench/gpu_2026_11_29i.sh h   # (branch persistent-banded) its GPU tests, banded cases included; then
#   bash bench/gpu_2026_11_29i.sh i   # the banded PERSISTENT build timed against the banded pairs
#   bash bench/gpu_2026_11_29i.sh b   # the PERSISTENT build timed beside the kernel as launched today (paired at
#                                     # N <= PAIR_KEYS) and cuDNN: bench/fwd_variants.py
source "$(dirname "$0")/gpu_session.sh"  # set -uf, the environment, $O, device.txt, t0, pack
probe() {  # variant source, ptxas ("" Triton's own), then the probe's arguments: one line a case
  v=$1; px=$2; shift 2
  # (a cache of its own under another ptxas: Triton's cache key need not hold the ptxas version)
  # (an empty TRITON_PTXAS_PATH is a path Triton tries: unset it for Triton's own)
  r=$(env ${px:+TRITON_PTXAS_PATH=$px} TRITON_CACHE_DIR=/tmp/triton_cache${px:+_other} timeout 90 \
    python3 bench/loop_pair_probe.py --variant "$v" --B 1 --H 2 "$@" 2>&1)
  echo "$(basename "$v") ptxas=${px:-bundled} $*: blocks $(echo "$r" | grep -c '^b=') differ $(echo "$r" \
    | grep -c differs) $(echo "$r" | grep -m1 -oE 'illegal memory access|Error.*')"
}
case "${1:-}" in
  a)
    python3 bench/results/h200-2026-11-29h/loop_variants.py /tmp/lv
    V=bench/results/h200-2026-11-29b/gluon_fwd_loop.py
    P=""
    if [ -f _ptxas129/ptxas.xz ]; then
      xz -dkf _ptxas129/ptxas.xz && P=$PWD/_ptxas129/ptxas && $P --version | tail -1 >> "$O/device.txt"
    fi
    {
      probe $V "" --d 128 --N 256
      [ -n "$P" ] && probe $V "$P" --d 128 --N 256 && probe $V "$P" --d 64 --N 512 && probe $V "$P" --d 128 --N 1024
      probe /tmp/lv/gluon_fwd_loop_qfull.py "" --d 128 --N 384
      probe /tmp/lv/gluon_fwd_loop_qfull.py "" --d 64 --N 512
      probe /tmp/lv/gluon_fwd_loop_qfull.py "" --d 128 --N 1024
    } 2>&1 | tee "$O/probes.log"
    echo "probes done at $((SECONDS - t0)) s"
    timeout 330 python3 -m pytest -q -n 15 -p no:cacheprovider -m "gpu and not slow" tests/test_gluon_forward.py \
      -k persistent 2>&1 | tail -12 | tee "$O/persistent_tests.log"
    echo "done at $((SECONDS - t0)) s" ;;
  b)
    timeout 500 python3 bench/fwd_variants.py --variants persistent --rounds 3 --out "$O/persistent" \
      --cells 64:1024:0,128:1024:0,64:1024:1,128:1024:1,64:2048:0,128:2048:0,128:2048:1,128:4096:0 2>&1 \
      | tee "$O/persistent.log"
    echo "done at $((SECONDS - t0)) s" ;;
  c)  # call 2: where the PERSISTENT build differs (call 1: 16 of 56 of its GPU tests failed)
    pr() { timeout 60 python3 bench/persistent_probe.py "$@" 2>&1 | tail -14; }
    {
      pr --B 2 --H 8 --Hkv 4 --N 1024 --d 128 --repeat 3
      pr --B 2 --H 8 --Hkv 4 --N 1024 --d 128 --res --repeat 2
      pr --B 2 --H 8 --Hkv 4 --N 1024 --d 128 --programs 3 --repeat 2 --quiet
      pr --B 2 --H 4 --N 256 --d 128 --causal --repeat 2
      pr --B 2 --H 4 --N 256 --d 128 --repeat 2 --quiet
      pr --B 2 --H 8 --Hkv 2 --N 1000 --d 64 --causal --programs 3 --repeat 2 --quiet
      pr --B 1 --H 2 --N 256 --d 128 --quiet
      pr --B 1 --H 1 --N 128 --d 128
    } | tee "$O/persistent_probe.log"
    echo "probes done at $((SECONDS - t0)) s"
    timeout 150 python3 -m pytest -q -x -p no:cacheprovider -m "gpu and not slow" tests/test_gluon_forward.py \
      -k "persistent and 1024 and bfloat16-None" --tb=short 2>&1 | grep -v "^    " | head -60 | tee "$O/one_failure.log"
    echo "done at $((SECONDS - t0)) s" ;;
  d)  # call 4: the illegal instruction (calls 1 and 3: one test's forward, then the rest of its worker's tests)
    pr() { CUDA_LAUNCH_BLOCKING=1 timeout 60 python3 bench/persistent_probe.py --quiet "$@" 2>&1 \
      | grep -E "^(bfloat16|float16)|Error" | head -4; }
    {
      for dt in float16 bfloat16; do for pg in 3 16; do for res in "" --res; do
        pr --B 2 --H 4 --N 256 --d 128 --causal --programs $pg $res --dtype $dt --repeat 2
      done; done; done
      pr --B 1 --H 2 --N 130 --Nk 390 --d 128 --window 31 4 --programs 3 --res --dtype float16
      pr --B 2 --H 8 --Hkv 4 --N 1024 --d 128 --programs 3 --res --dtype float16
    } | tee "$O/illegal_probe.log"
    echo "probes done at $((SECONDS - t0)) s"
    for id in "256 and True and float16-3" "256 and True and bfloat16-3"; do
      CUDA_LAUNCH_BLOCKING=1 timeout 90 python3 -m pytest -q -x -p no:cacheprovider -m "gpu and not slow" \
        tests/test_gluon_forward.py -k "persistent and $id" --tb=long 2>&1 \
        | grep -E "^(E |>|tests|flash|kernels)|passed|failed" | head -30
    done | tee "$O/illegal_test.log"
    echo "done at $((SECONDS - t0)) s" ;;
  e)  # call 5: where the illegal instruction is (banded, d = 128, several items a program)
    CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
    $CS --tool memcheck --show-backtrace no python3 bench/persistent_probe.py --B 2 --H 4 --N 256 --d 128 \
      --causal --programs 3 --quiet --dump "$O/banded128_p3.cubin" 2>&1 | grep -v "^=========$" | head -40 \
      | tee "$O/sanitizer.log"
    echo "done at $((SECONDS - t0)) s" ;;
  f)  # call 6: PERSISTENT unbanded only (the banded build refused): its GPU tests, then the timing (b)
    timeout 150 python3 -m pytest -q -n 15 -p no:cacheprovider -m "gpu and not slow" tests/test_gluon_forward.py \
      -k persistent 2>&1 | grep -E "passed|failed|^E  " | head -12 | tee "$O/persistent_tests_f.log"
    echo "tests done at $((SECONDS - t0)) s"
    timeout 400 python3 bench/fwd_variants.py --variants persistent --rounds 3 --out "$O/persistent" \
      --cells 64:1024:0,128:1024:0,64:2048:0,128:2048:0,128:512:0,128:4096:0,64:4096:0 2>&1 | tee "$O/persistent.log"
    echo "done at $((SECONDS - t0)) s" ;;
  s1)  # call 7: PERSIST_KEYS = 2048 on: the suite's first half (bench/gpu_2026_11_29f.sh s1)
    OUT=$O/tests1 T1=545 WORKERS=16 bash bench/validate_gpu.sh suite tests --ignore=tests/test_catalog.py \
      --ignore=tests/test_audit.py ;;
  table)  # call 8: issue 10's table
    timeout 300 python3 bench/run.py --grid table --dtype bfloat16 --backends ours,torch-sdpa-cudnn,torch-sdpa-flash \
      --rounds 2 --no-memory --out "$O/table" 2>&1 | grep -v "^bench:" | tail -40 | tee "$O/table.log" ;;
  g)  # call 9: the banded persistent build (kernels/gluon_fwd.py as of c5d8839, the BAND refusal lifted, written to
      # /tmp) under Triton 3.6's ptxas, then under ptxas 12.9 (carry _ptxas129): a ptxas fault or the kernel's?
    V=/tmp/gluon_fwd_banded_persistent.py
    sed 's/(PERSISTENT and (PAIRED or BAND or CONSUMERS != 2))/(PERSISTENT and (PAIRED or CONSUMERS != 2))/' \
      kernels/gluon_fwd.py > $V
    grep -q "PAIRED or CONSUMERS != 2" $V || { echo "the BAND refusal edit no longer applies"; exit 2; }
    # (Triton falls back to its own ptxas where TRITON_PTXAS_PATH names none: no archive, no second run)
    [ -f _ptxas129/ptxas.xz ] || { echo "no _ptxas129/ptxas.xz: see the header"; exit 2; }
    xz -dkf _ptxas129/ptxas.xz
    for px in "" "$PWD/_ptxas129/ptxas"; do
      env ${px:+TRITON_PTXAS_PATH=$px} TRITON_CACHE_DIR=/tmp/triton_cache${px:+_other} timeout 100 \
        python3 bench/persistent_probe.py --variant $V --B 2 --H 4 --N 256 --d 128 --causal --programs 3 --quiet 2>&1 \
        | grep -E "^bfloat16|Error" | head -3 | sed "s|^|ptxas ${px:-bundled}: |"
    done | tee "$O/banded_ptxas.log"
    echo "done at $((SECONDS - t0)) s" ;;
  h)  # call 10: the snake's last round guarded (the illegal instruction was items past the end), PERSISTENT built
      # banded again (the launcher still runs it unbanded only): its GPU tests, banded cases included
    timeout 170 python3 -m pytest -q -n 15 -p no:cacheprovider -m "gpu and not slow" tests/test_gluon_forward.py \
      -k persistent 2>&1 | grep -E "passed|failed|^E  " | head -12 | tee "$O/persistent_tests_h.log"
    echo "done at $((SECONDS - t0)) s" ;;
  i)  # next: the banded PERSISTENT build timed against the banded pairs (and, at d = 64, the product: triton_fwd
      # below LONG_KEYS banded), unbanded controls beside; O compared with the kernel's
    timeout 500 python3 bench/fwd_variants.py --variants persistent,paired --rounds 3 --out "$O/banded_persistent" \
      --cells 128:1024:1,64:1024:1,128:2048:1,64:2048:1,128:4096:1,128:1024:0 2>&1 | tee "$O/banded_persistent.log"
    echo "done at $((SECONDS - t0)) s" ;;
  *) echo "usage: $0 a|b|c|d|e|f|s1|table|g|h|i"; exit 2 ;;
esac

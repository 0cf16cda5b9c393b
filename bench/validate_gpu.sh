#!/usr/bin/env bash
# `flashcheck validate` on the GPU machine, in one device call each (from the repo root):
#   bash bench/validate_gpu.sh diag   # ours from a cold Triton cache with the warm-up (where its time goes:
#                                     # bench/warmup_report.py; the answer key wants <= 90 s in all),
#                                     # flex alone (its refusals and recompiles), the validate/compile tests
#                                     # of the suite with -v and stack dumps when they overrun
#   bash bench/validate_gpu.sh key    # the answer key (tests/test_validate_gpu.py: six targets, bf16, -n 8)
#   bash bench/validate_gpu.sh suite [PATHS...]  # the whole suite, or the node ids / paths given (-n 16, longest
#                                     # tests first, one thread each, -v, failing node ids, durations)
# Every step runs under `timeout`, so a hang costs its own limit, not the call; on a timeout every
# pytest process of the step writes the stacks of all its threads (tests/conftest.py, FLASHCHECK_STACKS).
# Logs go to $OUT (the device tool brings back at most 8 files: the rest is packed in results.tgz).
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 CI=true
OUT=${OUT:-device-out}
W=$(mktemp -d)
mkdir -p "$OUT"
trap 'tar czf "$OUT/results.tgz" -C "$W" . 2>/dev/null' EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)"
T0=$(date +%s)
step() { echo "== [$(( $(date +%s) - T0 )) s] $*"; }

# validate TARGET LIMIT NAME [extra args]: bf16, ci profile, -n 8 (the answer key's command), JSON kept
validate() {
  local target=$1 limit=$2 name=$3; shift 3
  local t=$(date +%s)
  timeout "$limit" python3 -m flashcheck validate "$target" --device ${DEVICE:-cuda} --dtype ${DTYPE:-bfloat16} \
      --profile ci -n ${WORKERS:-8} \
      --json "$W/$name.json" "$@" > "$W/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc in $(( $(date +%s) - t )) s (limit $limit)"
  tail -4 "$W/$name.log"
  [ -f "$W/$name.json" ] && python3 - "$W/$name.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
for r in sorted(d["results"], key=lambda r: -r["duration_s"]):
    print(f"   {r['duration_s']:7.1f} s  {r['outcome']:<8} {r['property']}  {(r['note'] or '')[:150]}")
for p in d["refused_domain"]:
    print("   refuses", p["words"], "|", p["error"][:300])
EOF
}

# pytest_step LIMIT NAME ARGS...: -v (each node id as it ends), -rf; on the limit SIGINT (pytest still prints its
# failures and summary), per-test stacks from faulthandler_timeout
pytest_step() {
  local limit=$1 name=$2; shift 2
  local t=$(date +%s)
  FLASHCHECK_COLLECTED="$W/collected-$name.txt" \
  FLASHCHECK_STACKS="$W/stacks-$name" timeout -s INT -k 30 "$limit" python3 -m pytest -v -rf --tb=short \
      -p no:cacheprovider -o faulthandler_timeout=$((limit - 10)) "$@" > "$W/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc in $(( $(date +%s) - t )) s (limit $limit; 124/137: timed out, stacks in stacks-$name/)"
  grep -E "^(FAILED|ERROR)|Timeout|passed|failed" "$W/$name.log" | tail -15
  # the tests collected (tests/conftest.py, on CUDA) that the log never reports as ended: cut by the limit
  [ -f "$W/collected-$name.txt" ] && python3 - "$W/collected-$name.txt" "$W/$name.log" <<'EOF'
import re, sys
collected = [line.rstrip("\n") for line in open(sys.argv[1])]
ended = set()
for line in open(sys.argv[2], errors="replace"):
    m = re.search(r"\b(PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS) (\S.*?)\s*$", line)
    if m:
        ended.add(m.group(2))
left = [n for n in collected if n not in ended]
print(f"not ended: {len(left)} of {len(collected)} collected")
for n in left:
    print("   ", n)
EOF
  if [ -d "$W/stacks-$name" ]; then
    for f in "$W"/stacks-"$name"/*.txt; do [ -s "$f" ] && { echo "--- $f"; head -15 "$f"; }; done
  fi
  ps -eo pid,ppid,etimes,cmd | grep -E "pytest|flashcheck|compile_worker" | grep -v grep | head -20
}

case "${1:-diag}" in
  selftest)  # on the CPU: the steps' plumbing (a validate, a pytest step that overruns and dumps stacks)
    DEVICE=cpu DTYPE=float32 WORKERS=2 validate torch-sdpa-math 120 math-cpu -k "o_within or lse"
    printf 'import time\ndef test_sleeps():\n    time.sleep(60)\n' > tests/test_zz_selftest_sleeps.py
    pytest_step 25 sleeper -n 2 tests/test_zz_selftest_sleeps.py tests/test_refusals.py
    rm -f tests/test_zz_selftest_sleeps.py
    ;;
  diag)
    step "ours with the warm-up (flashcheck.warmup), cold Triton cache (fresh TRITON_CACHE_DIR)"
    export TRITON_CACHE_DIR=/tmp/triton-cold-$$
    rm -rf "$TRITON_CACHE_DIR"
    FLASHCHECK_WARMUP_LOG="$W/ours-warmup-calls.jsonl" validate ours ${T1:-150} ours-warmup
    grep -E "^warm-up" "$W/ours-warmup.log"
    echo "Triton cache entries: $(ls "$TRITON_CACHE_DIR" | wc -l)"
    # per-binary compile times, busiest compile processes, binaries predicted by compile_key vs in the
    # cache, and those the suite compiled after the warm-up (missed keys): bench/warmup_report.py
    python3 bench/warmup_report.py "$W/ours-warmup-calls.jsonl" --cache "$TRITON_CACHE_DIR" 2>&1 | tee "$W/ours-warmup-report.log"
    unset TRITON_CACHE_DIR
    step "flex alone (-n 8)"
    TORCH_LOGS=recompiles validate flex ${T2:-140} flex
    echo "recompile lines in flex.log: $(grep -ciE "recompil" "$W/flex.log")"
    step "the suite's validate/compile tests (-n 8, -v)"
    pytest_step ${T3:-120} subset -n 8 tests/test_validate_cli.py tests/test_refusals.py tests/test_domain.py \
        tests/test_kernel_compile.py "tests/test_kernel_gpu.py::test_gpu_torch_compile_inductor_fullgraph"
    ;;
  key)
    step "answer key"
    FLASHCHECK_RESULTS="$W" timeout ${T1:-420} python3 -m pytest -v -s -rf -p no:cacheprovider \
        -m slow tests/test_validate_gpu.py > "$W/answer_key.log" 2>&1
    echo "answer key: exit $?"
    grep -E "ANSWER-KEY|PASSED|FAILED|passed|failed" "$W/answer_key.log" | tail -20
    ;;
  suite)
    step "the whole suite on CUDA (the slow tier, the answer key included, stays out)"
    export OMP_NUM_THREADS=1
    # the longest tests first (tests/conftest.py GPU_LONGEST_FIRST), handed out one at a time
    CHUNK=$(python3 -m pytest --help | grep -q maxschedchunk && echo "--maxschedchunk 1")
    pytest_step ${T1:-460} suite -n ${WORKERS:-16} --dist load $CHUNK --durations=40 "${@:2}"
    ;;
esac
step done
cp "$W"/*.log "$OUT"/ 2>/dev/null | true
ls "$OUT"

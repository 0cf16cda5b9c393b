#!/usr/bin/env bash
# The answer key's `validate ours` (bf16, ci, -n 8) with the suite's thread pools shared out (the default since
# 2026-11-27c: OMP_NUM_THREADS = cores / workers) and with every worker's pools on every core (OMP_NUM_THREADS=16,
# what the suite got before). Run 1 is from a cold Triton cache (the answer key's condition); 2 and 3 warm.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 CI=true
unset OMP_NUM_THREADS
OUT=${OUT:-device-out}; mkdir -p "$OUT"
one() { local name=$1; shift; local t=$(date +%s)
  env "$@" python3 -m flashcheck validate ours --device cuda --dtype bfloat16 --profile ci -n 8 \
      --json "$OUT/$name.json" -q > "$OUT/$name.log" 2>&1
  echo "== $name ($*): exit $? in $(( $(date +%s) - t )) s"
  python3 - "$OUT/$name.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(" duration", d["duration_s"], d["counts"], "|", d.get("warm_up"))
print(" ", ", ".join(f"{r['property'].removeprefix('test_')} {r['duration_s']:.1f}" for r in
      sorted(d["results"], key=lambda r: -r["duration_s"])[:6]))
PY
}
one cold_shared
one warm_all_cores OMP_NUM_THREADS=16
one warm_shared
one warm_all_cores2 OMP_NUM_THREADS=16

"""Where the warm-up's compile time went, and whether its compile keys were exact (bench/validate_gpu.sh diag).

    python3 bench/warmup_report.py CALLS.jsonl [--cache TRITON_CACHE_DIR]

CALLS.jsonl is the FLASHCHECK_WARMUP_LOG of a `flashcheck validate` run (flashcheck.warmup.warm_up): one
line per call with the kernels of the binaries it was to compile. Prints the binaries predicted per
kernel, the seconds per binary of each kernel (least squares over the calls: a call's seconds ~ the sum
of its binaries' compile times), the busiest processes; with --cache (a TRITON_CACHE_DIR that was empty
before the run), the binaries Triton's cache holds per kernel, and how many were written after the
warm-up's last call: compiled by the suite, i.e. keys the warm-up missed (or a forward retried with
fewer pipeline stages).
"""
from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

import numpy as np


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("calls")
    p.add_argument("--cache", default=None)
    args = p.parse_args(argv)
    calls = [json.loads(line) for line in open(args.calls) if line.strip()]
    if not calls:
        print("warm-up report: no calls logged")
        return 1
    kernels = sorted({k for c in calls for k in c["binaries"]})
    predicted = collections.Counter(k for c in calls for k in c["binaries"])
    print(f"warm-up: {len(calls)} calls, {sum(predicted.values())} binaries to compile: "
          + ", ".join(f"{k} {predicted[k]}" for k in kernels))
    a = np.array([[c["binaries"].count(k) for k in kernels] for c in calls], float)
    t = np.array([c["seconds"] for c in calls])
    per, *_ = np.linalg.lstsq(a, t, rcond=None)
    print("  seconds per binary (least squares over the calls): "
          + ", ".join(f"{k} {s:.2f}" for k, s in zip(kernels, per))
          + f"; calls {t.sum():.1f} s in all, longest {t.max():.1f} s")
    busy = collections.Counter()
    for c in calls:
        busy[c["process"]] += c["seconds"]
    first = min(c["start"] for c in calls)
    last = max(c["start"] + c["seconds"] for c in calls)
    print(f"  first call at {first:.1f} s, last done at {last:.1f} s (from the warm-up's start); "
          f"busiest processes {', '.join(f'{s:.1f}' for _, s in busy.most_common(3))} s, "
          f"least busy {min(busy.values()):.1f} s over {len(busy)}")
    slow = sorted(calls, key=lambda c: -c["seconds"])[:3]
    for c in slow:
        s = c["signature"]
        print(f"  slow: {c['seconds']:.1f} s q{tuple(s['q'])} k{tuple(s['k'])} grad={s['grad']} causal={s['causal']} "
              f"window={s['window']} mask={s['mask']}: {', '.join(c['binaries'])}")
    if args.cache:
        end = max(c.get("end", 0.0) for c in calls)
        cached = collections.Counter()
        late = collections.Counter()
        for cubin in Path(args.cache).glob("*/*.cubin"):
            cached[cubin.stem] += 1
            if end and cubin.stat().st_mtime > end + 1.0:
                late[cubin.stem] += 1
        print("  in Triton's cache after the run: " + ", ".join(f"{k} {cached[k]}" for k in sorted(cached))
              + "; written after the warm-up (compiled by the suite: missed keys or stage retries): "
              + (", ".join(f"{k} {late[k]}" for k in sorted(late)) or "none"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

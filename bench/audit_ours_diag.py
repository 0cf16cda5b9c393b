"""Which entries of `flashcheck audit` put our kernel over its bound on the GPU, and under which claim of its Precision
(session 2026-11-26f: tests/test_audit.py's GPU test saw ours at 1.01 of its bound on the quick sweep). Runs the test's
sweep for "ours" with the Precision as ours_precision states it, then with each of the later claims turned off in turn,
and prints every (dtype, N, distribution, quantity, kind) whose error/bound exceeds 0.9.

    PYTHONPATH=. python3 bench/audit_ours_diag.py --out DIR"""
from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from unittest import mock

VARIANTS = (("as stated", {}), ("bwd_p_known off", {"bwd_p_known": False}),
            ("lg2_known off (no LSE interval, no known accumulator)", {"lg2_known": False, "bwd_p_known": False}))


def main(argv=None):
    from flashcheck import adapters
    from flashcheck.audit import QUICK_SWEEP, run_audit

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtypes", nargs="+", default=["bfloat16", "float16", "float32"])
    a = ap.parse_args(argv)
    sweep = dataclasses.replace(QUICK_SWEEP, dtypes=tuple(a.dtypes), parts=("N",))
    real = adapters.ours_precision
    for name, off in VARIANTS:
        def patched(*args, **kw):
            return dataclasses.replace(real(*args, **kw), **off)
        out = Path(a.out) / name.split(" ")[0]
        out.mkdir(parents=True, exist_ok=True)
        with mock.patch.object(adapters, "ours_precision", patched):
            report = run_audit(["ours"], device="cuda", sweep=sweep, out=out, progress_stream=open("/dev/null", "w"))
        (out / "report.json").write_text(json.dumps(report, default=str)[:50_000_000])
        worst = 0.0
        print(f"== {name}")
        for r in report["results"]:
            c = r["case"]
            for q, s in r["quantities"].items():
                for kind, v in s["ratio"].items():
                    worst = max(worst, v)
                    if v > 0.9:
                        print(f"   {c['dtype']} N={c['N']} {c['distribution']} scale={c['logit_scale']} {q} {kind}: "
                              f"{v:.4f}")
        print(f"   worst {worst:.4f}; errors: {[r['error'] for r in report['results'] if r['error']][:3]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

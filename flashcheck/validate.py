"""`flashcheck validate TARGET`: run the property suite (tests/properties) against one kernel.

pytest runs underneath, in a subprocess (a clean interpreter, so TRITON_INTERPRET and the hypothesis
profile apply from the start). Progress is printed as each property finishes; then a table (property,
dtype, passed/failed/skipped, worst error ÷ bound) and, for each failure, what differed, the shrunk
counterexample and a one-line command that replays it. Exit code: 0 when every property holds, 1 when
any fails, 2 for a usage error.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROPERTIES = ROOT / "tests" / "properties"
PROGRESS = "FLASHCHECK-PROGRESS "
PROFILES = ("ci", "dev", "thorough")


class UsageError(Exception):
    pass


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="flashcheck validate",
        description="Check an attention kernel against the float64 reference within derived error bounds, "
                    "and against the attention invariants (tests/properties).")
    p.add_argument("target", help="ours | torch-sdpa-math | torch-sdpa-flash | torch-sdpa-efficient | "
                                  "torch-sdpa-cudnn | flex | package.module:function | path/to/file.py:function")
    p.add_argument("--layout", choices=("bhnd", "bnhd"), default=None,
                   help="layout the kernel takes and returns (default: its `layout` attribute, else bhnd)")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help="default: cuda when available, else cpu")
    p.add_argument("--dtype", default=None, help="comma-separated: float32,float16,bfloat16 (default: float32)")
    p.add_argument("--supports", default=None,
                   help="capabilities the kernel takes: causal,scale,gqa,lse,backward,mask,window")
    p.add_argument("--head-dims", default=None, help="head dimensions the kernel accepts (default: any)")
    p.add_argument("--profile", choices=PROFILES, default="ci", help="hypothesis profile (default: ci)")
    p.add_argument("--budget", choices=("auto", "reduced", "full"), default="auto",
                   help="reduced property set (small shapes, few examples); auto: reduced for ours on the CPU")
    p.add_argument("--example-db", default=None, metavar="DIR",
                   help="hypothesis example database directory, shareable between runs and machines")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the results as JSON")
    p.add_argument("-n", "--workers", default=None,
                   help="pytest-xdist worker processes (an int or 'auto'; default: one per GPU on a multi-GPU "
                        "machine, else none)")
    p.add_argument("-x", "--fail-fast", action="store_true", help="stop at the first failing property")
    p.add_argument("-k", dest="keyword", default=None, help="only properties matching this pytest -k expression")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    return p


def check_target(args) -> None:
    """Resolve the kernel here first, so a bad target or option is a usage error (exit 2)."""
    sys.path.insert(0, str(ROOT))
    from kernels.adapters import parse_supports, resolve

    try:
        parse_supports(args.supports)
        kut = resolve(args.target, supports=args.supports, layout=args.layout)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    names = (args.dtype or "float32").split(",")
    for name in names:
        if name not in ("float32", "float16", "bfloat16", "float64"):
            raise UsageError(f"--dtype: unknown dtype {name!r}; expected float32, float16 or bfloat16")
    import torch

    device = device_of(args)
    if device == "cpu" and args.target == "ours":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # what the subprocess gets (environment())
    reasons = [kut.available(device, getattr(torch, name)) for name in names]
    if all(reasons):
        raise UsageError(f"{args.target} cannot run on {device} in {','.join(names)}: {reasons[0]}")
    if args.workers not in (None, "0"):
        import importlib.util

        if importlib.util.find_spec("xdist") is None:
            raise UsageError("-n: pytest-xdist is not installed (pip install pytest-xdist)")
    if args.workers is not None and args.workers != "auto":
        try:
            if int(args.workers) < 0:
                raise ValueError
        except ValueError:
            raise UsageError(f"-n: expected a number of workers or 'auto', got {args.workers!r}") from None


def device_of(args) -> str:
    if args.device:
        return args.device
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def workers(args, device: str):
    if args.workers is not None:
        return None if args.workers == "0" else args.workers
    if device == "cuda":
        import torch

        if torch.cuda.device_count() > 1:
            return str(torch.cuda.device_count())
    return None


def kernel_options(args, device: str) -> list[str]:
    out = ["--kernel", args.target, "--device", device]
    for flag, value in (("--layout", args.layout), ("--dtype", args.dtype), ("--supports", args.supports),
                        ("--head-dims", args.head_dims), ("--example-db", args.example_db)):
        if value is not None:
            out += [flag, value]
    if args.budget != "auto":
        out += ["--budget", args.budget]
    return out


def environment(args, device: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["FLASHCHECK_PROFILE"] = args.profile
    if device == "cpu":
        env.setdefault("TRITON_INTERPRET", "1")
        # Small CPU ops: one thread each. On a loaded 2-core machine, torch's thread pool made the
        # suite ~10x slower (measured: 59 s vs 5.7 s for a plain torch kernel).
        env.setdefault("OMP_NUM_THREADS", "1")
    return env


def replay_command(nodeid: str, args, device: str) -> str:
    env = f"PYTHONPATH=. FLASHCHECK_PROFILE={args.profile}" + (" TRITON_INTERPRET=1" if device == "cpu" else "")
    words = ["python", "-m", "pytest", nodeid, *kernel_options(args, device), "--hypothesis-profile", args.profile,
             "-p", "no:cacheprovider"]
    return f"{env} " + " ".join(shlex.quote(w) for w in words)


def run_pytest(args, device: str, report: str) -> tuple[int, list[str]]:
    cmd = [sys.executable, "-m", "pytest", str(PROPERTIES.relative_to(ROOT)), *kernel_options(args, device),
           "--hypothesis-profile", args.profile, "--flashcheck-report", report, "--flashcheck-progress",
           "-p", "no:cacheprovider", "-q", "--tb=long", "-o", "addopts="]
    n = workers(args, device)
    if n:
        cmd += ["-n", n]
    if args.fail_fast:
        cmd += ["-x"]
    if args.keyword:
        cmd += ["-k", args.keyword]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=environment(args, device), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, bufsize=1)
    log, done = [], 0
    for line in proc.stdout:
        if line.startswith(PROGRESS):
            done += 1
            if not args.quiet:
                rec = json.loads(line[len(PROGRESS):])
                print(f"  [{done:2d}] {rec['outcome']:<7} {short_name(rec['nodeid']):<60} "
                      f"{ratio_text(rec.get('worst'))}", flush=True)
        else:
            log.append(line)
    return proc.wait(), log


def short_name(nodeid: str) -> str:
    return nodeid.rsplit("::", 1)[-1]


def ratio_text(r) -> str:
    return "" if r is None else f"{r:.3g} x bound"


def rows(records: list[dict]) -> list[dict]:
    """One row per test: the call record, or the setup/teardown record that decided it."""
    by_id: dict[str, dict] = {}
    for rec in records:
        cur = by_id.get(rec["nodeid"])
        if cur is None or rec["outcome"] == "failed" or (rec["when"] == "call" and cur["outcome"] != "failed"):
            by_id[rec["nodeid"]] = rec
    return list(by_id.values())


def counterexample(text: str) -> str:
    """The assertion message and hypothesis's shrunk example out of a pytest failure text."""
    lines = (text or "").splitlines()
    keep, grab = [], False
    for line in lines:
        body = line[1:].strip() if line.startswith("E ") else line.strip()
        if line.startswith("E ") and ("Error" in body or body.startswith(("worst at", "Case(")) or grab):
            keep.append(body)
        if body.startswith(("Falsifying example", "Failing explicit example")):
            grab = True
            keep.append(body)
            continue
        if grab and body == ")":
            grab = False
        elif grab and not line.startswith("E "):
            keep.append(body)
        if body.startswith("@reproduce_failure") or "reproduce_failure(" in body:
            keep.append(body)
    seen, out = set(), []
    for line in keep:
        if line and line not in seen:
            seen.add(line)
            out.append(line)
    return "\n".join(out[:40]) if out else "\n".join(lines[-30:])


def table(results: list[dict]) -> str:
    head = ("property", "dtype", "result", "worst error / bound", "note")
    body = [(r["property"], r["dtype"], r["outcome"], ratio_text(r["worst_ratio"]) or "-", r["note"]) for r in results]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    sep = "  ".join("-" * w for w in widths)
    return "\n".join([fmt.format(*head), sep] + [fmt.format(*map(str, row)) for row in body])


def _order(rec) -> tuple:
    from flashcheck.pytest_plugin import ORDER

    stem = Path(rec["nodeid"].split("::")[0]).stem.removeprefix("test_")
    return (ORDER.index(stem) if stem in ORDER else len(ORDER), rec["nodeid"])


def summarize(records, args, device) -> list[dict]:
    out = []
    for rec in sorted(rows(records), key=_order):
        name = short_name(rec["nodeid"])
        prop, _, dtype = name.partition("[")
        note = ""
        if rec["outcome"] == "skipped":
            note = (rec.get("text") or "").split("\n")[0].replace("Skipped: ", "")[:100]
        if "backward_deterministic" in rec:
            note = "backward bitwise deterministic" if rec["backward_deterministic"] else \
                f"backward NOT bitwise deterministic ({rec.get('worst_info') or 'gradients differ between runs'})"
        out.append({
            "property": prop, "dtype": dtype.rstrip("]"), "nodeid": rec["nodeid"], "outcome": rec["outcome"],
            "worst_ratio": rec.get("worst"), "worst": rec.get("worst_info"), "examples": rec.get("examples"),
            "note": note, "duration_s": round(rec.get("duration", 0.0), 2),
            "failure": counterexample(rec.get("text")) if rec["outcome"] == "failed" else None,
            "replay": replay_command(rec["nodeid"], args, device) if rec["outcome"] == "failed" else None,
        })
    return out


def backward_deterministic(records):
    """True/False when the backward-determinism property ran, else None."""
    seen = [rec["backward_deterministic"] for rec in records if "backward_deterministic" in rec]
    return all(seen) if seen else None


def main(argv=None) -> int:
    p = parser()
    try:
        args = p.parse_args(argv)
    except SystemExit as exc:  # argparse: 2 for usage errors, 0 for --help
        return int(exc.code or 0)
    try:
        check_target(args)
    except UsageError as exc:
        print(f"flashcheck validate: error: {exc}", file=sys.stderr)
        return 2
    device = device_of(args)
    print(f"flashcheck validate {args.target} on {device} ({args.dtype or 'float32'}), profile {args.profile}",
          flush=True)
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        code, log = run_pytest(args, device, report)
        records = json.load(open(report))["records"] if os.path.exists(report) else []
    elapsed = time.monotonic() - start
    if code not in (0, 1, 5) or not records:
        sys.stdout.write("".join(log[-60:]))
        print(f"flashcheck validate: error: pytest exited with status {code} before running the properties",
              file=sys.stderr)
        return 2
    results = summarize(records, args, device)
    print()
    print(table(results))
    failed = [r for r in results if r["outcome"] == "failed"]
    for r in failed:
        print(f"\nFAILED {r['property']} [{r['dtype']}]\n{r['failure']}\n  replay: {r['replay']}")
    counts = {k: sum(r["outcome"] == k for r in results) for k in ("passed", "failed", "skipped")}
    verdict = "FAILS" if failed else "holds"
    print(f"\n{args.target}: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped "
          f"in {elapsed:.1f} s -> the kernel {verdict}" + (" every property checked" if not failed else ""))
    exit_code = 1 if failed else 0
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"target": args.target, "device": device, "dtypes": (args.dtype or "float32").split(","),
                       "profile": args.profile, "supports": args.supports, "layout": args.layout,
                       "results": results, "counts": counts, "exit_code": exit_code,
                       "backward_deterministic": backward_deterministic(records),
                       "duration_s": round(elapsed, 2)}, f, indent=1)
    return exit_code


if __name__ == "__main__":
    sys.exit(main())

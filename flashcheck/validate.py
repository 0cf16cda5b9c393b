"""`flashcheck validate TARGET`: run the property suite (`flashcheck.properties`) against one kernel.

pytest runs underneath, in a subprocess (a clean interpreter, so TRITON_INTERPRET and the hypothesis
profile apply from the start), as `pytest -p flashcheck.pytest_plugin --pyargs flashcheck.properties`
with its own empty configuration, from any directory. Progress is printed as each property finishes;
then a table (property, dtype, passed/failed/refused/skipped, worst error ÷ bound), the refused domain
in words with a minimal example, and, for each failure, what differed, the shrunk counterexample and a
one-line command that replays it.

Exit code: 0 when no result is wrong (refusals listed), 1 when a result is wrong (or, with --strict,
when the kernel refused an input inside its declared domain), 2 for a usage error or a kernel that
refused every input.
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

from flashcheck.pytest_plugin import PROFILES
from flashcheck.refusals import Features, describe, sentence

# the directory holding the flashcheck package (a checkout or site-packages): the subprocess imports
# the same flashcheck as this process
PACKAGE_PARENT = Path(__file__).resolve().parent.parent
PROGRESS = "FLASHCHECK-PROGRESS "
OUTCOMES = ("passed", "failed", "refused", "skipped")


class UsageError(Exception):
    pass


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="flashcheck validate",
        description="Check an attention kernel against the float64 reference within derived error bounds, "
                    "and against the attention invariants (flashcheck.properties).")
    p.add_argument("target", help="ours | torch-sdpa-math | torch-sdpa-flash | torch-sdpa-efficient | "
                                  "torch-sdpa-cudnn | flex | package.module:function | path/to/file.py:function")
    p.add_argument("--layout", choices=("bhnd", "bnhd"), default=None,
                   help="layout the kernel takes and returns (default: its `layout` attribute, else bhnd)")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help="default: cuda when available, else cpu")
    p.add_argument("--dtype", default=None, help="comma-separated: float32,float16,bfloat16 (default: float32)")
    p.add_argument("--supports", default=None,
                   help="capabilities the kernel takes: causal,scale,gqa,lse,backward,mask,window,deterministic "
                        "(default: a built-in's, a function's `supports` attribute, else none)")
    d = p.add_argument_group("declared domain (inputs are generated inside it; each also a function attribute)")
    d.add_argument("--causal-alignment", choices=("top-left", "bottom-right"), default=None,
                   help="what causal=True means when Nq != Nk (`causal_alignment`; default top-left, torch SDPA's)")
    d.add_argument("--head-dims", default=None, help="head dimensions accepted, e.g. 64,128 (`head_dims`)")
    d.add_argument("--seq-multiple", type=int, default=None, help="Nq, Nk multiples of this (`seq_multiple`)")
    d.add_argument("--min-n", type=int, default=None, help="smallest Nq, Nk (`min_n`)")
    d.add_argument("--max-n", type=int, default=None, help="largest Nq, Nk (`max_n`)")
    d.add_argument("--square-only", action="store_true", default=None, help="Nq = Nk only (`square_only`)")
    d.add_argument("--gqa-ratios", default=None, help="accepted Hq/Hkv ratios, e.g. 1,2,4 (`gqa_ratios`)")
    p.add_argument("--strict", action="store_true",
                   help="a refused input (inside the declared domain) is a failure (exit 1)")
    p.add_argument("--profile", choices=PROFILES, default="ci", help="hypothesis profile (default: ci)")
    p.add_argument("--budget", choices=("auto", "reduced", "full"), default="auto",
                   help="reduced property set (small shapes, few examples); auto: reduced for ours on the CPU")
    p.add_argument("--warm-up", choices=("auto", "on", "off"), default="auto",
                   help="before the suite, compile the kernel for every input it will get, in one process per "
                        "core (flashcheck.warmup); auto: on for ours and flex on CUDA (Triton JIT, torch.compile)")
    p.add_argument("--example-db", default=None, metavar="DIR",
                   help="hypothesis example database directory, shareable between runs and machines")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the results as JSON")
    p.add_argument("--junitxml", default=None, metavar="PATH",
                   help="also write JUnit XML for CI systems (pytest's own --junitxml)")
    p.add_argument("-n", "--workers", default=None,
                   help="pytest-xdist worker processes (an int or 'auto'; default: one per GPU on a multi-GPU "
                        "machine, else none)")
    p.add_argument("-x", "--fail-fast", action="store_true", help="stop at the first failing property")
    p.add_argument("-k", dest="keyword", default=None, help="only properties matching this pytest -k expression")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    return p


DOMAIN_FLAGS = ("causal_alignment", "head_dims", "seq_multiple", "min_n", "max_n", "square_only", "gqa_ratios")


def check_target(args):
    """Resolve the kernel here first, so a bad target or option is a usage error (exit 2)."""
    from flashcheck.adapters import parse_supports, resolve

    device = device_of(args)
    try:
        parse_supports(args.supports)
        kut = resolve(args.target, supports=args.supports, layout=args.layout, device=device,
                      **{f: getattr(args, f) for f in DOMAIN_FLAGS})
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    names = args.dtype.split(",") if args.dtype else list(kut.domain.dtypes or ("float32",))[:1]
    for name in names:
        if name not in ("float32", "float16", "bfloat16", "float64"):
            raise UsageError(f"--dtype: unknown dtype {name!r}; expected float32, float16 or bfloat16")
    import torch

    if device == "cpu" and args.target in ("ours", "ours-accurate"):
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
    return kut


def device_of(args) -> str:
    if args.device:
        return args.device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


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
                        ("--example-db", args.example_db),
                        *(("--" + f.replace("_", "-"), getattr(args, f)) for f in DOMAIN_FLAGS)):
        if value is True:
            out += [flag]
        elif value is not None:
            out += [flag, str(value)]
    if args.budget != "auto":
        out += ["--budget", args.budget]
    return out


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def threads_per_worker(args, device: str) -> int | None:
    """OMP_NUM_THREADS for the suite's processes (None: leave the thread pools as they are): one thread each on
    the CPU; with pytest-xdist workers, the cores shared out among them. The references and bounds run on the
    host in numpy and torch, whose thread pools each take every core by default: 8 workers would run 8 x 16
    threads on the H100 host's 16 cores (bench/NOTES.md "Session 2026-11-27c": 14 bench/bounds_attack.py
    workers of 16 threads each ran the tensor-core precisions' bounds ~10x slower)."""
    if device == "cpu":
        return 1  # as environment() sets it for every process
    n = workers(args, device)
    if n is None:
        return None
    return 1 if n == "auto" else max(1, cores() // max(1, int(n)))


def environment(args, device: str) -> dict:
    """What every subprocess of validate gets (the warm-up's, which keep one thread each, and the suite's)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(PACKAGE_PARENT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["FLASHCHECK_PROFILE"] = args.profile
    if device == "cpu":
        env.setdefault("TRITON_INTERPRET", "1")
        # Small CPU ops: one thread each. On a loaded 2-core machine, torch's thread pool made the
        # suite ~10x slower (measured: 59 s vs 5.7 s for a plain torch kernel).
        env.setdefault("OMP_NUM_THREADS", "1")
    return env


def suite_environment(args, device: str) -> dict:
    """The suite's processes' environment: `environment`, with the cores shared out among the xdist workers."""
    env = environment(args, device)
    threads = threads_per_worker(args, device)
    if threads is not None:
        env.setdefault("OMP_NUM_THREADS", str(threads))
    return env


def pytest_base() -> list[str]:
    """pytest on the installed suite, with an empty configuration (none of the current directory's)."""
    return ["-m", "pytest", "-c", os.devnull, "--rootdir", str(PACKAGE_PARENT), "-p", "flashcheck.pytest_plugin",
            "-p", "no:cacheprovider", "--pyargs"]


def pyarg(nodeid: str) -> str:
    """`flashcheck/properties/test_x.py::test_y[dtype]` -> `flashcheck.properties.test_x::test_y[dtype]`."""
    path, sep, rest = nodeid.partition("::")
    return path.removesuffix(".py").replace("/", ".") + sep + rest


def replay_command(nodeid: str, args, device: str) -> str:
    env = f"FLASHCHECK_PROFILE={args.profile}" + (" TRITON_INTERPRET=1" if device == "cpu" else "")
    words = ["python", *pytest_base(), pyarg(nodeid), *kernel_options(args, device),
             "--hypothesis-profile", args.profile]
    return f"{env} " + " ".join(shlex.quote(w) for w in words)


def suite_command(args, device: str, *extra: str, parallel: bool = True) -> list[str]:
    """The suite's pytest command; `parallel`: with the -n workers."""
    cmd = [sys.executable, *pytest_base(), "flashcheck.properties", *kernel_options(args, device),
           "--hypothesis-profile", args.profile, *extra]
    n = workers(args, device) if parallel else None
    if n:
        # worksteal: 15 properties of unequal length on 8 workers; idle workers take queued ones
        # (on the H100, ours took 106 s with the default load scheduling, 56 s for the longest property)
        cmd += ["-n", n, "--dist", "worksteal"]
    if args.keyword:
        cmd += ["-k", args.keyword]
    return cmd


def warm_up(args, device: str, tmp: str):
    """flashcheck.warmup: record the suite's calls on a stand-in and compile them on the real kernel
    meanwhile, in one process per core; returns when every call is handed out (a `WarmingUp`: `.wait()`
    for the rest)."""
    from flashcheck.warmup import warm_up as record_and_compile

    path = os.path.join(tmp, "signatures.jsonl")
    options = {"supports": args.supports, "layout": args.layout, **{f: getattr(args, f) for f in DOMAIN_FLAGS}}
    # the dry run in one process: judging nothing, its properties take ~3 s in all (bf16 ci on the
    # CPU), less than starting pytest-xdist workers; the cores compile meanwhile
    dry_run = suite_command(args, device, "--flashcheck-dry-run", path, "-q", parallel=False)
    return record_and_compile(args.target, device, options, dry_run, path, cores(), environment(args, device))


def run_pytest(args, device: str, report: str) -> tuple[int, list[str]]:
    cmd = suite_command(args, device, "--flashcheck-report", report, "--flashcheck-progress", "-q", "--tb=long")
    if args.junitxml:
        cmd += ["--junitxml", os.path.abspath(args.junitxml)]
    if args.fail_fast:
        cmd += ["-x"]
    proc = subprocess.Popen(cmd, env=suite_environment(args, device), stdout=subprocess.PIPE,
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
        if line.startswith("E ") and ("Error" in body or body.startswith(("worst at", "Case(", "the output matches")) or grab):
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
        if rec["outcome"] in ("skipped", "refused"):
            note = (rec.get("text") or "").split("\n")[0].replace("Skipped: ", "")[:140]
        elif rec.get("refused"):
            note = f"{rec['refused']} inputs refused, {rec.get('examples', 0)} checked"
        discarded = sum((rec.get("discarded") or {}).values())
        if discarded and rec["outcome"] != "skipped":
            note = (note + "; " if note else "") + f"{discarded} inputs discarded (counted, not passed)"
        out.append({
            "property": prop, "dtype": dtype.rstrip("]"), "nodeid": rec["nodeid"], "outcome": rec["outcome"],
            "worst_ratio": rec.get("worst"), "worst": rec.get("worst_info"), "examples": rec.get("examples"),
            "refused": rec.get("refused", 0), "discarded": rec.get("discarded") or {},
            "note": note, "duration_s": round(rec.get("duration", 0.0), 2),
            "failure": counterexample(rec.get("text")) if rec["outcome"] == "failed" else None,
            "replay": replay_command(rec["nodeid"], args, device) if rec["outcome"] == "failed" else None,
        })
    return out


def refused_domain(records) -> list[dict]:
    """The refused inputs of every property, described in words (flashcheck.refusals)."""
    refused = [(Features.from_dict(r), r["error"]) for rec in records for r in rec.get("refusals") or []]
    accepted = [Features.from_dict(a) for rec in records for a in rec.get("accepted") or []]
    return [part.__dict__ for part in describe(refused, accepted)] if refused else []


def main(argv=None) -> int:
    p = parser()
    try:
        args = p.parse_args(argv)
    except SystemExit as exc:  # argparse: 2 for usage errors, 0 for --help
        return int(exc.code or 0)
    try:
        kut = check_target(args)
    except UsageError as exc:
        print(f"flashcheck validate: error: {exc}", file=sys.stderr)
        return 2
    device = device_of(args)
    print(f"flashcheck validate {args.target} on {device} ({args.dtype or 'default dtype'}), profile {args.profile}; "
          f"declared: {','.join(sorted(kut.supports)) or 'nothing'}; domain: {kut.domain.describe()}", flush=True)
    start = time.monotonic()
    warmed = None
    with tempfile.TemporaryDirectory() as tmp:
        warming = None
        if args.warm_up == "on" or (args.warm_up == "auto" and args.target in ("ours", "ours-accurate", "flex") and device == "cuda"):
            warming = warm_up(args, device, tmp)
            print(warming.progress(), flush=True)
        report = os.path.join(tmp, "report.json")
        code, log = run_pytest(args, device, report)
        if warming is not None:
            warmed = str(warming.wait())
            print(warmed, flush=True)
        records = json.load(open(report))["records"] if os.path.exists(report) else []
    elapsed = time.monotonic() - start
    if code not in (0, 1, 5) or not records:
        sys.stdout.write("".join(log[-60:]))
        print(f"flashcheck validate: error: pytest exited with status {code} before running the properties",
              file=sys.stderr)
        return 2
    results = summarize(records, args, device)
    refusals = refused_domain(records)
    print()
    print(table(results))
    if refusals:
        print("\nRefused domain (the kernel raised; not counted as agreement):")
        for part in refusals:
            print("  " + sentence_of(part))
    failed = [r for r in results if r["outcome"] == "failed"]
    for r in failed:
        print(f"\nFAILED {r['property']} [{r['dtype']}]\n{r['failure']}\n  replay: {r['replay']}")
    counts = {k: sum(r["outcome"] == k for r in results) for k in OUTCOMES}
    checked = counts["passed"] + counts["failed"]
    summary = ", ".join(f"{counts[k]} {k}" for k in OUTCOMES)
    if failed:
        verdict, exit_code = "the kernel FAILS: a result is wrong", 1
    elif checked == 0 and counts["refused"]:
        verdict, exit_code = "error: the kernel refused every input of every property", 2
    elif refusals and args.strict:
        verdict, exit_code = "the kernel FAILS under --strict: it refused inputs inside its declared domain", 1
    elif refusals:
        verdict, exit_code = "no wrong result (refusals listed above)", 0
    else:
        verdict, exit_code = "no wrong result: every property checked holds", 0
    print(f"\n{args.target}: {summary} in {elapsed:.1f} s -> {verdict}")
    if exit_code == 2:
        first = refusals[0]["error"] if refusals else "?"
        print(f"flashcheck validate: error: {args.target} refused every input ({first}); check its declared "
              f"domain (--supports, --head-dims, --dtype, ...)", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"target": args.target, "device": device, "dtypes": sorted({r["dtype"] for r in results}),
                       "profile": args.profile, "supports": sorted(kut.supports), "layout": args.layout,
                       "domain": kut.domain.describe(), "strict": args.strict,
                       "results": results, "counts": counts, "refused_domain": refusals,
                       "exit_code": exit_code, "verdict": verdict, "warm_up": warmed,
                       "duration_s": round(elapsed, 2)}, f, indent=1)
    return exit_code


def sentence_of(part: dict) -> str:
    from flashcheck.refusals import RefusedPart

    return sentence(RefusedPart(**part))


if __name__ == "__main__":
    sys.exit(main())

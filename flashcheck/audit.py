"""`flashcheck audit [TARGET ...] [--out DIR] [--quick]`: the numerical-stability report.

For each kernel and dtype: the error of O, LSE, dQ, dK, dV against the float64 reference, next to
the derived bound, swept over N (three input distributions) and over the logit scale (1 up to the
dtype's overflow edge); fully masked rows checked against the convention. Writes report.md,
report.json and plots/*.png to --out. Defaults: on the CPU ours (through TRITON_INTERPRET=1) and
torch-sdpa-math; on a GPU every torch SDPA backend and flex next to both modes of ours (`ours`, and
`ours-accurate`: precision="accurate"), plus the bf16, N=2048, d=128 comparison with published figures.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

CPU_TARGETS = ("ours", "torch-sdpa-math")
GPU_TARGETS = ("ours", "ours-accurate", "torch-sdpa-flash", "torch-sdpa-cudnn", "torch-sdpa-efficient",
               "torch-sdpa-math", "flex")


@dataclass(frozen=True)
class Sweep:
    """What the audit measures per kernel and dtype: the N sweep (each distribution, logit scale 1)
    at (B, H, ·, d); the logit-scale sweep (normal inputs, N = N_for_scale): 1, 10, ..., 1e4 below
    the dtype's overflow edge plus `extra_scale_points` geometric points up to it; and with
    `published`, the bf16 points at `published_shape` (normal and large logits, errors only)."""

    Ns: tuple[int, ...]
    d: int
    B: int
    H: int
    N_for_scale: int
    dtypes: tuple[str, ...]
    distributions: tuple[str, ...] = ("normal", "outliers", "peaked_logits")
    extra_scale_points: int = 2
    published: bool = False  # the bf16, N=2048, d=128 comparison with published figures
    parts: tuple[str, ...] = ("N", "logit_scale", "published")
    published_shape: tuple[int, int, int, int] = (1, 2, 2048, 128)  # B, H, N, d
    seed: int = 0


# Measured on 2 CPU cores (see bench/NOTES.md "audit timing"): the CPU default fits in 5 minutes.
CPU_SWEEP = Sweep(Ns=(17, 50, 128, 320), d=64, B=1, H=1, N_for_scale=128,
                  dtypes=("float32", "float16", "bfloat16"), extra_scale_points=4)
QUICK_SWEEP = Sweep(Ns=(16, 32), d=16, B=1, H=1, N_for_scale=32, dtypes=("float32", "float16"),
                    extra_scale_points=1)
# On a GPU the float64 reference and the bounds (NumPy, on the host) dominate: the bounds cost
# ~30 s per kind and precision at N=1024, d=128 on 2 cores, so the swept N stop at 512 (--N widens
# it); the published-figure points (N=2048) report errors only, without bounds.
GPU_SWEEP = Sweep(Ns=(128, 256, 512), d=128, B=1, H=1, N_for_scale=256,
                  dtypes=("bfloat16", "float16", "float32"), extra_scale_points=1, published=True)


class Progress:
    """A one-line progress bar on stderr (redrawn with \\r on a terminal, one line per step else)."""

    def __init__(self, total: int, stream=None, width: int = 30):
        self.total, self.done, self.width = max(total, 1), 0, width
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.t0 = time.perf_counter()

    def step(self, label: str):
        self.done += 1
        frac = self.done / self.total
        elapsed = time.perf_counter() - self.t0
        eta = elapsed / frac - elapsed
        bar = "#" * int(frac * self.width) + "." * (self.width - int(frac * self.width))
        line = (f"[{bar}] {self.done}/{self.total} {elapsed:5.0f}s elapsed, ~{eta:4.0f}s left  "
                f"{label}")
        if self.tty:
            self.stream.write("\r" + line[:150].ljust(150))
            if self.done == self.total:
                self.stream.write("\n")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def _parse(argv):
    p = argparse.ArgumentParser(prog="flashcheck audit", description=__doc__.split("\n\n")[0])
    p.add_argument("targets", nargs="*", metavar="TARGET",
                   help="built-in name (ours, ours-accurate, torch-sdpa-math|flash|efficient|cudnn, flex), "
                        "package.module:function or path/file.py:function "
                        f"(default: CPU {' '.join(CPU_TARGETS)}; GPU {' '.join(GPU_TARGETS)})")
    p.add_argument("--out", default="audit-report", help="output directory (default: %(default)s)")
    p.add_argument("--quick", action="store_true", help="a tiny sweep (seconds on the CPU)")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help="default: cuda when available, else cpu")
    p.add_argument("--dtype", default=None,
                   help="comma-separated dtypes (float32,float16,bfloat16); default per device")
    p.add_argument("--N", default=None, help="comma-separated sequence lengths of the N sweep")
    p.add_argument("--d", type=int, default=None, help="head dimension")
    p.add_argument("--supports", default=None,
                   help="capabilities a user callable declares (comma-separated)")
    p.add_argument("--sweeps", default=None,
                   help="which parts to run, comma-separated from N, logit_scale, published "
                        "(default: all that apply; published = bf16, N=2048, d=128, GPU default)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def _sweep_from(args, device: str) -> Sweep:
    sweep = QUICK_SWEEP if args.quick else (GPU_SWEEP if device == "cuda" else CPU_SWEEP)
    if args.quick and device == "cuda":
        sweep = replace(sweep, dtypes=("bfloat16", "float16", "float32"))
    if args.dtype:
        sweep = replace(sweep, dtypes=tuple(t.strip() for t in args.dtype.split(",")))
    if args.N:
        Ns = tuple(int(n) for n in args.N.split(","))
        sweep = replace(sweep, Ns=Ns, N_for_scale=Ns[len(Ns) // 2])
    if args.d:
        sweep = replace(sweep, d=args.d)
    if args.sweeps:
        chosen = {x.strip() for x in args.sweeps.split(",") if x.strip()}
        unknown = chosen - {"N", "logit_scale", "published"}
        if unknown:
            raise SystemExit(f"flashcheck audit: --sweeps: unknown {sorted(unknown)}; "
                             "expected N, logit_scale, published")
        sweep = replace(sweep, parts=tuple(sorted(chosen)),
                        published="published" in chosen)
    return replace(sweep, seed=args.seed)


def _header(argv, device: str, sweep: Sweep, parts: dict) -> dict:
    import numpy
    import torch

    try:
        import triton
        triton_version = triton.__version__
    except Exception as exc:
        triton_version = f"not importable ({exc})"
    dev = (f"cuda: {torch.cuda.get_device_name()}" if device == "cuda"
           else f"cpu: {platform.processor() or platform.machine()}, {os.cpu_count()} cores")
    return {
        "command": "flashcheck audit " + " ".join(argv),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "device": dev,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton_version,
        "numpy": numpy.__version__,
        "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET", "unset"),
        "tf32 matmul": (torch.backends.cuda.matmul.allow_tf32 if device == "cuda" else "n/a"),
        "components": {part: f"MISSING: {note}" if note else ""
                       for part, (_, note) in parts.items()},
        "sweep": {k: v for k, v in asdict(sweep).items()},
    }


def plan_cases(kernel_name: str, dtype: str, sweep: Sweep) -> list:
    """The cases of one kernel and dtype: N sweep per distribution, logit-scale sweep (normal),
    and the published-figure points when asked for."""
    import torch

    from flashcheck.audit_inputs import logit_scales, make_inputs, max_abs_logit, overflow_edge
    from flashcheck.audit_measure import Case, torch_dtype

    cases = []
    if "N" in sweep.parts:
        cases += [Case(kernel_name, dtype, dist, "N", sweep.B, sweep.H, n, sweep.d, seed=sweep.seed)
                  for dist in sweep.distributions for n in sweep.Ns]
    if sweep.published and dtype == "bfloat16":
        cases += [Case(kernel_name, dtype, dist, "published", *sweep.published_shape,
                       seed=sweep.seed)
                  for dist in ("normal", "peaked_logits")]
    if "logit_scale" not in sweep.parts:
        return cases
    from flashcheck.strategies import Shape

    shape = Shape(sweep.B, sweep.H, sweep.H, sweep.N_for_scale, sweep.N_for_scale, sweep.d)
    q, k, _, _ = make_inputs(shape, "normal", sweep.seed)
    edge = overflow_edge(float(torch.finfo(torch_dtype(dtype)).max), max_abs_logit(q, k))
    cases += [Case(kernel_name, dtype, "normal", "logit_scale", sweep.B, sweep.H,
                   sweep.N_for_scale, sweep.d, logit_scale=c, seed=sweep.seed)
              for c in logit_scales(edge, sweep.extra_scale_points)]
    return cases


def _resolve(target, parts, supports):
    if not isinstance(target, str):  # an object already following the KernelUnderTest API
        return target
    resolve, why = parts["flashcheck.adapters"]
    if resolve is None:
        raise RuntimeError(why)
    return resolve(target, supports=supports) if supports else resolve(target)


def run_audit(targets, *, device: str, sweep: Sweep, out: Path, argv=(), progress_stream=None) -> dict:
    """Run the sweep for every target (names or KernelUnderTest objects); write the report."""
    from flashcheck.audit_masked_rows import check_masked_rows
    from flashcheck.audit_measure import components, measure
    from flashcheck.audit_report import write_report

    parts = components()
    report = {"header": _header(list(argv), device, sweep, parts), "results": [],
              "masked_rows": [], "skipped": []}
    work = []  # (kernel, dtype, cases)
    for target in targets:
        try:
            kut = _resolve(target, parts, None)
        except Exception as exc:
            report["skipped"].append({"kernel": str(target), "dtype": "all",
                                      "reason": f"could not resolve: {type(exc).__name__}: {exc}"})
            continue
        for dtype in sweep.dtypes:
            from flashcheck.audit_measure import torch_dtype

            why = kut.available(device, torch_dtype(dtype))
            if why:
                report["skipped"].append({"kernel": kut.name, "dtype": dtype, "reason": why})
                continue
            work.append((kut, dtype, plan_cases(kut.name, dtype, sweep)))
    # Case-major order: every kernel measured on one input before the next input (shared reference).
    items = sorted(((case, kut) for kut, _, cases in work for case in cases),
                   key=lambda it: (it[0].dtype, it[0].sweep, it[0].distribution, it[0].N,
                                   it[0].logit_scale))
    progress = Progress(len(items) + len(work), progress_stream)
    t0 = time.perf_counter()
    cache = {}
    for case, kut in items:
        try:
            report["results"].append(measure(kut, case, device, parts, cache=cache))
        except Exception as exc:  # never lose the rest of the report to one point
            report["results"].append({"case": asdict(case), "quantities": {}, "flags": [],
                                      "error": f"audit failed: {type(exc).__name__}: {exc}"})
        progress.step(case.label())
    for kut, dtype, _ in work:
        report["masked_rows"].append(check_masked_rows(kut, dtype, device, sweep.seed))
        progress.step(f"{kut.name} {dtype} fully masked rows")
    report["header"]["seconds"] = round(time.perf_counter() - t0, 1)
    write_report(report, out)
    return report


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parse(argv)
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        print("flashcheck audit: --device cuda but no CUDA device is available", file=sys.stderr)
        return 2
    sweep = _sweep_from(args, device)
    targets = args.targets or list(GPU_TARGETS if device == "cuda" else CPU_TARGETS)
    if args.supports:
        from flashcheck.audit_measure import components

        parts = components()
        supports = [s.strip() for s in args.supports.split(",") if s.strip()]
        targets = [_resolve(t, parts, supports) for t in targets]
    out = Path(args.out)
    report = run_audit(targets, device=device, sweep=sweep, out=out, argv=argv)
    exceeded = sum(any(v > 1 for s in r["quantities"].values() if not s["nonfinite"]
                       for v in s["ratio"].values()) for r in report["results"])
    nonfinite = sum(any(s["nonfinite"] or s["mismatched_inf"] for s in r["quantities"].values())
                    for r in report["results"])
    print(f"flashcheck audit: {len(report['results'])} points in {report['header']['seconds']} s; "
          f"{exceeded} above their bound, {nonfinite} with NaN/Inf outputs; "
          f"report in {out / 'report.md'}")
    return 0

"""Attention speed side by side: ours, torch SDPA (flash, cuDNN, efficient) and FlexAttention.

    PYTHONPATH=. python3 bench/run.py [--out DIR] [--backends ours,torch-sdpa-flash,...] [--rounds 3]
    PYTHONPATH=. python3 bench/run.py --grid table --dtype bfloat16 --backends ours,torch-sdpa-cudnn,torch-sdpa-flash \
        --no-memory --rounds 3      # issue 10's 12 cells, every backend once a round
    PYTHONPATH=. python3 bench/run.py --dry-run      # CPU, tiny shapes, torch-sdpa-math: code path only
    TRITON_INTERPRET=1 PYTHONPATH=. python3 bench/run.py --dry-run --backends ours --dtype float16

Forward and backward TFLOP/s in one run, bf16 and fp16, on the grid of the figures to beat
(bench/NOTES.md): (d=64, N=16k), (d=128, N=4k), (d=128, N=16k), (d=128, N=16k causal), plus GQA 16:2
(d=128, N=4k, 16 query heads over 2 K/V heads), with B·N = 16k tokens and H·d = 2048 (the
FlashAttention-2/3 papers' set-up: B = 16384 / N, H = 2048 / d). Then the peak extra memory of one
forward + backward at N = 16k, 64k, 128k (d = 128, B = 1, H = 16): torch.cuda.max_memory_allocated
above what the inputs q, k, v, dO already hold. Ratios ours / peer are printed per cell.
FLOPs: forward 4·B·H·Nq·Nk·d (two matmuls), backward 2.5× forward (five matmuls), halved when
causal. Time: median of triton.testing.do_bench (which also flushes L2 between calls); inputs are
rotated over several copies when one set would fit in L2. A backend that cannot run a shape is
skipped with the reason. Prints Markdown tables and writes bench.json, bench.md and bench.png (TFLOP/s per cell, ours beside
each peer) to --out.
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

# `python bench/run.py` puts bench/ first on sys.path; the kernels live at the repository root.
_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(1, _ROOT)

GPU_BACKENDS = ("ours", "torch-sdpa-flash", "torch-sdpa-cudnn", "torch-sdpa-efficient", "flex")
SDPA = {"torch-sdpa-flash": "FLASH_ATTENTION", "torch-sdpa-cudnn": "CUDNN_ATTENTION",
        "torch-sdpa-efficient": "EFFICIENT_ATTENTION", "torch-sdpa-math": "MATH"}
TOKENS, HIDDEN = 16384, 2048
PEAK_TFLOPS = 800.0  # H100 bf16 dense, the reference used in bench/NOTES.md


@dataclass(frozen=True)
class Config:
    d: int
    N: int
    causal: bool = False
    tokens: int = TOKENS
    hidden: int = HIDDEN
    group: int = 1  # GQA: query heads per K/V head (Hkv = H / group)

    @property
    def B(self) -> int:
        return max(1, self.tokens // self.N)

    @property
    def H(self) -> int:
        return max(1, self.hidden // self.d)

    @property
    def Hkv(self) -> int:
        return max(1, self.H // self.group)

    def label(self) -> str:
        n = f"{self.N // 1024}k" if self.N % 1024 == 0 else str(self.N)
        gqa = f" GQA {self.H}:{self.Hkv}" if self.group > 1 else ""
        return f"d={self.d} N={n}" + (" causal" if self.causal else "") + gqa

    def flops(self, direction: str) -> float:
        f = 4.0 * self.B * self.H * self.N * self.N * self.d
        f = f * 2.5 if direction == "bwd" else f
        return f / 2 if self.causal else f


GPU_GRID = (Config(64, 16384), Config(128, 4096), Config(128, 16384), Config(128, 16384, True),
            Config(128, 4096, group=8))
# issue 10's table: every (d, mask, N) cell it judges, ours against cuDNN (`--grid table`)
TABLE_GRID = tuple(Config(d, N, causal) for d in (64, 128) for causal in (False, True) for N in (1024, 4096, 16384))
# the d = 64 engines by key count (`--grid d64`, with --backends ours-gluon,ours-triton,...): where "auto" switches
D64_GRID = tuple(Config(64, N, causal) for causal in (False, True) for N in (1024, 2048, 4096, 8192, 16384, 32768))
DRY_GRID = (Config(16, 64, tokens=128, hidden=32), Config(32, 128, True, tokens=256, hidden=64),
            Config(16, 64, tokens=128, hidden=64, group=2))
MEMORY_NS = (16384, 65536, 131072)
MEMORY_BACKENDS = ("ours", "torch-sdpa-flash", "torch-sdpa-cudnn", "torch-sdpa-efficient")


def make_backend(name: str, causal: bool):
    """fn(q, k, v) -> O for one backend (raises if it cannot be built here); k, v may have fewer
    heads than q (GQA)."""
    import torch

    if name in ("ours", "ours-accurate"):  # ours-accurate: precision="accurate" (issue 11's cost)
        from flashcheck.kernels.attention import attention

        precision = "accurate" if name == "ours-accurate" else "default"
        return lambda q, k, v: attention(q, k, v, causal=causal, precision=precision)
    if name in ("ours-gluon", "ours-triton"):  # ours with the forward engine named (kernel_config(engine=))
        from flashcheck.kernels.attention import attention, kernel_config

        engine = name.split("-")[1]

        @functools.lru_cache(maxsize=None)
        def tiles(d: int, dtype):  # once per head dim and dtype, outside the timed calls
            return kernel_config(d, dtype, band=bool(causal), engine=engine)
        return lambda q, k, v: attention(q, k, v, causal=causal, tiles=tiles(q.shape[-1], q.dtype))
    if name in SDPA:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backend = getattr(SDPBackend, SDPA[name])

        def sdpa(q, k, v):
            gqa = {"enable_gqa": True} if k.shape[1] != q.shape[1] else {}
            with sdpa_kernel(backend):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, **gqa)
        return sdpa
    if name == "flex":
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        import torch._dynamo

        # Every shape, mask and grad mode (the forward is timed under no_grad) is one more
        # compiled graph; at the default limit (8) dynamo falls back to the unfused eager
        # flex_attention, which is what the 2026-11-23 GQA cell measured (2 % of peak).
        for knob in ("recompile_limit", "cache_size_limit"):
            if hasattr(torch._dynamo.config, knob):
                setattr(torch._dynamo.config, knob, max(getattr(torch._dynamo.config, knob), 64))
        compiled = torch.compile(flex_attention, dynamic=False)
        masks = {}

        def flex(q, k, v):
            block_mask = None
            if causal:
                key = (q.shape[2], k.shape[2], q.device)
                if key not in masks:
                    masks[key] = create_block_mask(lambda b, h, i, j: j <= i, None, None,
                                                   q.shape[2], k.shape[2], device=q.device)
                block_mask = masks[key]
            gqa = {"enable_gqa": True} if k.shape[1] != q.shape[1] else {}
            return compiled(q, k, v, block_mask=block_mask, **gqa)
        return flex
    raise ValueError(f"backend: unknown {name!r}; expected one of "
                     f"{GPU_BACKENDS + ('ours-accurate', 'ours-gluon', 'ours-triton', 'torch-sdpa-math')}")


def _copies(cfg: Config, device: str, dtype) -> int:
    """How many input sets to rotate over so that consecutive calls never hit a warm L2."""
    import torch

    if device != "cuda":
        return 1
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 * 2**20)
    one_set = 5 * cfg.B * cfg.H * cfg.N * cfg.d * torch.finfo(dtype).bits // 8  # q k v o do
    return 1 if one_set >= 2 * l2 else math.ceil(2 * l2 / one_set) + 1


def _timer(device: str):
    """ms per call: triton.testing.do_bench median on CUDA, a perf_counter median on the CPU."""
    if device == "cuda":
        from triton.testing import do_bench

        return lambda fn: do_bench(fn, warmup=25, rep=100, return_mode="median")

    def cpu(fn, reps=5):
        fn()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)
    return cpu


def prepare(name: str, cfg: Config, device: str, dtype):
    """(fwd, bwd): the backend's timed calls on this cell's inputs (rotated over `_copies` sets), or the reason it
    cannot run them (a str: the first call raised)."""
    import torch

    try:
        fn = make_backend(name, cfg.causal)
        g = torch.Generator(device=device).manual_seed(0)
        sets = []
        for _ in range(_copies(cfg, device, dtype)):
            q, k, v = (torch.randn(cfg.B, h, cfg.N, cfg.d, device=device, dtype=dtype,
                                   generator=g).requires_grad_() for h in (cfg.H, cfg.Hkv, cfg.Hkv))
            o = fn(q, k, v)  # also the availability check: a backend that cannot run raises here
            sets.append((q, k, v, o, torch.randn_like(o)))
    except Exception as exc:
        return _reason(exc)
    turn = [0]

    def next_set():
        turn[0] = (turn[0] + 1) % len(sets)
        return sets[turn[0]]

    def fwd():
        q, k, v, _, _ = next_set()
        with torch.no_grad():
            fn(q, k, v)

    def bwd():
        q, k, v, o, do = next_set()
        torch.autograd.grad(o, (q, k, v), do, retain_graph=True)

    return fwd, bwd


def bench_cell(names: list[str], cfg: Config, device: str, dtype: str, timer, rounds: int = 1) -> dict:
    """{backend: {"fwd_ms", "bwd_ms", "fwd_tflops", "bwd_tflops", "rounds"} or {"skipped": reason}}: every backend
    on the same cell, timed in `rounds` interleaved rounds (backend after backend, round after round: a drift of
    the GPU's clocks or of a peer between runs lands on all of them alike); ms are the medians over the rounds."""
    import torch

    calls, out = {}, {}
    for name in names:
        print(f"bench: {cfg.label()} {dtype} {name} ...", file=sys.stderr, flush=True)
        got = prepare(name, cfg, device, getattr(torch, dtype))
        if isinstance(got, str):
            out[name] = {"skipped": got}
        else:
            calls[name] = got
    times = {name: ([], []) for name in calls}
    try:
        for _ in range(rounds):
            for name, (fwd, bwd) in calls.items():
                if name in out:
                    continue
                try:
                    times[name][0].append(timer(fwd))
                    times[name][1].append(timer(bwd))
                except Exception as exc:
                    out[name] = {"skipped": _reason(exc)}
    finally:
        calls.clear()
        if device == "cuda":
            torch.cuda.empty_cache()
    for name, (f, b) in times.items():
        if name in out:
            continue
        fwd_ms, bwd_ms = statistics.median(f), statistics.median(b)
        out[name] = {"fwd_ms": fwd_ms, "bwd_ms": bwd_ms, "fwd_tflops": cfg.flops("fwd") / fwd_ms * 1e-9,
                     "bwd_tflops": cfg.flops("bwd") / bwd_ms * 1e-9, "rounds": {"fwd_ms": f, "bwd_ms": b}}
    return {name: out[name] for name in names}


def _reason(exc: BaseException) -> str:
    """Why a backend was skipped: the exception's type and first line."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"[:300]


def peak_extra_memory(name: str, N: int, dtype, device: str, d=128, H=16) -> dict:
    """{"extra_mib"}: peak allocated during one forward + backward above the inputs q, k, v, dO
    (B = 1), or {"skipped": reason}."""
    import torch

    try:
        fn = make_backend(name, False)
        q, k, v, do = (torch.randn(1, H, N, d, device=device, dtype=dtype) for _ in range(4))
        q, k, v = (t.requires_grad_() for t in (q, k, v))
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        o = fn(q, k, v)
        grads = torch.autograd.grad(o, (q, k, v), do)
        torch.cuda.synchronize()
        extra = torch.cuda.max_memory_allocated() - base
        del o, grads
    except Exception as exc:
        return {"skipped": _reason(exc)}
    finally:
        torch.cuda.empty_cache()
    return {"extra_mib": extra / 2**20}


def markdown(rows: list[dict]) -> str:
    lines = ["| shape | dtype | B | H | backend | fwd ms | fwd TFLOP/s "
             f"| bwd ms | bwd TFLOP/s | fwd % of {PEAK_TFLOPS:g} |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c = r["config"]
        head = f"| {r['label']} | {r['dtype']} | {c['B']} | {c['H']}:{c['Hkv']} | {r['backend']} "
        if "skipped" in r:
            lines.append(head + f"| skipped: {r['skipped']} |||||")
            continue
        lines.append(head + f"| {r['fwd_ms']:.3f} | {r['fwd_tflops']:.4g} | {r['bwd_ms']:.3f} "
                     f"| {r['bwd_tflops']:.4g} | {100 * r['fwd_tflops'] / PEAK_TFLOPS:.0f}% |")
    return "\n".join(lines)


def ratios(rows: list[dict]) -> list[dict]:
    """ours / peer TFLOP/s, forward and backward, for every cell both ran."""
    cells = {(r["label"], r["dtype"], r["backend"]): r for r in rows if "skipped" not in r}
    out = []
    for (label, dtype, name), r in cells.items():
        ours = cells.get((label, dtype, "ours"))
        if name == "ours" or ours is None:
            continue
        out.append({"label": label, "dtype": dtype, "peer": name,
                    "fwd": ours["fwd_tflops"] / r["fwd_tflops"], "bwd": ours["bwd_tflops"] / r["bwd_tflops"]})
    return out


def ratio_markdown(rs: list[dict]) -> str:
    lines = ["| shape | dtype | peer | ours/peer fwd | ours/peer bwd |", "|---|---|---|---|---|"]
    lines += [f"| {r['label']} | {r['dtype']} | {r['peer']} | {r['fwd']:.2f} | {r['bwd']:.2f} |" for r in rs]
    return "\n".join(lines)


def memory_markdown(mem: list[dict]) -> str:
    lines = ["| N | dtype | backend | peak extra MiB (fwd + bwd) | ours / this |", "|---|---|---|---|---|"]
    ours = {(m["N"], m["dtype"]): m.get("extra_mib") for m in mem if m["backend"] == "ours"}
    for m in mem:
        if "skipped" in m:
            lines.append(f"| {m['N']} | {m['dtype']} | {m['backend']} | skipped: {m['skipped']} | |")
            continue
        o = ours.get((m["N"], m["dtype"]))
        r = f"{o / m['extra_mib']:.2f}" if o is not None and m["extra_mib"] > 0 else ""
        lines.append(f"| {m['N']} | {m['dtype']} | {m['backend']} | {m['extra_mib']:.1f} | {r} |")
    return "\n".join(lines)


def chart(rows: list[dict], path: Path) -> str | None:
    """bench.png: TFLOP/s per (shape, dtype) cell, forward and backward, one bar per backend."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        return f"no chart: {exc}"
    cells = sorted({(r["label"], r["dtype"]) for r in rows}, key=lambda c: (c[1], c[0]))
    names = list(dict.fromkeys(r["backend"] for r in rows))
    val = {(r["label"], r["dtype"], r["backend"]): r for r in rows if "skipped" not in r}
    fig, axes = plt.subplots(2, 1, figsize=(max(8, 1.6 * len(cells)), 8), sharex=True)
    width = 0.8 / max(1, len(names))
    for ax, key in zip(axes, ("fwd_tflops", "bwd_tflops")):
        for i, name in enumerate(names):
            ys = [val[(c[0], c[1], name)][key] if (c[0], c[1], name) in val else 0.0 for c in cells]
            ax.bar([x + i * width for x in range(len(cells))], ys, width, label=name)
        ax.set_ylabel(key.replace("_tflops", "") + " TFLOP/s")
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=8, ncol=len(names))
    axes[1].set_xticks([x + 0.4 - width / 2 for x in range(len(cells))])
    axes[1].set_xticklabels([f"{c[0]}\n{c[1]}" for c in cells], fontsize=7, rotation=30, ha="right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def _header(argv, device):
    import torch

    try:
        import triton
        triton_version = triton.__version__
    except Exception as exc:
        triton_version = f"not importable ({exc})"
    return {"command": "bench/run.py " + " ".join(argv),
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "device": torch.cuda.get_device_name() if device == "cuda" else f"cpu ({platform.machine()})",
            "torch": torch.__version__, "triton": triton_version, "dtype": "bfloat16",
            "tokens (B·N)": TOKENS, "hidden (H·d)": HIDDEN,
            "flops": "fwd 4·B·H·N²·d, bwd 2.5× fwd, halved when causal",
            "timing": "triton.testing.do_bench median (per round; the median over the interleaved rounds)"
            if device == "cuda" else "perf_counter median (dry run)"}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="bench/run.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="bench-results", help="directory for bench.json")
    p.add_argument("--dry-run", action="store_true",
                   help="tiny shapes on the CPU with torch-sdpa-math (exercises the code path)")
    p.add_argument("--dtype", default="bfloat16,float16",
                   help="comma-separated input dtypes of bfloat16, float16, float32 (default: %(default)s; "
                        "bf16 is the dtype of the figures to beat)")
    p.add_argument("--backends", default=None, help=f"comma-separated (default {','.join(GPU_BACKENDS)})")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory table")
    p.add_argument("--grid", choices=("figures", "table", "d64"), default="figures",
                   help="figures: the figures-to-beat cells and GQA (default); table: issue 10's 12 cells "
                        "(d 64/128, full/causal, N 1k/4k/16k); d64: d = 64, N 1k-32k, full/causal (the engines' "
                        "switch by key count)")
    p.add_argument("--rounds", type=int, default=1,
                   help="interleaved rounds per cell (every backend once a round; the medians are reported): "
                        "cuDNN's speed drifts between runs (bench/NOTES.md), compare within rounds")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    dtypes = [x.strip() for x in args.dtype.split(",") if x.strip()]
    for name in dtypes:
        if name not in ("bfloat16", "float16", "float32"):
            p.error(f"--dtype: {name!r} is not one of bfloat16, float16, float32")
    import torch

    if args.dry_run:
        device, grid, backends = "cpu", DRY_GRID, ["torch-sdpa-math"]
    else:
        if not torch.cuda.is_available():
            print("bench/run.py: no CUDA GPU here; the benchmark runs on a GPU only "
                  "(use --dry-run to exercise the code path on the CPU).", file=sys.stderr)
            return 2
        grid = {"table": TABLE_GRID, "d64": D64_GRID}.get(args.grid, GPU_GRID)
        device, backends = "cuda", list(GPU_BACKENDS)
    if args.backends:
        backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    timer = _timer(device)
    rows = []
    for dtype in dtypes:
        for cfg in grid:
            results = bench_cell(backends, cfg, device, dtype, timer, args.rounds)
            for name, result in results.items():
                rows.append({"label": cfg.label(), "dtype": dtype, "backend": name,
                             "config": {**asdict(cfg), "B": cfg.B, "H": cfg.H, "Hkv": cfg.Hkv}, **result})
    mem = []
    if device == "cuda" and not args.no_memory:
        for dtype in dtypes[:1]:
            for N in MEMORY_NS:
                for name in [b for b in backends if b in MEMORY_BACKENDS]:
                    print(f"bench: memory N={N} {dtype} {name} ...", file=sys.stderr, flush=True)
                    mem.append({"N": N, "dtype": dtype, "backend": name,
                                **peak_extra_memory(name, N, getattr(torch, dtype), device)})
    rs = ratios(rows)
    table = "\n\n".join([markdown(rows), ratio_markdown(rs)] + ([memory_markdown(mem)] if mem else []))
    print(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    header = {**_header(argv, device), "dtype": ",".join(dtypes),
              "memory": "peak torch.cuda.max_memory_allocated above q, k, v, dO during one fwd + bwd, "
                        "d=128, B=1, H=16"}
    (out / "bench.json").write_text(json.dumps({"header": header, "rows": rows, "ratios": rs,
                                                "memory": mem}, indent=1))
    (out / "bench.md").write_text(table + "\n")
    note = chart(rows, out / "bench.png")
    if note:
        print(note, file=sys.stderr)
    print(f"\nwrote {out / 'bench.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

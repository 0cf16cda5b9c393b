"""What is left between the Gluon forward and its prototype (bench/NOTES.md, "Gluon forward": 563-605 TFLOP/s against
the prototype's 659 at d = 128, N = 16k): variants of kernels/gluon_fwd.py, timed in one process against the kernel
as it is, cuDNN beside (bf16, B·N = 16k tokens, 2048 hidden).

    PYTHONPATH=$PWD python3 bench/fwd_variants.py [--rounds 3] [--base FILE] [--out DIR]

Variants (source edits of gluon_fwd.py; the script stops if an edit no longer applies):
- kernel: kernels/gluon_fwd.py as it is;
- base: an earlier gluon_fwd.py (--base FILE, e.g. `git show REV:kernels/gluon_fwd.py > FILE`);
- l32: the running sum l in fp32 (FlashAttention-2's and -3's) instead of fp64: another arithmetic (the bounds
  read it: Precision.l_accumulate), a measurement only;
- stages3: a 3-deep K / V ring at d = 128 (224 KB of shared memory; the kernel's table has 2).
- two_cta: d = 64 only, two CTAs an SM so that one's prologue and epilogue run under the other's tiles (the N = 1k
  forward: bench/NOTES.md, "Session 2026-11-28c"): 64-key tiles, a 2-deep ring (49.5 KB of shared memory), the
  consumers at 120 registers and the launch capped at 112 a thread (2 x 288 threads x 112 <= 64K): compiled for
  sm_90 on Triton 3.6 without a spill or C7512 (at 128-key tiles 439 spills; d = 128 at 64 keys 134). Another
  arithmetic (64-key tiles: the Precision's forward key tile), a measurement only.
- base_paired: the --base file launched with PAIRED (when it has it);
- unpaired / paired: the kernel with one query block a program, or two (PAIRED: block n_blocks − 1 − p, then p;
  the second block's Q and first K / V tiles load under the first's last tiles and epilogue), whatever the
  launcher's rule (attention._gluon_paired) gives; the same arithmetic, O bit for bit.
- persistent: the kernel's PERSISTENT build (a program an SM, each looping over query blocks: attention.
  _gluon_persistent), whatever the launcher's rule gives; the same arithmetic, O bit for bit;
- narrow / wide (d = 64 only): the kernel with two consumer warpgroups a program, or three (WIDE: 192 query rows,
  the consumers at 160 registers), whatever the launcher's rule (attention._gluon_wide) gives; unbanded, every row's
  key tiles in the kernel's order (O bit for bit), under a band another partial-tile set (another order: a
  measurement only; the launcher never runs it banded);
- product (d = 64 only): what the product runs on the call (below LONG_KEYS keys triton_fwd), to see whether a
  variant would beat it there.
Each variant's O is compared with the kernel's (max |difference|). Interleaved rounds, medians of
triton.testing.do_bench; launched through Triton's JIT (the same host path for all).

Session 2026-11-27g (bench/NOTES.md): the full tiles' running max from the raw logits and the exponent argument in one
fma ("fma", bit for bit the same O) gained 1.00-1.06x, l in fp32 1.04-1.07x, both 1.09-1.12x; the kernel now has the
first and keeps l in fp64, its update moved under the products.
"""
from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import json
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(1, str(_ROOT))

from bench.ab_trees import CELLS, parse_cells  # noqa: E402  (issue 10's cells; after the repo root is importable)

# PAIR_KEYS's cells: unmasked, the keys a program's query block sees from 4 to 32 tiles
PAIR_CELLS = [(128, n, False) for n in (512, 1024, 2048, 4096)] + [(64, n, False) for n in (1024, 2048)]

_L64 = [("l_i = gl.zeros([HALF_M], gl.float64, gl.SliceLayout(1, s_layout))",
         "l_i = gl.zeros([HALF_M], gl.float32, gl.SliceLayout(1, s_layout))"),
        ("return l_i * alpha.to(gl.float64) + rowsum.to(gl.float64)", "return l_i * alpha + rowsum")]


def edit_source(src: str, pairs, what: str = "kernels/gluon_fwd.py", every: bool = False) -> str:
    """src with each (old, new) replaced; stops if an `old` does not occur exactly once (the kernel moved on), or
    with every, at least once."""
    for old, new in pairs:
        n = src.count(old)
        if n == 0 or (n > 1 and not every):
            raise SystemExit(f"the edit no longer applies to {what}: {old[:60]!r}")
        src = src.replace(old, new)
    return src


_TWO_CTA = [("CONSUMER_REGS: gl.constexpr = gl.constexpr(240)", "CONSUMER_REGS: gl.constexpr = gl.constexpr(120)")]


@dataclass(frozen=True)
class Variant:
    """One timed source: the module's text and what its launch changes (None: the kernel table's)."""
    text: str
    head_dims: tuple[int, ...] = (64, 128)  # the cells it runs on
    stages: int | None = None  # the K / V ring's depth
    block_n: int | None = None  # keys a tile
    maxnreg: int | None = None  # registers a thread at launch (ptx .maxnreg)
    paired: bool | None = None  # two query blocks a program (None: the launcher's rule)
    wide: bool | None = None  # three consumer warpgroups, 192 query rows a program (None: the launcher's rule)
    persistent: bool | None = None  # a program an SM looping over the query blocks (None: the launcher's rule)


def variant_sources(base: str | None = None) -> dict[str, Variant]:
    """name -> Variant. base: a file holding an earlier gluon_fwd.py to time beside (e.g. `git show
    REV:kernels/gluon_fwd.py > FILE`)."""
    src = (_ROOT / "kernels" / "gluon_fwd.py").read_text()
    out = {"kernel": Variant(src), "l32": Variant(edit_source(src, _L64, every=True)),
           "stages3": Variant(src, (128, ), stages=3),
           "two_cta": Variant(edit_source(src, _TWO_CTA), (64, ), stages=2, block_n=64, maxnreg=112),
           "unpaired": Variant(src, paired=False, persistent=False),
           "paired": Variant(src, paired=True, persistent=False),
           "narrow": Variant(src, (64, ), wide=False, persistent=False),
           "wide": Variant(src, (64, ), wide=True, persistent=False),
           "persistent": Variant(src, paired=False, wide=False, persistent=True)}
    if base:
        text = Path(base).read_text()
        out = {"base": Variant(text), **out}
        if "PAIRED" in text:  # an earlier PAIRED kernel, launched paired beside the current one
            out["base_paired"] = Variant(text, paired=True)
    return out


def load_variant(stem: str, name: str, text: str, tmp: Path):
    """The module of one variant's source (`stem`: the kernel file's name, e.g. gluon_fwd), imported from `tmp`."""
    path = tmp / f"{stem}_{name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(f"{stem}_variant_{name}", path)
    m = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = m
    spec.loader.exec_module(m)
    return m


def launch_args(m, q, k, v, o, lse, launch, o_res=None) -> tuple[tuple, dict]:
    """(arguments, constexprs) of `launch` (attention._gluon_launch's record) for module m's forward kernel: the TMA
    descriptors (Q's, O's and O_res's boxes one consumer warpgroup's rows, K's and V's BLOCK_N; O_res: O's where not
    given, as when WRITE_RES is off), LSE, the scale and the ints; the constexprs the kernel knows (an earlier kernel
    lacks the newer ones: PAIRED, say)."""
    half = 64  # Q's and O's boxes: one consumer warpgroup's rows (gluon_fwd.HALF_M)
    block_n = dict(launch.constexprs)["BLOCK_N"]
    ints = launch.ints if "BH" in m.attn_fwd_gluon_kernel.arg_names else launch.ints[:5]  # (an earlier kernel's)
    args = (m.descriptor(q, half), m.descriptor(k, block_n), m.descriptor(v, block_n), m.descriptor(o, half),
            m.descriptor(o if o_res is None else o_res, half), lse, q.shape[-1] ** -0.5, *ints)
    return args, {name: x for name, x in launch.constexprs if name in m.attn_fwd_gluon_kernel.arg_names}


def save_rows(out: str | None, filename: str, rows: list[dict]) -> None:
    """rows as `out`/`filename` (JSON, with the device and versions), when --out was given."""
    if not out:
        return
    import torch
    import triton

    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / filename).write_text(json.dumps(dict(
        device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__, rows=rows), indent=1))


def _tflops(d, n, causal, ms):
    B, H = 16384 // n, 2048 // d
    return 4 * B * H * n * n * d / (2 if causal else 1) / (ms * 1e-3) / 1e12


def run(rounds: int, base: str | None = None, only: list[str] | None = None, cells=CELLS,
        once: bool = False) -> list[dict]:
    import dataclasses

    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    ka = importlib.import_module("flashcheck.kernels.attention")
    tmp = Path(tempfile.mkdtemp(prefix="fwd_variants_"))
    mods = {name: (load_variant("gluon_fwd", name, v.text, tmp), v) for name, v in variant_sources(base).items()
            if only is None or name in only or name == "kernel"}
    rows = []
    for d, n, causal in cells:
        B, H = 16384 // n, 2048 // d
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(B, H, n, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
        base_t = ka.kernel_config(d, torch.bfloat16, engine="gluon", band=causal).fwd
        band, off_lo, off_hi = ka._band("bottom_right" if causal else False, None, n, n)
        lq, lk = ka.Layout.of(q), ka.Layout.of(k)

        def launcher(m, var):  # var: the Variant (v is the value tensor)
            t = dataclasses.replace(base_t, num_stages=var.stages or base_t.num_stages,
                                    block_n=var.block_n or base_t.block_n)
            launch = ka._gluon_launch(lq, lk, band, off_lo, off_hi, False, t, var.paired, var.wide, var.persistent)
            options = {} if var.maxnreg is None else {"maxnreg": var.maxnreg}
            o = torch.empty_like(q)
            lse = torch.empty(B, H, n, device="cuda", dtype=torch.float32)
            args, constexprs = launch_args(m, q, k, v, o, lse, launch)
            grid = launch.grid
            if "PAIRED" not in constexprs:  # a --base kernel from before PAIRED: one block a program
                grid = (-(-n // constexprs["BLOCK_M"]), grid[1])

            def go():
                m.attn_fwd_gluon_kernel[grid](*args, **constexprs, num_warps=4, **options)
                return o
            return go

        fns = {name: launcher(m, var) for name, (m, var) in mods.items() if d in var.head_dims}
        if d == 64:
            fns["product"] = functools.partial(ka.attention, q, k, v, causal="bottom_right" if causal else False)

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        ref = fns["kernel"]().clone()
        diff = {name: float((fn().float() - ref.float()).abs().max()) for name, fn in fns.items()}
        if once:  # under a profiler: each variant's kernel launched twice (the second the one to read), in order
            for name, fn in fns.items():
                if name != "product":
                    fn(), fn()
                    torch.cuda.synchronize()
                    print(f"once: d={d} N={n} causal={causal} {name}", flush=True)
            continue
        fns["cudnn"] = cudnn
        rows.append(timed_row(d, n, causal, fns, rounds, diff, _tflops, "O"))
    return rows


def timed_row(d: int, n: int, causal: bool, fns: dict, rounds: int, diff: dict, tflops, what: str) -> dict:
    """One cell: every fn timed once a round (the order rotated each round; medians of triton.testing.do_bench), the
    row printed ("kernel" the reference) and returned; diff: each variant's max |output - kernel's| (`what`)."""
    from triton.testing import do_bench

    names = list(fns)
    t = {name: [] for name in names}
    for r in range(rounds):
        for i in range(len(names)):
            name = names[(i + r) % len(names)]
            t[name].append(do_bench(fns[name], warmup=25, rep=100, return_mode="median"))
    ms = {name: statistics.median(x) for name, x in t.items()}
    row = dict(d=d, N=n, causal=causal, ms=ms, rounds=t, diff_vs_kernel=diff,
               tflops={name: tflops(d, n, causal, x) for name, x in ms.items()})
    print(f"d={d:3d} N={n:5d} causal={causal!s:5} | " + "  ".join(
        f"{name} {row['tflops'][name]:5.1f} ({ms['kernel'] / ms[name]:.3f}x kernel)" for name in names)
        + f" | max|{what} - kernel| " + " ".join(f"{name} {x:.1e}" for name, x in diff.items() if name != "kernel"),
        flush=True)
    return row


def compiled(base: str | None = None) -> list[dict]:
    """CPU: each variant compiled for sm_90 (bf16, unmasked) at each head dim it runs on, with the table's tiles where
    it does not set them: spills, HGMMA, C7512, shared memory (bench/compile_forward.sass_counts)."""
    from bench.compile_forward import compile_gluon, sass_counts

    tmp = Path(tempfile.mkdtemp(prefix="fwd_variants_"))
    rows = []
    for name, v in variant_sources(base).items():
        m = load_variant("gluon_fwd", name, v.text, tmp)
        for d in v.head_dims:
            ck = compile_gluon("bfloat16", d, False, False, v.stages or (2 if d == 128 else 3), v.block_n or 128,
                               v.maxnreg, m, paired=bool(v.paired), block_m=192 if v.wide else 128,
                               persistent=bool(v.persistent))
            rows.append(dict(variant=name, d=d, **sass_counts(ck, c7512=True)))
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--compile", action="store_true", help="CPU: each variant compiled for sm_90, spills and sizes")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default=None)
    p.add_argument("--base", default=None, help="an earlier kernels/gluon_fwd.py to time beside the current one")
    p.add_argument("--variants", default=None, help="comma-separated variant names (the kernel always), default all")
    p.add_argument("--once", action="store_true", help="launch each variant twice a cell, untimed (for ncu)")
    p.add_argument("--cells", default=None,
                   help="d:N:causal,... (e.g. 128:1024:1) or pair (PAIR_CELLS), default issue 10's table")
    args = p.parse_args(argv)
    import torch

    if args.compile:
        compiled(args.base)
        return 0
    if not torch.cuda.is_available():
        variant_sources(args.base)
        print("fwd_variants: the edits apply; timing needs an sm_90 GPU")
        return 0
    if args.cells == "pair":
        cells = PAIR_CELLS
    else:
        cells = parse_cells(args.cells)
    save_rows(args.out, "fwd_variants.json",
              run(args.rounds, args.base, args.variants.split(",") if args.variants else None, cells, args.once))
    return 0


if __name__ == "__main__":
    sys.exit(main())

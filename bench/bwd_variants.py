"""What limits the Gluon dK/dV kernel (bench/NOTES.md: 640 TFLOP/s of its products against the dQ kernel's 787 at
d = 128, N = 16k): variants of kernels/gluon_bwd.py's dK/dV kernel, each launched alone on the same inputs, timed in
one process against the kernel as it is (bf16, B·N = 16k tokens, 2048 hidden).

    PYTHONPATH=$PWD python3 bench/bwd_variants.py [--rounds 3] [--variant NAME=FILE ...] [--out DIR]

Variants:
- kernel: kernels/gluon_bwd.py as it is;
- NAME=FILE[:BLOCK_N[xBLOCK_M[xSTAGES]]]: another gluon_bwd.py (e.g. `git show REV:kernels/gluon_bwd.py > FILE`),
  with those tiles where given (d = 64 cells only: e.g. three consumer warpgroups, 192 keys; 128-row query tiles);
  its dK/dV kernel takes LSE and Delta as pointers (the kernel before 2026-11-28), as TMA descriptors of per-row
  slices (`rows_descriptor`), or LSE · log2 e so (`lse2_desc`: branch lse2-ring);
- the source edits of EDITS (--edits): lse_late, delta_early (where LSE and Δ are read from the ring),
  queries_masked (the query index vector built under `if MASKED`, its only reader), regs248
  (the dK/dV consumers' register ceiling 248 instead of 240), zero_lse / zero_delta (ablations: one of the two not read,
  zeros; wrong gradients by construction);
- stagesS, NAME_stagesS (--stages S,...): the kernel (and each variant) with a (Q, dO) ring S deep (kernel_config's
  is 3; 4 makes slot and phase a mask and a shift: the d = 64 loop's integer instructions 79 -> 37 a tile, Triton 3.6
  SASS; d = 128 unbanded spills 68 -> 2; 199 KB of shared memory at d = 128);
- NAME_zero_rows (an ablation of each variant that loads LSE and Delta through pointers): both not loaded (zeros):
  what the per-tile loads and the arithmetic on them cost; its gradients are wrong by construction.
Each variant's dK and dV are compared with the kernel's (max |difference|: 0 = bit for bit).

Session 2026-11-28 (bench/NOTES.md), with the kernel of be8920c as `--variant base=FILE`: base_zero_rows ran
1.22-1.38x base; LSE and Delta through the (Q, dO) ring 1.02-1.17x, bit for bit base's dK and dV (now the kernel).
"""
from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(1, str(_ROOT))

# after the repo root is importable
from bench.fwd_variants import edit_source, load_variant, save_rows, timed_row  # noqa: E402

CELLS = [(128, 16384, False), (128, 16384, True), (128, 4096, False), (128, 1024, False), (64, 16384, False),
         (64, 16384, True), (64, 4096, False)]

_POINTER_LOADS = """    if MASKED:
        lse = gl.load(LSE + bh * Nq + queries, mask=queries < Nq, other=0.0)
        delta = gl.load(Delta + bh * Nq + queries, mask=queries < Nq, other=0.0)
    else:
        lse = gl.load(LSE + bh * Nq + queries)
        delta = gl.load(Delta + bh * Nq + queries)
"""
_ZERO_ROWS = """    lse = gl.zeros([BLOCK_M], gl.float32, gl.SliceLayout(0, s_layout))
    delta = gl.zeros([BLOCK_M], gl.float32, gl.SliceLayout(0, s_layout))
"""


_LSE = ("    lse = lse_smem.reshape([BLOCK_M]).load(gl.SliceLayout(0, s_layout))  # the ring's slice: no global "
        "latency\n")
_DELTA = ("    delta = delta_smem.reshape([BLOCK_M]).load(gl.SliceLayout(0, s_layout))  # loaded late: 16 registers "
          "fewer\n")
_SWAIT = "    sT = warpgroup_mma_wait(1, deps=(sT, ))\n"
_DKDV_REGS = ("                     off_lo, off_hi, GROUP, BAND, BLOCK_N, BLOCK_M, STAGES)),\n"
              "    ], [4, 1], [CONSUMER_REGS, 24])\n")
_ZERO = "gl.zeros([BLOCK_M], gl.float32, gl.SliceLayout(0, s_layout))"
_QUERIES = "    queries = start_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, s_layout))\n"
_MASKED = "    if MASKED:\n        # tiles.py `visible`"
# name -> the edits of kernels/gluon_bwd.py (old, new); the same arithmetic unless the name says "zero" (ablations)
EDITS = {
    "lse_late": [(_LSE + _SWAIT, _SWAIT + _LSE)],  # LSE read after Sᵀ is done (a shorter live range)
    "delta_early": [(_DELTA, ""), (_LSE, _LSE + _DELTA)],  # Δ read with LSE, before Sᵀ's wait (the old placement)
    "regs248": [(_DKDV_REGS, _DKDV_REGS.replace("CONSUMER_REGS", "248"))],  # 2 x 128 x 248 + 32 x 24 <= 64K
    # the query index vector built where it is read only
    "queries_masked": [(_QUERIES, ""), (_MASKED, "    if MASKED:\n    " + _QUERIES + "        # tiles.py `visible`")],
    "zero_lse": [(_LSE, f"    lse = {_ZERO}\n")],
    "zero_delta": [(_DELTA, f"    delta = {_ZERO}\n")],
}


def variant_sources(extra: list[str], edits=tuple(EDITS)) -> dict[str, str]:
    src = (_ROOT / "kernels" / "gluon_bwd.py").read_text()
    out = {"kernel": src, **{name: edit_source(src, EDITS[name], "kernels/gluon_bwd.py") for name in edits}}
    for item in extra:
        name, _, path = item.partition("=")
        out[name] = Path(path.partition(":")[0]).read_text()
    for name, text in list(out.items()):
        if text.count(_POINTER_LOADS) == 1:
            out[f"{name}_zero_rows"] = text.replace(_POINTER_LOADS, _ZERO_ROWS)
    return out


def _tflops(d, n, causal, ms):  # the dK/dV kernel's 4 products of N x N x d
    B, H = 16384 // n, 2048 // d
    return 8 * B * H * n * n * d / (2 if causal else 1) / (ms * 1e-3) / 1e12


def _tiles(extra: list[str]) -> dict[str, dict]:
    """NAME -> the TileConfig fields of the variants given as NAME=FILE:BLOCK_N[xBLOCK_M[xSTAGES]] (BLOCK_N keys a
    program: HALF_N = 64 per consumer warpgroup; BLOCK_M query rows a ring tile); they run at d = 64 only (three
    warpgroups' dK, dV accumulators, or 128-row tiles, do not fit the registers at 128)."""
    out = {}
    for item in extra:
        name, _, rest = item.partition("=")
        if ":" in rest:
            values = [int(x) for x in rest.rpartition(":")[2].split("x")]
            out[name] = dict(zip(("block_n", "block_m", "num_stages"), values))
    return out


def run(rounds: int, extra: list[str], edits=tuple(EDITS), stages=(), cells=tuple(CELLS), group: int = 1) -> list[dict]:
    import torch

    from flashcheck.kernels import gluon_fwd
    from flashcheck.kernels.tiles import LOG2E
    ka = importlib.import_module("flashcheck.kernels.attention")  # the module (the package exports the function)
    tmp = Path(tempfile.mkdtemp(prefix="bwd_variants_"))
    mods = {name: load_variant("gluon_bwd", name, text, tmp) for name, text in variant_sources(extra, edits).items()}
    rows = []
    overrides = _tiles(extra)
    for d, n, causal in cells:
        B, H = 16384 // n, 2048 // d
        g = torch.Generator(device="cuda").manual_seed(0)
        # GQA: group query heads a kv head (K, V, dK, dV of H // group heads)
        q, k, v, do = (torch.randn(B, H // (group if i in (1, 2) else 1), n, d, device="cuda", dtype=torch.bfloat16,
                                   generator=g) for i in range(4))
        with torch.no_grad():
            o, lse = ka.attention(q, k, v, causal=causal, return_lse=True)
        delta = (do.float() * o.float()).sum(-1)
        t = ka.kernel_config(d, torch.bfloat16, engine="gluon").dkdv
        band, off_lo, off_hi = ka._band("bottom_right" if causal else False, None, n, n)
        launch = ka._gluon_dkdv_launch(ka.Layout.of(q), ka.Layout.of(k), band, off_lo, off_hi, t)
        half = mods["kernel"].HALF_N.value  # K's, V's, dK's and dV's boxes: one consumer warpgroup's keys
        dk, dv = torch.empty_like(k), torch.empty_like(v)

        def launcher(m, stages=None, fields=None):
            tt = t if fields is None else replace(t, **fields)
            lau = launch if fields is None else ka._gluon_dkdv_launch(ka.Layout.of(q), ka.Layout.of(k), band, off_lo,
                                                                      off_hi, tt)
            constexprs = dict(lau.constexprs, **({} if stages is None else {"STAGES": stages}))
            names = m.attn_bwd_dkdv_gluon_kernel.arg_names
            # LSE (or LSE · log2 e: the lse2-ring kernels) and Δ as TMA descriptors, or as pointers (kernels before)
            lse_rows = (lse * LOG2E.value) if "lse2_desc" in names else lse
            per_row = ((m.rows_descriptor(lse_rows.view(B * H, n), tt.block_m),
                        m.rows_descriptor(delta.view(B * H, n), tt.block_m))
                       if "lse_desc" in names or "lse2_desc" in names else (lse, delta))
            args = (gluon_fwd.descriptor(q, tt.block_m), gluon_fwd.descriptor(k, half), gluon_fwd.descriptor(v, half),
                    gluon_fwd.descriptor(do, tt.block_m), gluon_fwd.descriptor(dk, half),
                    gluon_fwd.descriptor(dv, half),
                    *per_row, d ** -0.5, *lau.ints)

            def go():
                m.attn_bwd_dkdv_gluon_kernel[lau.grid](*args, **constexprs, num_warps=4)
                return dk, dv
            return go

        fns = {name: launcher(m, fields=overrides.get(name)) for name, m in mods.items()
               if d == 64 or name not in overrides}
        for st in stages:  # each variant with another ring depth (the same arithmetic)
            for name, m in mods.items():
                if name in overrides:
                    continue
                fns["stages%d" % st if name == "kernel" else f"{name}_stages{st}"] = launcher(m, st)
        fns["kernel"]()
        ref = (dk.clone(), dv.clone())
        diff = {}
        for name, fn in fns.items():
            a, b = fn()
            diff[name] = max(float((x.float() - r.float()).abs().max()) for x, r in zip((a, b), ref))
        if group > 1:
            print(f"GQA {H}:{H // group}", flush=True)
        rows.append(dict(timed_row(d, n, causal, fns, rounds, diff, _tflops, "dK,dV"), group=group))
        del q, k, v, do, o, lse, delta, dk, dv
        torch.cuda.empty_cache()
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default=None)
    p.add_argument("--variant", action="append", default=[],
                   help="NAME=FILE or NAME=FILE:BLOCK_N: another gluon_bwd.py (launched with BLOCK_N keys a program)")
    p.add_argument("--head-dims", default="128,64", help="the CELLS of these head dims only, comma-separated")
    p.add_argument("--gqa", type=int, default=1, help="query heads a kv head (TFLOP/s count query heads)")
    p.add_argument("--edits", default=",".join(EDITS), help=f"which source edits, comma-separated ({', '.join(EDITS)})")
    p.add_argument("--stages", default="", help="other (Q, dO) ring depths to time the kernel at, comma-separated")
    args = p.parse_args(argv)
    import torch

    edits = tuple(x for x in args.edits.split(",") if x)
    if not torch.cuda.is_available():
        print("bwd_variants: sources", ", ".join(variant_sources(args.variant, edits)), "; timing needs an sm_90 GPU")
        return 0
    stages = tuple(int(x) for x in args.stages.split(",") if x)
    dims = {int(x) for x in args.head_dims.split(",")}
    save_rows(args.out, "bwd_variants.json",
              run(args.rounds, args.variant, edits, stages, tuple(c for c in CELLS if c[0] in dims), args.gqa))
    return 0


if __name__ == "__main__":
    sys.exit(main())

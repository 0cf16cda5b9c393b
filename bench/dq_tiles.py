"""The Gluon dQ kernel's tiles (issue 10): kernels/gluon_bwd.py's dQ kernel alone, launched with other (key tile,
K / V ring depth) than kernel_config's (128 query rows x 64 keys, 3 deep, at both head dims), timed in one process
on the same inputs (bf16, B·N = 16k tokens, 2048 hidden). At d = 64 a 64-key tile is three 64x64x64 products a step
(S, dP, dQ), small for wgmma; 128 keys compile on Triton 3.6 without spills (`--compile`: both head dims, each tile).
A wider key tile is another dQ sum (the Precision's block_k_dq): each variant's max |dQ − kernel's| is printed.

    PYTHONPATH=$PWD python3 bench/dq_tiles.py [--rounds 3] [--out DIR]     # sm_90
    PYTHONPATH=$PWD python3 bench/dq_tiles.py --compile                    # CPU: spills, shared memory
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(1, str(_ROOT))

TILES = {"kernel": None, "n64_s4": (64, 4), "n128_s2": (128, 2), "n128_s3": (128, 3)}  # (block_n, stages)
CELLS = [(64, 16384, False), (64, 16384, True), (64, 4096, False), (64, 4096, True), (64, 1024, False),
         (64, 1024, True), (128, 16384, False), (128, 4096, False), (128, 1024, True)]


def _kernel_tile(d: int):
    """kernel_config's dQ tile at head dim d (a TileConfig), on the GPU or not."""
    import importlib

    import torch
    ka = importlib.import_module("flashcheck.kernels.attention")
    return ka.kernel_config(d, torch.bfloat16, engine="gluon", interpret=False).dq


def compiled() -> list[dict]:
    from bench.compile_forward import compile_gluon_dq, sass_counts

    rows = []
    for d in (64, 128):
        base = _kernel_tile(d)
        for band in (False, True):
            for name, tile in TILES.items():
                bn, st = tile or (base.block_n, base.num_stages)
                ck = compile_gluon_dq("bfloat16", d, band, 1, bn, st)
                rows.append(dict(d=d, band=band, tile=name, **sass_counts(ck, c7512=True)))
                print(rows[-1], flush=True)
    return rows


def run(rounds: int) -> list[dict]:
    import importlib

    import torch

    from bench.fwd_variants import timed_row
    from bench.gluon.fused_bwd import _inputs, _tflops, dq_launcher, launchers
    ka = importlib.import_module("flashcheck.kernels.attention")

    rows = []
    for d, n, causal in CELLS:
        q, k, v, do = _inputs(16384 // n, 2048 // d, n, d, 1)
        mask = "bottom_right" if causal else False
        _, _, (_, lse, delta) = launchers(q, k, v, do, mask)
        base = _kernel_tile(d)
        band, off_lo, off_hi = ka._band(mask, None, n, n)
        lq, lk = ka.Layout.of(q), ka.Layout.of(k)
        fns, outs = {}, {}
        for name, tile in TILES.items():
            t = base if tile is None else dataclasses.replace(base, block_n=tile[0], num_stages=tile[1])
            if t.num_stages * t.block_n * d * 4 + 4 * 64 * d * 2 > 220 * 1024:  # the K / V ring over shared memory
                continue
            fns[name] = dq_launcher(q, k, v, do, torch.empty_like(q), lse, delta,
                                    ka._gluon_dq_launch(lq, lk, band, off_lo, off_hi, t), t)
            outs[name] = fns[name]().clone()
        diff = {name: float((x.float() - outs["kernel"].float()).abs().max()) for name, x in outs.items()}
        # TFLOP/s of the dQ kernel's own 3 products (S, dP, dQ: 1.5 forwards; _tflops counts 2.5)
        rows.append(timed_row(d, n, causal, fns, rounds, diff, lambda *a: _tflops(*a) * 1.5 / 2.5, "dQ"))
        del q, k, v, do
        torch.cuda.empty_cache()
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--compile", action="store_true", help="CPU: each tile compiled for sm_90, spills and sizes")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    from bench.fwd_variants import save_rows
    if args.compile:
        compiled()
        return 0
    save_rows(args.out, "dq_tiles.json", run(args.rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())

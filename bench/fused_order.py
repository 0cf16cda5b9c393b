"""The fused d = 64 backward (kernels/gluon_bwd_fused.py) in its two add orders against the two Gluon kernels, through
the product's launcher, on unmasked calls at d = 64 (bf16, H = 32 query heads, B = 16k tokens / N): "kernel" the two
kernels (the fused tile's dQ flag off), "fused" the fused kernel in descending key-tile order at every query tile
(FUSED_ROTATE_KEY_TILES = 0), "rotated" with each key tile's full query tiles taken from its own (the launcher's rule).
Forward + backward timed side by side in one process (the order rotated each round, medians of do_bench); dQ run to
run bit for bit per order, and the two fused orders' max |dQ difference| (two sums, both the Precision's `blocked`).

    PYTHONPATH=. python3 bench/fused_order.py --rounds 3 --cells 1024,4096,16384 [--group 2] [--out DIR]
"""
from __future__ import annotations

import argparse
import importlib
import sys
from dataclasses import replace
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(1, str(_ROOT))

from bench.fwd_variants import save_rows, timed_row  # noqa: E402  (after the repo root is importable)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cells", default="1024,2048,4096,8192,16384", help="N or NQxNK, ... (N: N_q = N_k)")
    p.add_argument("--group", type=int, default=1, help="query heads a kv head (GQA)")
    p.add_argument("--causal", action="store_true", help="causal calls (bottom-right; the fused kernel's band)")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    import torch

    from flashcheck.kernels import attention

    ka = importlib.import_module("flashcheck.kernels.attention")  # the module (the package exports the function)
    print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    base = ka.kernel_config(64, torch.bfloat16, engine="gluon")
    tiles = {"kernel": ka.KernelConfig(base.fwd, base.dkdv, replace(base.dq, fused=False)),
             "fused": ka.KernelConfig(base.fwd, base.dkdv, ka.TileConfig(128, 128, 8, 2, gluon=True, fused=True))}
    tiles["rotated"] = tiles["fused"]
    rotate_at = {"kernel": ka.FUSED_ROTATE_KEY_TILES, "fused": 0, "rotated": ka.FUSED_ROTATE_KEY_TILES}

    def order(name):  # the launcher's rule for `name` (its launch records cached per rule: cleared on a change)
        if ka.FUSED_ROTATE_KEY_TILES != rotate_at[name]:
            ka.FUSED_ROTATE_KEY_TILES = rotate_at[name]
            ka._gluon_fused_launch.cache_clear()

    rows = []
    for cell in args.cells.split(","):
        nq, nk = (int(x) for x in (cell.split("x") if "x" in cell else (cell, cell)))
        d, H, B = 64, 32, max(1, 16384 // max(nq, nk))
        g = torch.Generator(device="cuda").manual_seed(nq + 3 * nk)
        q, do = (torch.randn(B, H, nq, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
        k, v = (torch.randn(B, H // args.group, nk, d, device="cuda", dtype=torch.bfloat16, generator=g)
                for _ in range(2))
        leaves = tuple(x.detach().requires_grad_() for x in (q, k, v))

        def run(name):
            def fn():
                order(name)
                o = attention(*leaves, tiles=tiles[name], causal="bottom_right" if args.causal else False)
                return torch.autograd.grad(o, leaves, do)
            return fn
        fns = {name: run(name) for name in tiles}
        grads = {name: [fns[name]() for _ in range(2)] for name in tiles}
        dq = {name: [g[0].float() for g in x] for name, x in grads.items()}
        # dK, dV bit for bit the two kernels' (the descending order's chains: the banded calls' only order)
        dkdv_same = {name: all(bool(torch.equal(a, b)) for a, b in zip(x[0][1:], grads["kernel"][0][1:]))
                     for name, x in grads.items()}
        same = {name: bool(torch.equal(a, b)) for name, (a, b) in dq.items()}
        diff = {name: float((dq[name][0] - dq["kernel"][0]).abs().max()) for name in tiles}
        diff["rotated vs fused"] = float((dq["rotated"][0] - dq["fused"][0]).abs().max())

        def tflops(d_, n_, causal, ms, B=B, nq=nq, nk=nk):  # forward + backward: 3.5 forwards
            return 3.5 * 4 * B * H * nq * nk * 64 / ms / 1e9 / (2 if causal else 1)
        print(f"N_q {nq}, N_k {nk}, B {B}, H {H}, group {args.group}:", flush=True)
        row = timed_row(d, nk, args.causal, fns, args.rounds, diff, tflops, "dQ")
        row.update(Nq=nq, Nk=nk, group=args.group, run_to_run_same=same, dkdv_same_as_kernel=dkdv_same)
        print(f"   dQ run to run bit for bit: {same}; dK, dV bit for bit the two kernels': {dkdv_same}", flush=True)
        rows.append(row)
    order("kernel")
    save_rows(args.out, "fused_order.json", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())

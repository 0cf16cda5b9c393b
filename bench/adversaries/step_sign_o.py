"""An input that exceeds the probabilistic O bound (fp32 ieee) through the fluctuation around O (bench/NOTES.md,
"Round to nearest along O: when is it random?"): uniform rows (q = 0: every p = exp2(0) = 1 exactly) and V's column
c = +a_c for the first half of the keys, -a_c (1 + eps) for the second. O ~ -eps a_c / 2 is small, so the part along
O (charged worst case, u |O| sum C_s) is small; the partial sums F_s climb to ~ a_c / 2 and come back, and every step
of the climb rounds the same way (constant summand: one residue per binade of the running sum), the descent with
the other residue of a_c (1 + eps): the two do not cancel. sec. 6 models sum_s delta_s F_s as random (Azuma,
lambda u sqrt(sum F_s^2) ~ lambda u a sqrt(n / 12)); it grows like n u a instead.

    PYTHONPATH=$PWD python bench/adversaries/step_sign_o.py [--n 4096] [--eps 1e-3]
    PYTHONPATH=. python3 bench/adversaries/step_sign_o.py --source kernel --device cuda --n 512 4096 16384

Prints, per N_k, min and median bound/observed over the O entries and how many are over, for both kinds
(--precision float32:tf32 holds, 2.32 at N_k = 4096; in fp16/bf16 V's values sum exactly in fp32 here: error 0).
"""
from __future__ import annotations

import argparse
import os

import numpy as np


def build(n: int, d: int, eps: float, nq: int = 4, seed: int = 1):
    """(q, k, v) in float32 values; q = 0 makes every row uniform whatever k is."""
    rng = np.random.default_rng(seed)
    a = (0.5 + rng.random(d)).astype(np.float32)
    b = (-(a * np.float32(1 + eps))).astype(np.float32)
    v = np.concatenate([np.tile(a, (n // 2, 1)), np.tile(b, (n - n // 2, 1))]).astype(np.float64)[None, None]
    q = np.zeros((1, 1, nq, d))
    k = rng.standard_normal((1, 1, n, d)).astype(np.float32).astype(np.float64)
    return q, k, v


def run(source: str, device: str, dtype: str, dot: str, q, k, v, mask=None, exp_argument: str = "unknown"):
    """(o, Precision): the emulation (the GPU's FMA order, l in fp64 as our kernel) or our Triton kernel.
    exp_argument "fma" (emulation, fp32 ieee): the FMA-chain logits and the compiled exponent arguments, claimed
    (Precision.ieee_fma_chain, exp_argument)."""
    if source == "emulation":
        from flashcheck.proofs.bounds import Precision
        from flashcheck.proofs.emulation import fa2_forward

        fma = exp_argument == "fma"
        o, _ = fa2_forward(q, k, v, dtype=dtype, dot=dot, mask=mask, l_accumulate="float64", ieee_fma_chain=fma)
        # the forward's query blocks stated (fa2_forward's block_q, 64): a masked head's chains in each block's order
        # (Precision.block_q_fwd; FLASHCHECK_FWD_BLOCKS=0: not stated, the order-free charge)
        blocks = 64 if os.environ.get("FLASHCHECK_FWD_BLOCKS", "1") != "0" else None
        return o, Precision(dtype, dot, exp="libm", l_accumulate="float64", ieee_fma_chain=fma,
                            exp_argument=exp_argument, block_q_fwd=blocks)
    import torch

    from flashcheck.adapters import ours_precision
    from flashcheck.kernels.attention import attention

    tdt = getattr(torch, dtype)
    dp = dot if dtype == "float32" else None
    t = [torch.as_tensor(x, dtype=tdt, device=device) for x in (q, k, v)]
    o = attention(*t, dot_precision=dp, mask=None if mask is None else torch.as_tensor(mask, device=device))
    return o.double().cpu().numpy(), ours_precision(tdt, dp, head_dim=q.shape[-1], interpret=device == "cpu")


def main(argv=None):
    from flashcheck.proofs.bounds import forward_bound
    from flashcheck.reference.attention import attention

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[4096])
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--eps", type=float, default=1e-3)
    ap.add_argument("--source", choices=("emulation", "kernel"), default="emulation")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", default="float32:ieee", help="dtype:dot, as bounds_attack's --precisions")
    ap.add_argument("--masked-key", action="store_true",
                    help="mask key 1: a masked head (bounds.md sec. 6c: the chain in the query block's order)")
    ap.add_argument("--exp-argument", choices=("unknown", "fma"), default="unknown",
                    help="fma: the emulation's FMA-chain logits and compiled exponent arguments, claimed (fp32 ieee)")
    a = ap.parse_args(argv)
    dtype, dot = a.precision.split(":")
    over_any = False
    for n in a.n:
        from flashcheck.proofs.emulation import round_to

        q, k, v = (round_to(x, dtype) for x in build(n, a.d, a.eps))  # what the kernel sees
        mask = None
        if a.masked_key:
            mask = np.ones((1, 1, q.shape[2], n), dtype=bool)
            mask[..., 1] = False
        o, precision = run(a.source, a.device, dtype, dot, q, k, v, mask, a.exp_argument)
        O, _ = attention(q, k, v, mask=mask)
        err = np.abs(o - O)
        for kind in ("probabilistic", "worst_case"):
            b = forward_bound(q, k, v, mask=mask, precision=precision, kind=kind).o
            with np.errstate(divide="ignore"):
                r = np.where(err > 0, b / err, np.inf)  # an exact entry is never over
            over = int((r < 1).sum())
            over_any |= over > 0
            print(f"{a.source} {a.precision} N_k={n} eps={a.eps:g} {kind:13s} O: min bound/observed {r.min():.3g}, "
                  f"median {np.median(r):.3g}, over {over}/{r.size}, max error {err.max():.3g}", flush=True)
    return 1 if over_any else 0


if __name__ == "__main__":
    raise SystemExit(main())

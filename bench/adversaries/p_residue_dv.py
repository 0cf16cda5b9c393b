"""The backward's twin of p_residue_o.py: the rounding of the recomputed P into the operand format before
dV = P^T dO (bounds.md sec. 8). Two keys: key 0 with k = 0 (logit 0) and key 1 with k = e_0; query row i is
q_i = c_i e_0, so P_i1 = exp2(S2_i1 - LSE2_i) depends on c_i alone. Each row's c_i is picked (from the format's
values in [0.5, 4)) by the residue of P_i1 as the backward computes it (from the forward's own LSE): rows with
dO_i0 = +1 round P_i1 up, rows with dO_i0 = -1 round it down. dV_1,0 = sum_i P_i1 dO_i0 then carries
~u_p/4 sum_i P_i1 coherently.

    PYTHONPATH=$PWD python bench/adversaries/p_residue_dv.py [--nq 4096 16384] [--dtype float16]

Prints min bound/observed of dV[1, 0] for both kinds (CPU emulation, our kernel's arithmetic).
"""
from __future__ import annotations

import argparse
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from p_residue_o import LOG2E, residue_in_ulps  # noqa: E402  (bench/adversaries is not a package)


def _residues(c, d, dtype):
    """The residue, in units of the operand's ulp, of P_i1 as fa2_backward computes it for rows q = c e_0."""
    from flashcheck.proofs.emulation import fa2_forward

    tdt = getattr(torch, dtype)
    n = len(c)
    q = np.zeros((1, 1, n, d))
    q[0, 0, :, 0] = c
    k = np.zeros((1, 1, 2, d))
    k[0, 0, 1, 0] = 1.0
    v = np.zeros((1, 1, 2, d))
    _, lse = fa2_forward(q, k, v, dtype=dtype, dot={"float16": "fp16", "bfloat16": "bf16"}[dtype], l_accumulate="float64")
    qk_scale = torch.tensor(LOG2E / math.sqrt(d), dtype=torch.float32)
    s2 = torch.as_tensor(c).float() * qk_scale  # S2_i1 = fl(fl(q.k) * qk_scale), q.k = c exactly
    lse2 = torch.as_tensor(lse[0, 0]).float() * torch.tensor(LOG2E, dtype=torch.float32)
    return residue_in_ulps(torch.exp2(s2 - lse2), tdt)


def build(nq: int, d: int, dtype: str, seed: int = 0):
    tdt = getattr(torch, dtype)
    rng = np.random.default_rng(seed)
    grid = torch.linspace(0.5, 4.0, 1 << 14, dtype=torch.float64).to(tdt).unique().double().numpy()
    r = _residues(grid, d, dtype)
    up, down = grid[(r > 0.55) & (r < 0.95)], grid[(r > 0.05) & (r < 0.45)]
    sign = np.where(rng.random(nq) < 0.5, 1.0, -1.0)
    c = np.where(sign > 0, rng.choice(up, nq), rng.choice(down, nq))
    q = np.zeros((1, 1, nq, d))
    q[0, 0, :, 0] = c
    k = np.zeros((1, 1, 2, d))
    k[0, 0, 1, 0] = 1.0
    v = torch.as_tensor(rng.standard_normal((1, 1, 2, d))).to(tdt).double().numpy()
    do = np.zeros((1, 1, nq, d))
    do[0, 0, :, 0] = sign
    do[0, 0, :, 1:] = torch.as_tensor(rng.standard_normal((nq, d - 1))).to(tdt).double().numpy()
    return q, k, v, do


def main(argv=None):
    from flashcheck.proofs.bounds import Precision, backward_bound
    from flashcheck.proofs.emulation import fa2_backward, fa2_forward
    from flashcheck.reference.attention import attention
    from flashcheck.reference.backward import attention_backward

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nq", type=int, nargs="+", default=[4096, 16384])
    ap.add_argument("--d", type=int, default=16)
    ap.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"))
    a = ap.parse_args(argv)
    dot = {"float16": "fp16", "bfloat16": "bf16"}[a.dtype]
    over_any = False
    for nq in a.nq:
        q, k, v, do = build(nq, a.d, a.dtype)
        o, lse, o32 = fa2_forward(q, k, v, dtype=a.dtype, dot=dot, l_accumulate="float64", return_fp32_o=True)
        g = fa2_backward(q, k, v, o, lse, do, dtype=a.dtype, dot=dot, delta_o=o32)
        O, L = attention(q, k, v)
        ex = attention_backward(q, k, v, O, L, do)
        err = np.abs(g[2] - ex[2])[0, 0, 1, 0]
        for kind in ("probabilistic", "worst_case"):
            pr = Precision(a.dtype, dot, exp="libm", l_accumulate="float64", delta_from="fp32")
            b = backward_bound(q, k, v, do, precision=pr, kind=kind).dv[0, 0, 1, 0]
            over_any |= err > b
            print(f"emulation {a.dtype} N_q={nq} {kind:13s} dV[1, 0]: bound/observed {b / err:.3g} "
                  f"(error {err:.3g}, bound {b:.3g}, dV {ex[2][0, 0, 1, 0]:.3g})", flush=True)
    return 1 if over_any else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""An input against the random model of P's rounding into the operand format (fp16/bf16; bounds.md sec. 6): the
forward rounds P~ = exp2(S2 - m) to the dot's operand format before P~ V, and the probabilistic O bound models the
fluctuation of those roundings around O, sum_j A_j delta_j (v_j - O), as mean-zero and independent (Azuma,
lambda u_p sqrt(sum_j A_j^2 (v_j - O)^2)). Round to nearest is a function of P~'s residue modulo the operand's
ulp, and the logits choose that residue: here every key with v = +1 has a P~ that rounds UP and every key with
v = -1 one that rounds DOWN, so the fluctuation is u_p/4-ish times sum_j A_j |v_j - O| on every key, coherently.

Construction: q = e_0, k_j = (x_j, 0, ...) with x_j in the operand format, so S2_j = fl(fl(x_j) * fl(scale log2 e));
key 0 has x = 0 (the row max, m = 0, in the first tile: no rescale); candidates x in [-2, 0) are sorted by the
residue of P~ = exp2(S2) in the operand's ulp (what exp2 gives in float32; ex2.approx's 2^-22 is far inside the
margins kept: residues in (0.55, 0.95) round up, (0.05, 0.45) down), and the keys of V = +1 draw from the first
pool, those of V = -1 from the second. O ~ 0 on column 0: nothing is charged along O.

    PYTHONPATH=$PWD python bench/adversaries/p_residue_o.py [--n 4096 16384] [--dtype float16]
    PYTHONPATH=. python3 bench/adversaries/p_residue_o.py --source kernel --device cuda --n 4096 16384 65536

Prints, per N_k, min / median bound/observed on O's column 0 for both kinds, and how many entries are over.
"""
from __future__ import annotations

import argparse
import math

import numpy as np
import torch

LOG2E = 1.4426950408889634


def residue_in_ulps(p: torch.Tensor, tdt) -> np.ndarray:
    """Where the float32 values p lie between their two neighbours in the format tdt, in units of that gap:
    below 0.5 they round down, above it up (the gap below a power of two is half the one above)."""
    r = p.to(tdt)
    up = torch.nextafter(r, torch.tensor(math.inf, dtype=tdt)).float()
    dn = torch.nextafter(r, torch.tensor(-math.inf, dtype=tdt)).float()
    lo = torch.where(r.float() > p, dn, r.float())
    hi = torch.where(r.float() > p, r.float(), up)
    return ((p - lo) / (hi - lo)).double().numpy()


def build(n: int, d: int, dtype: str, nq: int = 2, seed: int = 0):
    """(q, k, v) in `dtype` values (float64 arrays)."""
    tdt = getattr(torch, dtype)
    rng = np.random.default_rng(seed)
    scale = 1.0 / math.sqrt(d)
    qk_scale = torch.tensor(scale * LOG2E, dtype=torch.float32)
    # every value of the format in [-2, 0): candidates for x
    grid = torch.linspace(-2.0, 0.0, 1 << 16, dtype=torch.float64).to(tdt).unique().double()
    grid = grid[grid < 0]
    s2 = grid.float() * qk_scale  # fl(fl(x * 1) * qk_scale): the q.k product is x exactly (q = e_0)
    r = residue_in_ulps(torch.exp2(s2), tdt)  # P~ and where it falls in the operand's grid
    up = grid.numpy()[(r > 0.55) & (r < 0.95)]
    down = grid.numpy()[(r > 0.05) & (r < 0.45)]
    if len(up) == 0 or len(down) == 0:
        raise SystemExit("no candidates")
    sign = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    sign[0] = 1.0
    x = np.where(sign > 0, rng.choice(up, n), rng.choice(down, n))
    x[0] = 0.0  # the row max (P~ = 1 exactly), in the first tile
    k = np.zeros((1, 1, n, d))
    k[0, 0, :, 0] = x
    v = np.zeros((1, 1, n, d))
    v[0, 0, :, 0] = sign
    v[0, 0, :, 1:] = rng.standard_normal((n, d - 1))
    v = torch.as_tensor(v).to(tdt).double().numpy()
    q = np.zeros((1, 1, nq, d))
    q[..., 0] = 1.0
    return q, k, v


def main(argv=None):
    from flashcheck.proofs.bounds import Precision, forward_bound
    from flashcheck.reference.attention import attention

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[4096, 16384])
    ap.add_argument("--d", type=int, default=16)
    ap.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"))
    ap.add_argument("--source", choices=("emulation", "kernel"), default="emulation")
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args(argv)
    dot = {"float16": "fp16", "bfloat16": "bf16"}[a.dtype]
    over_any = False
    for n in a.n:
        q, k, v = build(n, a.d, a.dtype)
        if a.source == "emulation":
            from flashcheck.proofs.emulation import fa2_forward

            o, _ = fa2_forward(q, k, v, dtype=a.dtype, dot=dot, l_accumulate="float64")
            precision = Precision(a.dtype, dot, exp="libm", l_accumulate="float64")
        else:
            from flashcheck.adapters import ours_precision
            from flashcheck.kernels.attention import attention as kernel

            tdt = getattr(torch, a.dtype)
            t = [torch.as_tensor(x).to(device=a.device, dtype=tdt) for x in (q, k, v)]
            o = kernel(*t).double().cpu().numpy()
            precision = ours_precision(tdt, None, head_dim=a.d, interpret=a.device == "cpu")
        O, _ = attention(q, k, v)
        err = np.abs(o - O)[..., 0]
        for kind in ("probabilistic", "worst_case"):
            b = forward_bound(q, k, v, precision=precision, kind=kind).o[..., 0]
            with np.errstate(divide="ignore"):
                r = np.where(err > 0, b / np.where(err > 0, err, 1), np.inf)
            over = int((r < 1).sum())
            over_any |= over > 0
            print(f"{a.source} {a.dtype} N_k={n} {kind:13s} O[:, 0]: min bound/observed {r.min():.3g}, "
                  f"median {np.median(r):.3g}, over {over}/{r.size}, max error {err.max():.3g}, |O| {np.abs(O[..., 0]).max():.3g}",
                  flush=True)
    return 1 if over_any else 0


if __name__ == "__main__":
    raise SystemExit(main())

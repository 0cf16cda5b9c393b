"""How sharp would the stored LSE be as an interval of known fp32 values? (issue 8, next step 1 of bench/NOTES.md
"ex2.approx is a table"; a measurement on the CPU emulation, no bound changed.)

Our fp32 ieee forward under the session-2026-11-26e claims: every exponent argument x_j and rescale argument a_t is a
known fp32 number (Precision.exp_argument "fma"), and so is every value ex2(x) (proofs/ex2_model.py) and lg2(x)
(proofs/lg2_model.py). What is not known is l's fp32 tile rowsums' roundings (a tree of depth D <= 6, its pairing
not read). So, per row, in the kernel's units (running max m2_T, base 2):

    l64 in [L (1 - gamma_D) - f, L (1 + gamma_D) + f],   L = sum_t rowsum_t prod_{t' > t} alpha_t'   (exact P~ sums),
    l32 = RN32(l64) in [RN32(l_lo), RN32(l_hi)],  y = RN32(m2_T + lg2(l32)),  z = RN32(y fl32(ln 2))

and, RN32 and lg2 being monotone, the stored LSE z lies in [z(l_lo), z(l_hi)]. This script emulates the kernel (ex2 and
lg2 through the tables, the rowsum a pairwise tree of depth 6), builds that interval from the emulation's trace, and
prints per N_k: how often the emulated LSE is inside it (must be always), the median of |LSE error| bound / observed
for the interval (max distance from the exact LSE to its ends) beside today's bound (forward_bound's lse), and how many
distinct fp32 candidates z the interval holds.

    PYTHONPATH=. python3 bench/lse_interval.py --nk 512 4096 --nq 64
"""
from __future__ import annotations

import argparse
import math

import numpy as np


def interval(trace, m2_T, depth: int, ex2, lg2):
    """[z_lo, z_hi] per row from fa2_forward's trace (per tile: j0, j1, x, a, m_new), fp32 values as float64."""
    L = None
    for (_, _, x, a, _) in trace:
        rs = ex2(x).sum(-1)  # the tile's exact rowsum of the known P~ (float64: exact to ~2^-50 relative)
        alpha = np.where(np.isfinite(a), ex2(np.where(np.isfinite(a), a, 0.0)), 0.0)
        L = rs if L is None else L * alpha + rs
    g = depth * 2.0**-24 / (1 - depth * 2.0**-24)  # gamma_D of fp32's u
    slack = 2.0**-45  # the float64 sums and products above, and the fp64 merges of the kernel (2T 2^-53, T < 2^7)
    lo, hi = L * (1 - g - slack), L * (1 + g + slack)
    ln2 = float(np.float32(math.log(2.0)))

    def z(l64):
        l32 = l64.astype(np.float32).astype(np.float64)  # RN32, monotone
        y = (m2_T + lg2(l32)).astype(np.float32).astype(np.float64)  # exact sum of two fp32, rounded once
        return (y * ln2).astype(np.float32).astype(np.float64)

    return z(lo), z(hi)


def main(argv=None) -> int:
    from bench.bounds_attack import inputs
    from flashcheck.proofs import ex2_model, lg2_model
    from flashcheck.proofs.bounds import Precision, forward_bound
    from flashcheck.proofs.emulation import fa2_forward
    from flashcheck.reference.attention import attention
    from flashcheck.structured import FAMILIES

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nk", type=int, nargs="+", default=[512, 4096])
    ap.add_argument("--nq", type=int, default=64)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--families", nargs="+", default=["random"] + list(FAMILIES))
    a = ap.parse_args(argv)
    pr = Precision("float32", "ieee", exp="libm", l_accumulate="float64", delta_from="fp32", ieee_fma_chain=True,
                   exp_argument="fma", rowsum_depth=6, ex2_known=True)
    print("| N_k | family | inside | today's bound/obs (median) | interval bound/obs (median) | candidates z (max) |")
    print("|---|---|---|---|---|---|")
    for nk in a.nk:
        for fam in a.families:
            q, k, v, _ = inputs(fam, "float32", a.nq, nk, 1, a.d, a.seed)
            trace = []
            o, lse = fa2_forward(q, k, v, dtype="float32", dot="ieee", l_accumulate="float64", ieee_fma_chain=True,
                                 rowsum="tree", block_k=pr.block_k, ex2="h100", lg2="h100", trace=trace)
            _, L = attention(q, k, v)
            m2_T = trace[-1][4]
            z_lo, z_hi = interval(trace, m2_T, 6, ex2_model.ex2, lg2_model.lg2)
            inside = np.mean((lse >= z_lo) & (lse <= z_hi))
            err = np.abs(lse - L)
            bound_iv = np.maximum(np.abs(z_hi - L), np.abs(L - z_lo)) + 2.0**-50 * np.abs(L)
            today = forward_bound(q, k, v, precision=pr).lse
            hit = err > 0
            cand = np.rint((z_hi - z_lo) / np.spacing(np.abs(z_lo).astype(np.float32)).astype(np.float64)) + 1
            print(f"| {nk} | {fam} | {inside:.3f} | {np.median(today[hit] / err[hit]):.3g} | "
                  f"{np.median(bound_iv[hit] / err[hit]):.3g} | {int(cand.max())} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

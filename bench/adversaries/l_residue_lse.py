"""Coherent residues in l's sum, read through the LSE of a third-party fp32 kernel (bench/NOTES.md, "Session
2026-11-27c": the random models still standing). A user kernel's precision (adapters._user: fp32 "ieee", fp32
accumulation, libm exp, key tiles of Precision.block_k = 64 in any order, each tile's rowsum in any order) has
l = sum over tiles of (l alpha + rowsum(P~_tile)) modelled as random (grouped Azuma over equal summands and equal
tile rowsums). One kernel inside that contract is enough to test it: tiles left to right, each rowsum left to right.

Input: one query row, scale 1, q = e_0, k_j = s_j e_0 (the logits are the fp32 values s_j exactly); s_0 = 0 is the
maximum (P~_0 = 1; the running max never moves, alpha = 1 exactly). Every other P~_j = fl32(exp(s_j)) lies in
[2^-23, 2^-20). Tile 0 holds key 0 and 63 keys whose P~ have a residue modulo 2^-23 just under 2^-24: each of its
rowsum's additions, the partial sum in [1, 2), rounds down by ~2^-24. Every later tile's 64 keys are drawn until its
rowsum (fp32, left to right: ~2^-15, nearly exact) has such a residue: each merge l + rowsum rounds down by ~2^-24.
The rowsums are distinct (none grouped). The kernel's LSE = fl32(m + log l); prints |LSE^ - LSE| / LSE's bound.

    PYTHONPATH=$PWD python bench/adversaries/l_residue_lse.py [--n 4096 16384 65536]
"""
from __future__ import annotations

import argparse

import numpy as np
import torch

TILE = 64  # Precision.block_k's default: what the user precision states
LO, HI = 2.0**-24 - 2.0**-31, 2.0**-24  # the residues modulo 2^-23 that round down by ~2^-24 in [1, 2)


def _pool():
    """Every fp32 logit s with fl32(exp(s)) in [2^-23, 2^-20), and those P~ (float64 values of fp32 numbers)."""
    lo, hi = np.float32(-np.log(2.0**-23)), np.float32(-np.log(2.0**-20))  # magnitudes: |s| in [hi, lo]
    mags = np.arange(hi.view(np.int32), lo.view(np.int32) + 1, dtype=np.int32)
    s = -mags.view(np.float32)
    p = torch.exp(torch.from_numpy(s)).numpy()
    keep = (p >= 2.0**-23) & (p < 2.0**-20)
    return s[keep], p[keep]


def _rowsums(p: np.ndarray) -> np.ndarray:
    """fp32 rowsums, left to right, of each row of p (float32)."""
    return np.add.accumulate(p, axis=-1, dtype=np.float32)[..., -1]


def logits(n: int, seed: int = 0) -> np.ndarray:
    """The n logits of the docstring, in the kernel's key order (n a multiple of TILE)."""
    assert n % TILE == 0, f"n must be a multiple of {TILE}"
    rng = np.random.default_rng(seed)
    s, p = _pool()
    r = np.mod(p.astype(np.float64), 2.0**-23)
    coherent = np.flatnonzero((r >= LO) & (r < HI))
    first = np.concatenate([[0.0], s[rng.choice(coherent, TILE - 1, replace=False)]])
    tiles = [first]
    need = n // TILE - 1
    while need:
        idx = rng.integers(0, len(s), size=(4096, TILE))
        rs = np.mod(_rowsums(p[idx]).astype(np.float64), 2.0**-23)
        good = idx[(rs >= LO) & (rs < HI)][:need]
        tiles += list(s[good])
        need -= len(good)
    return np.concatenate(tiles).astype(np.float64)


def kernel_lse(s: np.ndarray) -> float:
    """The fused kernel of the docstring: P~ in fp32, each tile's rowsum left to right, l = l alpha + rowsum in fp32
    (alpha = 1: the maximum is key 0), LSE = fl32(m + log l)."""
    m = np.float32(s.max())
    p = torch.exp(torch.from_numpy((s - m).astype(np.float32))).numpy()
    rows = _rowsums(p.reshape(-1, TILE))
    l = np.float32(0.0)
    for r in rows:
        l = np.float32(l + r)
    return float(np.float32(float(m) + np.log(float(l))))


def case(n: int, d: int = 16):
    """(q, k, v, error): the docstring's inputs (B = H = N_q = 1, head dim d, scale 1) and the kernel's
    |LSE^ - LSE| on them."""
    s = logits(n)
    q = np.zeros((1, 1, 1, d))
    q[..., 0] = 1.0
    k = np.zeros((1, 1, n, d))
    k[0, 0, :, 0] = s
    exact = float(np.log(np.sum(np.exp(s - s.max()))) + s.max())
    return q, k, np.zeros((1, 1, n, d)), abs(kernel_lse(s) - exact)


def main(argv=None):
    from flashcheck.adapters import _precision
    from flashcheck.proofs.bounds import forward_bound

    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, nargs="+", default=[4096, 16384, 65536])
    a = ap.parse_args(argv)
    precision = _precision(input="float32", dot="ieee", accumulate="float32", exp="libm")  # adapters._user's
    assert precision.block_k == TILE
    for n in a.n:
        q, k, v, err = case(n)
        ratios = [err / float(np.asarray(forward_bound(q, k, v, scale=1.0, precision=precision, kind=kind).lse)
                              .ravel()[0]) for kind in ("probabilistic", "worst_case")]
        print(f"N_k={n}: |LSE^ - LSE| = {err:.3g}; / probabilistic bound {ratios[0]:.3g}, / worst case "
              f"{ratios[1]:.3g}", flush=True)


if __name__ == "__main__":
    main()

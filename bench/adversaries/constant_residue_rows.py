"""The row twins of constant_residue_dq.py (bench/NOTES.md, "Known gap: coherent residues in the backward's row
chains", 2026-11-26f): dK_j and dV_j accumulate over the query rows in one fp32 chain per entry; products that are
distinct but share one residue modulo the partial sum's ulp round alike at every step, which the grouped
round-to-nearest model (Azuma over groups of equal products) does not cover.

Inputs (fp32 values, N_k = 2 keys, K = 0 so every logit is 0 and P = 1/2; V's column 0 = +1 / -1 so O = 0, Delta = 0):
  dk: dO_i0 = s_i = +-1 (dS_i0 = s_i / 2), q_i0 = 2 t_i s_i: dK_00 = sum_i t_i;
  dv: q = 0, dO_i0 = 2 t_i: dV_00 = sum_i t_i;
with t_0 = 1.5 (the partial sum in [1, 2)), t_i = (2^-24 - 2^-31) + m_i 2^-23 (m_i random, distinct): every addition
rounds down by the same ~2^-24. --cancel ends with -1.5.

--masking puts a masked entry into the head while every coherent product stays visible (constant_residue_dq.Masked):
"key" adds a third key (K = V = 0) that a dense mask hides from every row; "causal" (top left) puts a zero row 0
(dO_0 = q_0 = 0: its products are 0) in front, which sees key 0 alone, the other rows see both keys (the first query
tile is partial: the kernel's order stays ascending); "window" (left = N_q - 2) puts the zero row last, which does not
see key 0: the last query tile is partial, and the dK/dV kernel visits it first. Before the chains were evaluated in
the kernel's order on masked heads (bounds.md sec. 8), such heads kept the grouped model.

    PYTHONPATH=$PWD python bench/adversaries/constant_residue_rows.py [--n 4096 16384] [--which dk dv] [--cancel]
        [--masking none key causal window] [--source kernel --device cuda]
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # constant_residue_dq, beside this file


def build(n: int, which: str, d: int = 16, spread: int = 5000, cancel: bool = False, seed: int = 0):
    """(q, k, v, do) of the docstring for which = "dk" or "dv"."""
    from constant_residue_dq import coherent_terms

    s = np.where(np.arange(n) < n // 2, 1.0, -1.0)
    t = coherent_terms(n, spread, cancel, seed)
    q = np.zeros((1, 1, n, d))
    k = np.zeros((1, 1, 2, d))
    v = np.zeros((1, 1, 2, d))
    v[0, 0, 0, 0], v[0, 0, 1, 0] = 1.0, -1.0
    do = np.zeros((1, 1, n, d))
    if which == "dk":
        q[..., 0] = 2 * t * s
        do[..., 0] = s
    else:
        do[..., 0] = 2 * t
    return q, k, v, do


MASKINGS = ("none", "key", "causal", "window")


def build_masked(n: int, which: str, masking: str, cancel: bool = False):
    """The inputs of `build` under `masking` (module docstring): a constant_residue_dq.Masked record."""
    from constant_residue_dq import Masked

    if masking == "none":
        return Masked(*build(n, which, cancel=cancel))
    if masking == "key":
        q, k, v, do = build(n, which, cancel=cancel)
        k, v = (np.concatenate([x, np.zeros((1, 1, 1, x.shape[-1]))], axis=2) for x in (k, v))
        mask = np.ones((1, 1, n, 3), dtype=bool)
        mask[..., 2] = False
        return Masked(q, k, v, do, mask=mask)
    q, k, v, do = build(n - 1, which, cancel=cancel)
    zero = np.zeros((1, 1, 1, q.shape[-1]))
    if masking == "causal":
        q, do = (np.concatenate([zero, x], axis=2) for x in (q, do))
        return Masked(q, k, v, do, causal=True)
    if masking == "window":
        q, do = (np.concatenate([x, zero], axis=2) for x in (q, do))
        return Masked(q, k, v, do, window=(n - 2, None))
    raise ValueError(f"masking must be one of {MASKINGS}, got {masking!r}")


def main(argv=None):
    from bench.bounds_attack import run_source
    from flashcheck.proofs.bounds import backward_bound
    from flashcheck.reference.attention import attention
    from flashcheck.reference.backward import attention_backward

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[4096])
    ap.add_argument("--which", nargs="+", choices=("dk", "dv"), default=["dk", "dv"])
    ap.add_argument("--cancel", action="store_true")
    ap.add_argument("--masking", nargs="+", choices=MASKINGS, default=["none"])
    ap.add_argument("--source", choices=("emulation", "kernel"), default="emulation")
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args(argv)
    for n, masking, which in ((n, m, w) for n in a.n for m in a.masking for w in a.which):
        x = build_masked(n, which, masking, a.cancel)
        q, k, v, do, mk = x.q, x.k, x.v, x.do, x.masks()
        (_, _, _, dk, dv), precision = run_source(a.source, a.device, "float32", "ieee", q, k, v, do, **mk)
        O, L = attention(q, k, v, **mk)
        exact = attention_backward(q, k, v, O, L, do, **mk)
        got, want = (dk, exact[1]) if which == "dk" else (dv, exact[2])
        err = np.abs(got - want)
        for kind in ("probabilistic", "worst_case"):
            bb = backward_bound(q, k, v, do, precision=precision, kind=kind, **mk)
            b = bb.dk if which == "dk" else bb.dv
            print(f"{a.source} {which} N_q={n} masking={masking} cancel={a.cancel} {kind:13s}: "
                  f"max error/bound {np.max(err / b):.3g}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

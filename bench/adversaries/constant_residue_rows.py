"""The row twins of constant_residue_dq.py (bench/NOTES.md, "Known gap: coherent residues in the backward's row
chains", 2026-11-26f): dK_j and dV_j accumulate over the query rows in one fp32 chain per entry; products that are
distinct but share one residue modulo the partial sum's ulp round alike at every step, which the grouped
round-to-nearest model (Azuma over groups of equal products) does not cover.

Inputs (fp32 values, N_k = 2 keys, K = 0 so every logit is 0 and P = 1/2; V's column 0 = +1 / -1 so O = 0, Delta = 0):
  dk: dO_i0 = s_i = +-1 (dS_i0 = s_i / 2), q_i0 = 2 t_i s_i: dK_00 = sum_i t_i;
  dv: q = 0, dO_i0 = 2 t_i: dV_00 = sum_i t_i;
with t_0 = 1.5 (the partial sum in [1, 2)), t_i = (2^-24 - 2^-31) + m_i 2^-23 (m_i random, distinct): every addition
rounds down by the same ~2^-24. --cancel ends with -1.5.

    PYTHONPATH=$PWD python bench/adversaries/constant_residue_rows.py [--n 4096 16384] [--which dk dv] [--cancel]
        [--source kernel --device cuda]
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


def main(argv=None):
    from bench.bounds_attack import run_source
    from flashcheck.proofs.bounds import backward_bound
    from flashcheck.reference.attention import attention
    from flashcheck.reference.backward import attention_backward

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[4096])
    ap.add_argument("--which", nargs="+", choices=("dk", "dv"), default=["dk", "dv"])
    ap.add_argument("--cancel", action="store_true")
    ap.add_argument("--source", choices=("emulation", "kernel"), default="emulation")
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args(argv)
    for n in a.n:
        for which in a.which:
            q, k, v, do = build(n, which, cancel=a.cancel)
            (_, _, _, dk, dv), precision = run_source(a.source, a.device, "float32", "ieee", q, k, v, do)
            O, L = attention(q, k, v)
            exact = attention_backward(q, k, v, O, L, do)
            got, want = (dk, exact[1]) if which == "dk" else (dv, exact[2])
            err = np.abs(got - want)
            for kind in ("probabilistic", "worst_case"):
                bb = backward_bound(q, k, v, do, precision=precision, kind=kind)
                b = bb.dk if which == "dk" else bb.dv
                print(f"{a.source} {which} N_q={n} cancel={a.cancel} {kind:13s}: max error/bound {np.max(err / b):.3g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Coherent residues in O's P.V chain, read through Delta (bench/NOTES.md, "Session 2026-11-27b", the Delta validity
fix): uniform rows (q = 0, P~ = 1), V's column 0 = constant_residue_dq.coherent_terms (every fp32 addition of an
ascending chain rounds down), dO = e_0 (Delta = O_0), K = 1: the exact dQ is 0 and the kernel's is
-scale (Delta^ - Delta). Prints max |dQ error| / dQ bound (probabilistic) for our kernel's precision.

    PYTHONPATH=$PWD python bench/adversaries/delta_residue.py [--n 1024 4096] [--cancel] [--source kernel --device cuda]
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # constant_residue_dq, beside this file


def build(n: int, cancel: bool = False, d: int = 16, nq: int = 4):
    """(q, k, v, do) of the docstring, fp32 values."""
    from constant_residue_dq import coherent_terms

    q, k, v = np.zeros((1, 1, nq, d)), np.ones((1, 1, n, d)), np.zeros((1, 1, n, d))
    v[0, 0, :, 0] = coherent_terms(n, 5000, cancel)
    v = v.astype(np.float32).astype(np.float64)
    do = np.zeros((1, 1, nq, d))
    do[..., 0] = 1.0
    return q, k, v, do


def main(argv=None):
    from bench.bounds_attack import run_source
    from flashcheck.proofs.bounds import backward_bound
    from flashcheck.reference.attention import attention
    from flashcheck.reference.backward import attention_backward

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[4096])
    ap.add_argument("--cancel", action="store_true")
    ap.add_argument("--source", choices=("emulation", "kernel"), default="emulation")
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args(argv)
    for n in a.n:
        q, k, v, do = build(n, a.cancel)
        (_, _, dq, _, _), precision = run_source(a.source, a.device, "float32", "ieee", q, k, v, do)
        O, L = attention(q, k, v)
        err = np.abs(dq - attention_backward(q, k, v, O, L, do)[0])
        bound = backward_bound(q, k, v, do, precision=precision).dq
        print(f"{a.source} delta_residue N_k={n} cancel={a.cancel}: max dQ error {err.max():.3g}, "
              f"max error/bound {np.max(err / bound):.6f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

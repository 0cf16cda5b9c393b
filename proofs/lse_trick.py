"""Lemma 8 (proofs/lse_trick.md): A = exp(P - LSE) (the backward recomputes the softmax from the LSE).
Relied on by flashcheck.reference.attention_backward; tests/test_logsumexp.py, tests/test_attention_backward.py."""
from __future__ import annotations

import mpmath as mp
import sympy as sp

from flashcheck.proofs.instances import DPS, assert_close, assert_symbolic_zero, logit_vectors, softmax

STATEMENT = (
    "For a row p of logits with LSE = log sum_k exp(p_k) = m + log sum_k exp(p_k - m) (any m, in particular "
    "the row max): A_j = softmax(p)_j = exp(p_j - LSE)."
)


def check_symbolic() -> None:
    xs = sp.symbols("p_1:5", real=True)
    m = sp.Symbol("m", real=True)
    lse = m + sp.log(sum(sp.exp(x - m) for x in xs))
    total = sum(sp.exp(x) for x in xs)
    # LSE(p) = max + LSE(p - max) for any shift m
    assert_symbolic_zero(sp.simplify(sp.exp(lse) - total), "exp(LSE) = sum exp(p)")
    for x in xs:
        assert_symbolic_zero(sp.simplify(sp.exp(x - lse) - sp.exp(x) / total), "A_j = exp(p_j - LSE)")


def check_numeric() -> None:
    import numpy as np

    from flashcheck.reference import logsumexp

    with mp.workdps(DPS):
        for x in logit_vectors(8):
            m = max(x)
            lse = m + mp.log(mp.fsum(mp.exp(t - m) for t in x))
            assert_close(lse, mp.log(mp.fsum(mp.exp(t) for t in x)), "LSE = m + LSE(p - m)", scale=abs(m))
            assert_close([mp.exp(t - lse) for t in x], softmax(x), "A = exp(p - LSE)")
            # float64 logsumexp: exp args rounded (u|x - m|, exp 2u), N adds, log (2u), + m: derived
            # |err| <= u(|m| + |lse|) + (N + 4) 2u + u max|x - m| (first order; 2x covers the rest)
            xf = np.array([float(t) for t in x])
            u = 2.0**-53
            bound = 2 * (u * (abs(float(m)) + abs(float(lse))) + 2 * (len(x) + 4) * u
                         + u * float(max(x) - min(x)))
            assert abs(logsumexp(xf) - float(lse)) <= bound, "float64 logsumexp vs mpmath"

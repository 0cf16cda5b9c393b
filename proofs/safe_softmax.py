"""Lemma 1 (proofs/safe_softmax.md): safe softmax equals softmax (shift invariance).
Justifies flashcheck.reference.safe_softmax; relied on by tests/test_safe_softmax.py."""
from __future__ import annotations

import mpmath as mp
import sympy as sp

from flashcheck.proofs.instances import (DPS, assert_close, assert_symbolic_zero, logit_vectors, softmax, floats)
from flashcheck.proofs.reference_bounds import softmax_bound

STATEMENT = (
    "For x in R^N and any real c, exp(x_i - c) / sum_j exp(x_j - c) = exp(x_i) / sum_j exp(x_j). "
    "With c = m = max_j x_j every exponent is <= 0 and the denominator is >= 1 (no overflow, no 0/0)."
)


def check_symbolic() -> None:
    # generic N through a symbolic denominator: sum_j e^{x_j - c} = e^{-c} * Sigma, Sigma = sum_j e^{x_j}
    x, c = sp.symbols("x_i c", real=True)
    Sigma = sp.Symbol("Sigma", positive=True)
    shifted = sp.exp(x - c) / (sp.exp(-c) * Sigma)
    assert_symbolic_zero(shifted - sp.exp(x) / Sigma, "shift invariance")
    # and the factorisation sum_j e^{x_j - c} = e^{-c} sum_j e^{x_j} on an explicit N = 4
    xs = sp.symbols("x_1:5", real=True)
    assert_symbolic_zero(sum(sp.exp(t - c) for t in xs) - sp.exp(-c) * sum(sp.exp(t) for t in xs),
                         "denominator factorisation")
    # with c = max: the max entry contributes e^0 = 1 to the denominator, so it is >= 1
    assert sp.exp(xs[0] - xs[0]) == 1


def check_numeric() -> None:
    with mp.workdps(DPS):
        for x in logit_vectors(7):
            m = max(x)
            e = [mp.exp(t - m) for t in x]
            d = mp.fsum(e)
            assert d >= 1
            assert_close([t / d for t in e], softmax(x), "safe softmax vs softmax")
            for c in (mp.mpf(-3), mp.mpf("1e3")):
                e2 = [mp.exp(t - c) for t in x]
                assert_close([t / mp.fsum(e2) for t in e2], softmax(x), "arbitrary shift")
    # the float64 reference on an input where naive exp overflows: finite, and equal to mpmath
    import numpy as np

    from flashcheck.reference import safe_softmax

    row = np.array([1e4, 1e4 - 1.0, 1e4 - 40.0])
    a = safe_softmax(row)
    assert np.all(np.isfinite(a))
    with mp.workdps(DPS):
        exact = softmax([mp.mpf(float(t)) for t in row])
    assert np.all(np.abs(a - np.array([float(t) for t in exact])) <= softmax_bound(row).a)

"""Lemma 2 (proofs/online_softmax.md): the online-softmax recurrence for d'_i.
Justifies flashcheck.reference.online_softmax; relied on by tests/test_online_softmax.py."""
from __future__ import annotations

import mpmath as mp
import sympy as sp

from flashcheck.proofs.instances import (DPS, assert_close, assert_symbolic_zero, logit_vectors, softmax, floats)
from flashcheck.proofs.reference_bounds import softmax_bound

STATEMENT = (
    "With m_0 = -inf, d'_0 = 0, m_i = max(m_{i-1}, x_i), d'_i = d'_{i-1} exp(m_{i-1} - m_i) + exp(x_i - m_i): "
    "d'_i = sum_{j<=i} exp(x_j - m_i) for every i, in particular d'_N = sum_j exp(x_j - m_N), "
    "so softmax(x)_j = exp(x_j - m_N) / d'_N."
)


def online_step(m_prev, d_prev, x_i):
    """One step of the recurrence (the reference's algorithm, symbolically)."""
    m_i = sp.Max(m_prev, x_i)
    return m_i, d_prev * sp.exp(m_prev - m_i) + sp.exp(x_i - m_i)


def check_symbolic(step=online_step) -> None:
    """Base case: the recurrence run from its initial state (m_0 = -inf, d'_0 = 0) on x_1 against the
    definition sum_{j<=1} exp(x_j - m_1). Inductive step: d'_{i-1} = S_{i-1} e^{-m_{i-1}} gives
    d'_i = (S_{i-1} + e^{x_i}) e^{-m_i} with m_i = max(m_{i-1}, x_i) as the step computes it."""
    x_1, x_i, m_prev = sp.symbols("x_1 x_i m_{i-1}", real=True)
    m_1, d_1 = step(-sp.oo, sp.Integer(0), x_1)
    if sp.simplify(m_1 - x_1) != 0:
        raise AssertionError(f"base case: m_1 = {m_1}, expected x_1")
    assert_symbolic_zero(d_1 - sp.exp(x_1 - m_1), "base case: d'_1 = sum_{j<=1} exp(x_j - m_1)")
    S_prev = sp.Symbol("S_{i-1}", positive=True)  # sum_{j<i} e^{x_j}
    m_i, d_i = step(m_prev, S_prev * sp.exp(-m_prev), x_i)
    assert_symbolic_zero(d_i - (S_prev + sp.exp(x_i)) * sp.exp(-m_i), "inductive step")


def online(x):
    m, d = mp.ninf, mp.mpf(0)
    for t in x:
        m_new = max(m, t)
        d = (d * mp.exp(m - m_new) if d != 0 else mp.mpf(0)) + mp.exp(t - m_new)
        m = m_new
    return m, d


def check_numeric() -> None:
    import numpy as np

    from flashcheck.reference import online_softmax

    with mp.workdps(DPS):
        for x in logit_vectors(9):
            m, d = online(x)
            assert m == max(x)
            assert_close(d, mp.fsum(mp.exp(t - m) for t in x), "d'_N")
            exact = softmax(x)
            assert_close([mp.exp(t - m) / d for t in x], exact, "softmax from d'_N")
            ref = online_softmax(np.array([float(t) for t in x]))
            assert np.all(np.isfinite(ref))
            err = np.abs(ref - np.array([float(t) for t in exact]))
            assert np.all(err <= softmax_bound(floats(x)).a), "float64 online_softmax vs mpmath"

"""Lemma 4 (proofs/row_recurrence.md): the single-pass recurrence o'_i (normalized every step) gives
softmax(x) V. Justifies flashcheck.reference.row_recurrence; relied on by tests/test_row_recurrence.py."""
from __future__ import annotations

import mpmath as mp
import sympy as sp

from flashcheck.proofs.instances import (DPS, assert_close, assert_symbolic_zero, logit_vectors, floats,
                                         softmax, value_rows)
from flashcheck.proofs.reference_bounds import row_recurrence_bound

STATEMENT = (
    "With o'_0 = 0, o'_i = o'_{i-1} d'_{i-1} exp(m_{i-1} - m_i) / d'_i + exp(x_i - m_i) / d'_i V_i "
    "(m_i, d'_i of Lemma 2): o'_i = sum_{j<=i} exp(x_j - m_i) / d'_i V_j, so o'_N = softmax(x) V."
)


def check_symbolic() -> None:
    m_prev, m_i, x_i, v_i = sp.symbols("m_{i-1} m_i x_i V_i", real=True)
    S_prev = sp.Symbol("S_{i-1}", positive=True)  # sum_{j<i} e^{x_j}
    W_prev = sp.Symbol("W_{i-1}", real=True)  # sum_{j<i} e^{x_j} V_j (one column)
    # base case: o'_1 = e^{x_1 - m_1} / d'_1 V_1 = V_1 (d'_1 = e^{x_1 - m_1})
    x_1, v_1 = sp.symbols("x_1 V_1", real=True)
    assert_symbolic_zero(sp.exp(x_1 - x_1) / sp.exp(x_1 - x_1) * v_1 - v_1, "base case")
    # inductive step: hypothesis o'_{i-1} = W_{i-1} / S_{i-1}, d'_{i-1} = S_{i-1} e^{-m_{i-1}}
    d_prev = S_prev * sp.exp(-m_prev)
    d_i = d_prev * sp.exp(m_prev - m_i) + sp.exp(x_i - m_i)
    o_i = (W_prev / S_prev) * d_prev * sp.exp(m_prev - m_i) / d_i + sp.exp(x_i - m_i) / d_i * v_i
    assert_symbolic_zero(sp.simplify(o_i - (W_prev + sp.exp(x_i) * v_i) / (S_prev + sp.exp(x_i))),
                         "inductive step")


def recurrence(x, V):
    m, d, o = mp.ninf, mp.mpf(0), [mp.mpf(0)] * len(V[0])
    for t, row in zip(x, V):
        m_new = max(m, t)
        scale_old = d * mp.exp(m - m_new) if d != 0 else mp.mpf(0)
        d_new = scale_old + mp.exp(t - m_new)
        o = [oc * scale_old / d_new + mp.exp(t - m_new) / d_new * vc for oc, vc in zip(o, row)]
        m, d = m_new, d_new
    return o


def check_numeric() -> None:
    import numpy as np

    from flashcheck.reference import row_recurrence

    with mp.workdps(DPS):
        for x in logit_vectors(8):
            V = value_rows(len(x), 3)
            a = softmax(x)
            exact = [mp.fsum(a[j] * V[j][c] for j in range(len(x))) for c in range(3)]
            assert_close(recurrence(x, V), exact, "o'_N = softmax(x) V", scale=1e3)
            xf = np.array([float(t) for t in x])
            vf = np.array([[float(t) for t in row] for row in V])
            ref = row_recurrence(xf, vf)
            b = row_recurrence_bound(floats(x), vf)
            assert np.all(np.abs(ref - np.array([float(t) for t in exact])) <= b), "float64 row_recurrence"

"""Lemma 5 (proofs/tiled_row_recurrence.md): normalize-at-end equals normalize-each-step, o'_t = O_t / d'_t,
over tiles. Justifies flashcheck.reference.tiled_row_recurrence; relied on by tests/test_tiled_row_recurrence.py."""
from __future__ import annotations

import mpmath as mp
import sympy as sp

from flashcheck.proofs.instances import (DPS, assert_close, assert_symbolic_zero, logit_vectors, floats,
                                         softmax, value_rows)
from flashcheck.proofs.reference_bounds import row_recurrence_bound

STATEMENT = (
    "Over tiles t: unnormalized O_t = O_{t-1} exp(m_{t-1} - m_t) + sum_{j in t} exp(x_j - m_t) V_j and "
    "normalized o'_t = o'_{t-1} d'_{t-1} exp(m_{t-1} - m_t) / d'_t + sum_{j in t} exp(x_j - m_t) / d'_t V_j "
    "satisfy o'_t = O_t / d'_t for every t; so normalizing once at the end gives softmax(x) V."
)


J = sp.Idx("j")
X = sp.IndexedBase("x", real=True)
V = sp.IndexedBase("V", real=True)


def tile_step(state, lo, hi, M):
    """One tile (keys lo..hi, max M) of the normalized recurrence: (m, d', o') -> (m_t, d'_t, o'_t)."""
    m, d, o = state
    m_t = sp.Max(m, M)
    alpha = sp.exp(m - m_t)
    d_t = d * alpha + sp.Sum(sp.exp(X[J] - m_t), (J, lo, hi))
    return m_t, d_t, o * d * alpha / d_t + sp.Sum(sp.exp(X[J] - m_t) * V[J], (J, lo, hi)) / d_t


def check_symbolic(step=tile_step) -> None:
    """Tiles of symbolic sizes a and b. Base case: one tile from the initial state (m = -inf, d' = 0,
    o' = 0) against the definition softmax(x_1..a) V = sum e^{x_j} V_j / sum e^{x_j} (unshifted).
    Inductive step, any sizes: a second tile gives softmax(x_1..a+b) V over the union of the tiles.
    And o'_t = O_t / d'_t with the unnormalized O_t = O_{t-1} e^{m_{t-1} - m_t} + tile sum."""
    from flashcheck.proofs.instances import assert_sum_identity

    a, b = sp.symbols("a b", integer=True, positive=True)
    M1, M2 = sp.symbols("M_1 M_2", real=True)

    def softmax_v(parts):
        num = sum(sp.Sum(sp.exp(X[J]) * V[J], (J, lo, hi)) for lo, hi in parts)
        return num / sum(sp.Sum(sp.exp(X[J]), (J, lo, hi)) for lo, hi in parts)

    s1 = step((-sp.oo, sp.Integer(0), sp.Integer(0)), 1, a, M1)
    assert_sum_identity(s1[2] - softmax_v([(1, a)]), "base case: o'_1 = softmax(x_1..a) V")
    s2 = step(s1, a + 1, a + b, M2)
    assert_sum_identity(s2[2] - softmax_v([(1, a), (a + 1, a + b)]), "inductive step: tiles of sizes a, b")
    # normalize-at-end: with o'_{t-1} = O_{t-1} / d'_{t-1}, the step gives O_t / d'_t
    m_prev, M = sp.symbols("m_{t-1} M", real=True)
    O_prev = sp.Symbol("O_{t-1}", real=True)
    d_prev = sp.Symbol("d'_{t-1}", positive=True)
    m_t, d_t, o_t = step((m_prev, d_prev, O_prev / d_prev), a + 1, a + b, M)
    O_t = O_prev * sp.exp(m_prev - m_t) + sp.Sum(sp.exp(X[J] - m_t) * V[J], (J, a + 1, a + b))
    assert_sum_identity(o_t - O_t / d_t, "o'_t = O_t / d'_t")


def both(x, V, block):
    dv = len(V[0])
    m, d, o, O = mp.ninf, mp.mpf(0), [mp.mpf(0)] * dv, [mp.mpf(0)] * dv
    for t0 in range(0, len(x), block):
        xt, vt = x[t0:t0 + block], V[t0:t0 + block]
        m_new = max(m, max(xt))
        alpha = mp.exp(m - m_new) if d != 0 else mp.mpf(0)
        d_new = d * alpha + mp.fsum(mp.exp(t - m_new) for t in xt)
        tile = [mp.fsum(mp.exp(t - m_new) * row[c] for t, row in zip(xt, vt)) for c in range(dv)]
        o = [oc * d * alpha / d_new + tc / d_new for oc, tc in zip(o, tile)]
        O = [Oc * alpha + tc for Oc, tc in zip(O, tile)]
        m, d = m_new, d_new
        assert_close(o, [Oc / d for Oc in O], "o'_t = O_t / d'_t", scale=1e3)
    return o, [Oc / d for Oc in O]


def check_numeric() -> None:
    import numpy as np

    from flashcheck.reference import tiled_row_recurrence

    with mp.workdps(DPS):
        for x in logit_vectors(11):
            V = value_rows(len(x), 2)
            a = softmax(x)
            exact = [mp.fsum(a[j] * V[j][c] for j in range(len(x))) for c in range(2)]
            vf = np.array([[float(t) for t in row] for row in V])
            for block in (1, 2, 4, 11):
                o, o_end = both(x, V, block)
                assert_close(o_end, exact, "normalize at end = softmax(x) V", scale=1e3)
                ref = tiled_row_recurrence(np.array([float(t) for t in x]), vf, block)
                err = np.abs(ref - np.array([float(t) for t in exact]))
                assert np.all(err <= row_recurrence_bound(floats(x), vf, block)), "float64 tiled_row_recurrence"

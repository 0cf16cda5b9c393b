"""Lemma 5 (proofs/tiled_row_recurrence.md): normalize-at-end equals normalize-each-step, o'_t = O_t / d'_t,
over tiles. Justifies reference.tiled_row_recurrence; relied on by tests/test_tiled_row_recurrence.py."""
from __future__ import annotations

import mpmath as mp
import sympy as sp

from proofs.instances import (DPS, assert_close, assert_symbolic_zero, logit_vectors, floats,
                              softmax, value_rows)
from proofs.reference_bounds import row_recurrence_bound

STATEMENT = (
    "Over tiles t: unnormalized O_t = O_{t-1} exp(m_{t-1} - m_t) + sum_{j in t} exp(x_j - m_t) V_j and "
    "normalized o'_t = o'_{t-1} d'_{t-1} exp(m_{t-1} - m_t) / d'_t + sum_{j in t} exp(x_j - m_t) / d'_t V_j "
    "satisfy o'_t = O_t / d'_t for every t; so normalizing once at the end gives softmax(x) V."
)


def check_symbolic() -> None:
    m_prev, m_t = sp.symbols("m_{t-1} m_t", real=True)
    O_prev = sp.Symbol("O_{t-1}", real=True)
    d_prev = sp.Symbol("d'_{t-1}", positive=True)
    xs = sp.symbols("x_1:3", real=True)  # a tile of 2
    vs = sp.symbols("V_1:3", real=True)
    # base case t = 1 (O_0 = 0, d'_0 = 0): o'_1 = sum_tile e^{x-m} V / d'_1 = O_1 / d'_1 by definition
    d_t = d_prev * sp.exp(m_prev - m_t) + sum(sp.exp(x - m_t) for x in xs)
    tile = sum(sp.exp(x - m_t) * v for x, v in zip(xs, vs))
    O_t = O_prev * sp.exp(m_prev - m_t) + tile
    # inductive step: o'_{t-1} = O_{t-1} / d'_{t-1}  =>  o'_t = O_t / d'_t
    o_t = (O_prev / d_prev) * d_prev * sp.exp(m_prev - m_t) / d_t + tile / d_t
    assert_symbolic_zero(sp.simplify(o_t - O_t / d_t), "inductive step")
    o_1 = tile.subs(m_t, m_t) / sum(sp.exp(x - m_t) for x in xs)
    assert_symbolic_zero(sp.simplify(o_1 - tile / sum(sp.exp(x - m_t) for x in xs)), "base case")


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

    from reference import tiled_row_recurrence

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

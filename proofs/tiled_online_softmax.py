"""Lemma 3 (proofs/tiled_online_softmax.md): block max / block sum recurrence; softmax over
concatenated blocks. Justifies reference.tiled_online_softmax; tests/test_tiled_online_softmax.py."""
from __future__ import annotations

import mpmath as mp
import sympy as sp

from proofs.instances import (DPS, assert_close, assert_symbolic_zero, logit_vectors, softmax, floats)
from proofs.reference_bounds import softmax_bound

STATEMENT = (
    "For tiles x^(1), ..., x^(T) of x: m_t = max(m_{t-1}, max x^(t)), "
    "l_t = l_{t-1} exp(m_{t-1} - m_t) + sum_{j in tile t} exp(x_j - m_t) gives l_T = sum_j exp(x_j - m_T). "
    "Decomposition: for x = [x1, x2] with block maxima m1, m2, sums l1, l2 and m = max(m1, m2), "
    "softmax(x) = [e^{m1-m} l1 softmax(x1), e^{m2-m} l2 softmax(x2)] / (e^{m1-m} l1 + e^{m2-m} l2)."
)


def check_symbolic() -> None:
    m_prev, m_t = sp.symbols("m_{t-1} m_t", real=True)
    S_prev = sp.Symbol("S_{t-1}", positive=True)
    xs = sp.symbols("x_1:4", real=True)  # a tile of 3
    # base case t = 1: l_1 = sum_{j in tile 1} e^{x_j - m_1}, the definition (l_0 = 0)
    # inductive step: l_{t-1} = S_{t-1} e^{-m_{t-1}}  =>  l_t = (S_{t-1} + sum_tile e^{x_j}) e^{-m_t}
    l_t = S_prev * sp.exp(-m_prev) * sp.exp(m_prev - m_t) + sum(sp.exp(x - m_t) for x in xs)
    assert_symbolic_zero(l_t - (S_prev + sum(sp.exp(x) for x in xs)) * sp.exp(-m_t), "inductive step")
    # decomposition over two concatenated blocks of 2, with arbitrary shifts m1, m2, m
    a = sp.symbols("a_1:3", real=True)
    b = sp.symbols("b_1:3", real=True)
    m1, m2, m = sp.symbols("m1 m2 m", real=True)
    l1 = sum(sp.exp(t - m1) for t in a)
    l2 = sum(sp.exp(t - m2) for t in b)
    den = sp.exp(m1 - m) * l1 + sp.exp(m2 - m) * l2
    full = sum(sp.exp(t) for t in a + b)
    for t in a:
        lhs = sp.exp(m1 - m) * l1 * (sp.exp(t - m1) / l1) / den
        assert_symbolic_zero(sp.simplify(lhs - sp.exp(t) / full), "decomposition, block 1")
    for t in b:
        lhs = sp.exp(m2 - m) * l2 * (sp.exp(t - m2) / l2) / den
        assert_symbolic_zero(sp.simplify(lhs - sp.exp(t) / full), "decomposition, block 2")


def tiled(x, block):
    m, l = mp.ninf, mp.mpf(0)
    for t0 in range(0, len(x), block):
        tile = x[t0:t0 + block]
        m_new = max(m, max(tile))
        l = (l * mp.exp(m - m_new) if l != 0 else mp.mpf(0)) + mp.fsum(mp.exp(t - m_new) for t in tile)
        m = m_new
    return m, l


def check_numeric() -> None:
    import numpy as np

    from reference import tiled_online_softmax

    with mp.workdps(DPS):
        for x in logit_vectors(10):
            exact = softmax(x)
            for block in (1, 3, 4, 10, 16):
                m, l = tiled(x, block)
                assert_close(l, mp.fsum(mp.exp(t - m) for t in x), f"l_T, block {block}")
                assert_close([mp.exp(t - m) / l for t in x], exact, "softmax from l_T")
                ref = tiled_online_softmax(np.array([float(t) for t in x]), block)
                err = np.abs(ref - np.array([float(t) for t in exact]))
                assert np.all(err <= softmax_bound(floats(x)).a), "float64 tiled_online_softmax vs mpmath"
            # decomposition with blocks [0:4], [4:]
            x1, x2 = x[:4], x[4:]
            m1, m2 = max(x1), max(x2)
            mm = max(m1, m2)
            l1 = mp.fsum(mp.exp(t - m1) for t in x1)
            l2 = mp.fsum(mp.exp(t - m2) for t in x2)
            den = mp.exp(m1 - mm) * l1 + mp.exp(m2 - mm) * l2
            parts = ([mp.exp(m1 - mm) * l1 * s / den for s in softmax(x1)]
                     + [mp.exp(m2 - mm) * l2 * s / den for s in softmax(x2)])
            assert_close(parts, exact, "decomposition")

"""Lemma 3 (proofs/tiled_online_softmax.md): block max / block sum recurrence; softmax over
concatenated blocks. Justifies flashcheck.reference.tiled_online_softmax; tests/test_tiled_online_softmax.py."""
from __future__ import annotations

import mpmath as mp
import sympy as sp

from flashcheck.proofs.instances import (DPS, assert_close, assert_symbolic_zero, logit_vectors, softmax, floats)
from flashcheck.proofs.reference_bounds import softmax_bound

STATEMENT = (
    "For tiles x^(1), ..., x^(T) of x: m_t = max(m_{t-1}, max x^(t)), "
    "l_t = l_{t-1} exp(m_{t-1} - m_t) + sum_{j in tile t} exp(x_j - m_t) gives l_T = sum_j exp(x_j - m_T). "
    "Decomposition: for x = [x1, x2] with block maxima m1, m2, sums l1, l2 and m = max(m1, m2), "
    "softmax(x) = [e^{m1-m} l1 softmax(x1), e^{m2-m} l2 softmax(x2)] / (e^{m1-m} l1 + e^{m2-m} l2)."
)


J = sp.Idx("j")
X = sp.IndexedBase("x", real=True)


def tile_step(m_prev, l_prev, lo, hi, M):
    """One tile (keys lo..hi, their max M) of the recurrence: (m_t, l_t)."""
    m_t = sp.Max(m_prev, M)
    return m_t, l_prev * sp.exp(m_prev - m_t) + sp.Sum(sp.exp(X[J] - m_t), (J, lo, hi))


def check_symbolic(step=tile_step) -> None:
    """Tiles of symbolic sizes a and b. Base case: one tile from the initial state (m_0 = -inf,
    l_0 = 0) gives l_1 = sum_{j<=a} e^{x_j - m_1}; then a second tile gives l_2 = sum over keys
    1..a+b (the disjoint union of the two tiles) of e^{x_j - m_2}: the inductive step for any sizes.
    Then the decomposition of softmax over two concatenated blocks, general sizes and shifts."""
    from flashcheck.proofs.instances import assert_sum_identity

    a, b = sp.symbols("a b", integer=True, positive=True)
    M1, M2 = sp.symbols("M_1 M_2", real=True)
    m_1, l_1 = step(-sp.oo, sp.Integer(0), 1, a, M1)
    assert_sum_identity(l_1 - sp.Sum(sp.exp(X[J] - m_1), (J, 1, a)), "base case: l_1 over tile 1")
    m_2, l_2 = step(m_1, l_1, a + 1, a + b, M2)
    both = sp.Sum(sp.exp(X[J] - m_2), (J, 1, a)) + sp.Sum(sp.exp(X[J] - m_2), (J, a + 1, a + b))
    assert_sum_identity(l_2 - both, "inductive step: l_2 over tiles of sizes a and b")
    # decomposition over blocks 1..a and a+1..a+b with arbitrary shifts m1, m2, m; entry j of each block
    m1, m2, m = sp.symbols("m1 m2 m", real=True)
    l1 = sp.Sum(sp.exp(X[J] - m1), (J, 1, a))
    l2 = sp.Sum(sp.exp(X[J] - m2), (J, a + 1, a + b))
    den = sp.exp(m1 - m) * l1 + sp.exp(m2 - m) * l2
    full = sp.Sum(sp.exp(X[J]), (J, 1, a)) + sp.Sum(sp.exp(X[J]), (J, a + 1, a + b))
    x_k = sp.Symbol("x_k", real=True)  # any key of block 1 (block 2: the same with m2, l2)
    for mb, lb in ((m1, l1), (m2, l2)):
        lhs = sp.exp(mb - m) * lb * (sp.exp(x_k - mb) / lb) / den
        assert_sum_identity(lhs - sp.exp(x_k) / full, "decomposition")


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

    from flashcheck.reference import tiled_online_softmax

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

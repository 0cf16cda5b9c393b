"""Lemma 6 (proofs/flash_attention_1.md): FlashAttention-1 Algorithm 1 returns softmax(QK^T)V (Theorem 1)
with O(N) extra memory. Justifies flashcheck.reference.flash_attention_1; relied on by tests/test_flash_attention_1.py."""
from __future__ import annotations

import mpmath as mp
import sympy as sp

from flashcheck.proofs.instances import DPS, assert_close, assert_symbolic_zero, attention_inputs, within

STATEMENT = (
    "Algorithm 1 keeps, for each query row after the key blocks 1..j, the invariant m = max_{k<=j} s_k, "
    "l = sum_{k<=j} exp(s_k - m), O = sum_{k<=j} exp(s_k - m) V_k / l (lines 10-12 preserve it), so it "
    "returns O = softmax(QK^T) V; besides the output it stores only l and m in HBM: O(N) extra memory, "
    "and its on-chip footprint depends on M and d only."
)


def check_symbolic() -> None:
    m_i, m_t, m_new = sp.symbols("m_i m~_ij m_i^new", real=True)
    L = sp.Symbol("L", positive=True)  # sum over the blocks seen so far of e^{s}
    W = sp.Symbol("W", real=True)  # sum over the blocks seen so far of e^{s} V (one column)
    s = sp.symbols("s_1:3", real=True)  # one row of the new block S_ij (B_c = 2)
    v = sp.symbols("v_1:3", real=True)
    # invariant before the step: l_i = L e^{-m_i}, O_i = W / L
    l_i = L * sp.exp(-m_i)
    O_i = W / L
    P = [sp.exp(x - m_t) for x in s]  # line 10: P~_ij = exp(S_ij - m~_ij)
    l_t = sum(P)  # line 10: l~_ij = rowsum(P~_ij)
    l_new = sp.exp(m_i - m_new) * l_i + sp.exp(m_t - m_new) * l_t  # line 11
    O_new = (l_i * sp.exp(m_i - m_new) * O_i + sp.exp(m_t - m_new) * sum(p * x for p, x in zip(P, v))) / l_new
    L_new = L + sum(sp.exp(x) for x in s)
    W_new = W + sum(sp.exp(x) * y for x, y in zip(s, v))
    assert_symbolic_zero(sp.simplify(l_new - L_new * sp.exp(-m_new)), "line 11 keeps l = L e^{-m}")
    assert_symbolic_zero(sp.simplify(O_new - W_new / L_new), "line 12 keeps O = W / L")
    # base case: before any block, l = 0, O = 0 (L = W = 0: the empty sums); the first block gives
    # l = l~ e^{m~ - m_new}, O = P~ V / l~ -- the step above with L, W -> 0
    first = (sp.exp(m_t - m_new) * sum(p * x for p, x in zip(P, v))) / (sp.exp(m_t - m_new) * l_t)
    assert_symbolic_zero(sp.simplify(first - sum(sp.exp(x) * y for x, y in zip(s, v)) / sum(sp.exp(x) for x in s)),
                         "base case")


def algorithm1_row(srow, V, b_c):
    """Lines 5-13 for one query row, in mpmath."""
    m, l, O = mp.ninf, mp.mpf(0), [mp.mpf(0)] * len(V[0])
    for j0 in range(0, len(srow), b_c):
        S = srow[j0:j0 + b_c]
        mt = max(S)
        P = [mp.exp(x - mt) for x in S]
        lt = mp.fsum(P)
        m_new = max(m, mt)
        a = mp.exp(m - m_new) if l != 0 else mp.mpf(0)
        l_new = a * l + mp.exp(mt - m_new) * lt
        O = [(l * a * o + mp.exp(mt - m_new) * mp.fsum(p * row[c] for p, row in zip(P, V[j0:j0 + b_c]))) / l_new
             for c, o in enumerate(O)]
        m, l = m_new, l_new
    return O


def check_numeric() -> None:
    import numpy as np

    from flashcheck.proofs.bounds import reference_bound
    from flashcheck.reference import flash_attention_1
    from flashcheck.reference.exact import exact_attention

    with mp.workdps(DPS):
        rng = np.random.default_rng(0)
        for scale in (1.0, 30.0):
            s = [[mp.mpf(float(x)) for x in row] for row in rng.standard_normal((3, 10)) * scale]
            V = [[mp.mpf(float(x)) for x in row] for row in rng.standard_normal((10, 2))]
            for srow in s:
                e = [mp.exp(x) for x in srow]
                exact = [mp.fsum(ei * row[c] for ei, row in zip(e, V)) / mp.fsum(e) for c in range(2)]
                for b_c in (1, 3, 10):
                    assert_close(algorithm1_row(srow, V, b_c), exact, "Algorithm 1 = softmax(S) V")
    for seed, causal, M in ((0, False, 16), (1, True, 48), (2, "bottom_right", 200)):
        q, k, v, _ = attention_inputs(seed, logit_scale=3.0)
        o, stats = flash_attention_1(q, k, v, sram_size=M, causal=causal)
        o_x, _ = exact_attention(q, k, v, causal=causal)
        within(f"flash_attention_1 (M={M})", o, o_x, reference_bound(q, k, v, causal=causal).o)
    # O(N) extra memory: the on-chip peak does not grow with N; HBM holds only O, l, m besides inputs
    peaks = set()
    for N in (8, 32, 64):
        q, k, v, _ = attention_inputs(3, Nq=N, Nk=N)
        peaks.add(flash_attention_1(q, k, v, sram_size=64)[1].peak_on_chip)
    assert len(peaks) == 1, f"on-chip footprint depends on N: {peaks}"

"""Lemma 7 (proofs/flash_attention_2_forward.md): FA2 forward with deferred normalization and
LSE = m + log l. Justifies flashcheck.reference.flash_attention_2_forward; tests/test_flash_attention_2_forward.py."""
from __future__ import annotations

import mpmath as mp
import sympy as sp

from flashcheck.proofs.instances import DPS, assert_close, assert_symbolic_zero, attention_inputs, within

STATEMENT = (
    "With m^(0) = -inf, l^(0) = 0, O~^(0) = 0 and for each key block j: m^(j) = max(m^(j-1), rowmax S_j), "
    "P_j = exp(S_j - m^(j)), l^(j) = e^{m^(j-1) - m^(j)} l^(j-1) + rowsum P_j, "
    "O~^(j) = diag(e^{m^(j-1) - m^(j)}) O~^(j-1) + P_j V_j: after the last block O = diag(l)^-1 O~ = "
    "softmax(S) V and LSE = m + log l = log sum_k exp(s_k)."
)


def check_symbolic() -> None:
    m_prev, m_j = sp.symbols("m^{(j-1)} m^{(j)}", real=True)
    L = sp.Symbol("L", positive=True)  # sum over earlier blocks of e^{s}
    W = sp.Symbol("W", real=True)  # sum over earlier blocks of e^{s} V
    s = sp.symbols("s_1:4", real=True)
    v = sp.symbols("v_1:4", real=True)
    # invariant: l^(j-1) = L e^{-m^(j-1)}, O~^(j-1) = W e^{-m^(j-1)}
    l_prev, O_prev = L * sp.exp(-m_prev), W * sp.exp(-m_prev)
    P = [sp.exp(x - m_j) for x in s]
    l_j = sp.exp(m_prev - m_j) * l_prev + sum(P)
    O_j = sp.exp(m_prev - m_j) * O_prev + sum(p * y for p, y in zip(P, v))
    L_j = L + sum(sp.exp(x) for x in s)
    W_j = W + sum(sp.exp(x) * y for x, y in zip(s, v))
    assert_symbolic_zero(sp.simplify(l_j - L_j * sp.exp(-m_j)), "l invariant (inductive step)")
    assert_symbolic_zero(sp.simplify(O_j - W_j * sp.exp(-m_j)), "O~ invariant (inductive step)")
    # base case: L = W = 0 is the first block's own sums: l^(1) = rowsum P_1, O~^(1) = P_1 V_1
    assert_symbolic_zero(sp.simplify(l_j.subs(L, 0) - sum(P)), "base case")
    # deferred normalization and the LSE
    assert_symbolic_zero(sp.simplify(O_j / l_j - W_j / L_j), "O = O~ / l = softmax(S) V")
    lse = m_j + sp.log(L_j * sp.exp(-m_j))
    assert_symbolic_zero(sp.simplify(sp.expand_log(lse, force=True) - sp.log(L_j)), "LSE = m + log l")


def check_numeric() -> None:
    import numpy as np

    from flashcheck.proofs.bounds import reference_bound
    from flashcheck.reference import flash_attention_2_forward
    from flashcheck.reference.exact import exact_attention

    rng = np.random.default_rng(5)
    with mp.workdps(DPS):
        for scale in (1.0, 50.0):
            srow = [mp.mpf(float(x)) for x in rng.standard_normal(11) * scale]
            V = [mp.mpf(float(x)) for x in rng.standard_normal(11)]
            for b in (1, 4, 11):
                m, l, O = mp.ninf, mp.mpf(0), mp.mpf(0)
                for j0 in range(0, 11, b):
                    S = srow[j0:j0 + b]
                    m_new = max(m, max(S))
                    a = mp.exp(m - m_new) if l != 0 else mp.mpf(0)
                    P = [mp.exp(x - m_new) for x in S]
                    l = a * l + mp.fsum(P)
                    O = a * O + mp.fsum(p * y for p, y in zip(P, V[j0:j0 + b]))
                    m = m_new
                e = [mp.exp(x) for x in srow]
                assert_close(O / l, mp.fsum(x * y for x, y in zip(e, V)) / mp.fsum(e), "O", scale=10)
                assert_close(m + mp.log(l), mp.log(mp.fsum(e)), "LSE", scale=50)
    for seed, causal, bq, bk in ((0, False, 2, 4), (1, True, 3, 2), (2, "bottom_right", 64, 64)):
        q, k, v, _ = attention_inputs(seed, logit_scale=3.0)
        o, lse = flash_attention_2_forward(q, k, v, block_q=bq, block_k=bk, causal=causal)
        o_x, lse_x = exact_attention(q, k, v, causal=causal)
        b = reference_bound(q, k, v, causal=causal)
        within("flash_attention_2_forward O", o, o_x, b.o)
        within("flash_attention_2_forward LSE", lse, lse_x, b.lse)

"""Lemma 12 (proofs/merge_states.md): merging (O, LSE) states over disjoint key sets is exact and
associative. Justifies flashcheck.reference.merge_states; relied on by tests/test_merge_states.py."""
from __future__ import annotations

import mpmath as mp
import sympy as sp

from flashcheck.proofs.instances import DPS, assert_close, assert_symbolic_zero, attention_inputs, within

STATEMENT = (
    "For disjoint key sets K1, K2 with states (O_k, LSE_k) = (softmax over K_k of s) V, log sum_{K_k} e^s): "
    "LSE = log(e^{LSE_1} + e^{LSE_2}), O = e^{LSE_1 - LSE} O_1 + e^{LSE_2 - LSE} O_2 is the state of K1 u K2; "
    "the merge is commutative and associative, and (any O, -inf) is its neutral element."
)


def _merge(a, b):
    (o1, l1), (o2, l2) = a, b
    lse = sp.log(sp.exp(l1) + sp.exp(l2))
    return sp.exp(l1 - lse) * o1 + sp.exp(l2 - lse) * o2, lse


def check_symbolic() -> None:
    S = sp.symbols("S_1:4", positive=True)  # sum_{K_k} e^{s}
    W = sp.symbols("W_1:4", real=True)  # sum_{K_k} e^{s} V
    states = [(W[k] / S[k], sp.log(S[k])) for k in range(3)]
    o, lse = _merge(states[0], states[1])
    assert_symbolic_zero(sp.simplify(o - (W[0] + W[1]) / (S[0] + S[1])), "merged O = state of K1 u K2")
    assert_symbolic_zero(sp.simplify(sp.exp(lse) - (S[0] + S[1])), "merged LSE = log(S1 + S2)")
    left = _merge(_merge(states[0], states[1]), states[2])
    right = _merge(states[0], _merge(states[1], states[2]))
    for x, y, what in ((left[0], right[0], "O"), (sp.exp(left[1]), sp.exp(right[1]), "LSE")):
        assert_symbolic_zero(sp.simplify(x - y), f"associativity ({what})")
    # neutral element: LSE_2 -> -oo
    L2 = sp.Symbol("L_2", real=True)
    o2 = sp.Symbol("O_2", real=True)
    o, lse = _merge(states[0], (o2, L2))
    assert sp.simplify(sp.limit(sp.exp(lse), L2, -sp.oo) - S[0]) == 0
    assert sp.simplify(sp.limit(o, L2, -sp.oo) - states[0][0]) == 0


def check_numeric() -> None:
    import numpy as np

    from flashcheck.proofs.bounds import reference_bound
    from flashcheck.reference import attention, merge_states
    from flashcheck.reference.exact import exact_attention

    with mp.workdps(DPS):
        rng = np.random.default_rng(12)
        s = [mp.mpf(float(x)) for x in rng.standard_normal(9) * 10]
        v = [mp.mpf(float(x)) for x in rng.standard_normal(9)]

        def state(idx):
            lse = mp.log(mp.fsum(mp.exp(s[j]) for j in idx))
            return mp.fsum(mp.exp(s[j] - lse) * v[j] for j in idx), lse

        def merge(a, b):
            lse = mp.log(mp.exp(a[1]) + mp.exp(b[1]))
            return mp.exp(a[1] - lse) * a[0] + mp.exp(b[1] - lse) * b[0], lse

        parts = [state(range(0, 3)), state(range(3, 5)), state(range(5, 9))]
        whole = state(range(9))
        for got in (merge(merge(parts[0], parts[1]), parts[2]), merge(parts[0], merge(parts[1], parts[2])),
                    merge(parts[2], merge(parts[0], parts[1]))):
            assert_close(list(got), list(whole), "merge = attention over the union", scale=10)
    # float64: merge the references over a key split; bound = the halves' bounds carried through the
    # convex combination + the weights' error (from the LSE bounds) + the merge's own roundings
    q, k, v, _ = attention_inputs(3, Nq=5, Nk=8, Hq=1, Hkv=1, logit_scale=2.0)
    o1, l1 = attention(q, k[:, :, :3], v[:, :, :3])
    o2, l2 = attention(q, k[:, :, 3:], v[:, :, 3:])
    o, lse = merge_states(o1, l1, o2, l2)
    o_x, lse_x = exact_attention(q, k, v)
    b1 = reference_bound(q, k[:, :, :3], v[:, :, :3])
    b2 = reference_bound(q, k[:, :, 3:], v[:, :, 3:])
    u = 2.0**-53
    w1 = np.exp(l1 - lse_x)[..., None]
    w2 = np.exp(l2 - lse_x)[..., None]
    # |w_hat_k / w_k - 1| <= exp(|dLSE_1| + |dLSE_2| + 8u(1 + |LSE|)) - 1 (two exps, the shift, log, adds)
    rel = np.expm1(b1.lse + b2.lse + 8 * u * (1 + np.abs(lse_x)))[..., None]
    o_bound = (w1 * b1.o + w2 * b2.o + rel * (w1 * (np.abs(o1 - o_x) + b1.o) + w2 * (np.abs(o2 - o_x) + b2.o))
               + 6 * u * (w1 * np.abs(o1) + w2 * np.abs(o2)) * (1 + rel))
    within("merge_states O", o, o_x, o_bound)
    within("merge_states LSE", lse, lse_x, np.maximum(b1.lse, b2.lse) + 6 * u * (1 + np.abs(lse_x)))

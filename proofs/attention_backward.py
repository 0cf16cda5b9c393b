"""Lemma 10 (proofs/attention_backward.md): the FA2 backward double loop (recomputation from LSE,
dQ accumulated across K/V blocks) equals the standard backward. Justifies reference.attention_backward;
relied on by tests/test_attention_backward.py."""
from __future__ import annotations

import mpmath as mp
import sympy as sp

from proofs.instances import DPS, assert_close, assert_symbolic_zero, attention_inputs, within

STATEMENT = (
    "For L = sum(dO o O), O = softmax(S) V, S = scale Q K^T: the FA2 backward -- outer loop over K/V blocks j, "
    "inner loop over Q blocks i, P_ij = exp(S_ij - LSE_i), dV_j += P_ij^T dO_i, dP_ij = dO_i V_j^T, "
    "dS_ij = P_ij o (dP_ij - Delta_i), dQ_i += scale dS_ij K_j, dK_j += scale dS_ij^T Q_i -- returns exactly "
    "dQ = dL/dQ, dK = dL/dK, dV = dL/dV of the standard backward through J_softmax."
)

NQ, NK = 2, 3


def check_symbolic() -> None:
    """Nq = 2, Nk = 3, d = dv = 1, blocks of 1 query x {2, 1} keys, all symbolic."""
    sc = sp.Symbol("scale", positive=True)
    q = sp.symbols(f"q_1:{NQ + 1}", real=True)
    k = sp.symbols(f"k_1:{NK + 1}", real=True)
    v = sp.symbols(f"v_1:{NK + 1}", real=True)
    dO = sp.symbols(f"dO_1:{NQ + 1}", real=True)
    S = [[sc * q[i] * k[j] for j in range(NK)] for i in range(NQ)]
    Z = [sum(sp.exp(S[i][j]) for j in range(NK)) for i in range(NQ)]
    O = [sum(sp.exp(S[i][j]) / Z[i] * v[j] for j in range(NK)) for i in range(NQ)]
    L = sum(dO[i] * O[i] for i in range(NQ))
    # standard backward = autodiff of L
    dq_std = [sp.diff(L, x) for x in q]
    dk_std = [sp.diff(L, x) for x in k]
    dv_std = [sp.diff(L, x) for x in v]
    # FA2 double loop
    lse = [sp.log(Z[i]) for i in range(NQ)]
    delta = [dO[i] * O[i] for i in range(NQ)]
    dq, dk, dv = [0] * NQ, [0] * NK, [0] * NK
    for block in ([0, 1], [2]):  # outer: K/V blocks
        for i in range(NQ):  # inner: Q blocks of 1
            for j in block:
                P = sp.exp(S[i][j] - lse[i])  # Lemma 8
                dv[j] += P * dO[i]
                dP = dO[i] * v[j]
                dS = P * (dP - delta[i])  # Lemma 9
                dq[i] += sc * dS * k[j]  # accumulated across K/V blocks
                dk[j] += sc * dS * q[i]
    for name, a, b in (("dQ", dq, dq_std), ("dK", dk, dk_std), ("dV", dv, dv_std)):
        for x, y in zip(a, b):
            assert_symbolic_zero(sp.simplify(x - y), f"{name}: double loop = standard backward")


def check_numeric() -> None:
    import numpy as np

    from proofs.bounds import reference_bound
    from reference import attention, attention_backward, standard_attention_backward
    from reference.exact import exact_attention_backward

    with mp.workdps(DPS):  # the symbolic case evaluated at 60 digits on a random instance
        rng = np.random.default_rng(4)
        q, k, v, dO = ([mp.mpf(float(x)) for x in rng.standard_normal(n) * 3] for n in (NQ, NK, NK, NQ))
        S = [[q[i] * k[j] for j in range(NK)] for i in range(NQ)]
        lse = [mp.log(mp.fsum(mp.exp(x) for x in row)) for row in S]
        P = [[mp.exp(S[i][j] - lse[i]) for j in range(NK)] for i in range(NQ)]
        O = [mp.fsum(P[i][j] * v[j] for j in range(NK)) for i in range(NQ)]
        dS = [[P[i][j] * (dO[i] * v[j] - dO[i] * O[i]) for j in range(NK)] for i in range(NQ)]
        dq = [mp.fsum(dS[i][j] * k[j] for j in range(NK)) for i in range(NQ)]

        def loss(*qq):
            tot = 0
            for i in range(NQ):
                e = [mp.exp(qq[i] * k[j]) for j in range(NK)]
                tot += dO[i] * mp.fsum(x * y for x, y in zip(e, v)) / mp.fsum(e)
            return tot
        grad = [mp.diff(loss, tuple(q), tuple(1 if t == i else 0 for t in range(NQ))) for i in range(NQ)]
        assert_close(dq, grad, "dQ = dL/dQ", scale=10)
    for seed, causal, bq, bk in ((0, False, 2, 4), (1, True, 3, 2), (2, "bottom_right", 64, 64)):
        q, k, v, do = attention_inputs(seed, logit_scale=2.0)
        o, lse = attention(q, k, v, causal=causal)
        got = attention_backward(q, k, v, o, lse, do, causal=causal, block_q=bq, block_k=bk)
        std = standard_attention_backward(q, k, v, do, causal=causal)
        exact = exact_attention_backward(q, k, v, do, causal=causal)
        b = reference_bound(q, k, v, do, causal=causal)
        for name, g, s, x, bb in zip(("dQ", "dK", "dV"), got, std, exact, (b.dq, b.dk, b.dv)):
            within(f"attention_backward {name}", g, x, bb)
            within(f"standard_attention_backward {name}", s, x, bb)

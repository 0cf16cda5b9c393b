"""Lemma 10 (proofs/attention_backward.md): the FA2 backward double loop (recomputation from LSE,
dQ accumulated across K/V blocks) equals the standard backward. Justifies flashcheck.reference.attention_backward;
relied on by tests/test_attention_backward.py."""
from __future__ import annotations

import mpmath as mp
import sympy as sp

from flashcheck.proofs.instances import DPS, assert_close, assert_symbolic_zero, attention_inputs, within

STATEMENT = (
    "For L = sum(dO o O), O = softmax(S) V, S = scale Q K^T: the FA2 backward -- outer loop over K/V blocks j, "
    "inner loop over Q blocks i, P_ij = exp(S_ij - LSE_i), dV_j += P_ij^T dO_i, dP_ij = dO_i V_j^T, "
    "dS_ij = P_ij o (dP_ij - Delta_i), dQ_i += scale dS_ij K_j, dK_j += scale dS_ij^T Q_i -- returns exactly "
    "dQ = dL/dQ, dK = dL/dK, dV = dL/dV of the standard backward through J_softmax."
)

NQ, NK, D, DV = 2, 3, 3, 2  # d > 1 and dv != d: a transposed or shifted index changes the result


def fa2_double_loop(S, lse, delta, q, k, v, dO, sc, blocks):
    """The FA2 backward double loop on lists of symbols (outer: K/V blocks, inner: query rows)."""
    nq, nk, d, dv = len(q), len(k), len(q[0]), len(v[0])
    dq = [[0] * d for _ in range(nq)]
    dk = [[0] * d for _ in range(nk)]
    dvv = [[0] * dv for _ in range(nk)]
    for block in blocks:  # outer: K/V blocks
        for i in range(nq):  # inner: Q blocks of 1
            for j in block:
                P = sp.exp(S[i][j] - lse[i])  # Lemma 8
                dP = sum(dO[i][c] * v[j][c] for c in range(dv))
                dS = P * (dP - delta[i])  # Lemma 9
                for c in range(dv):
                    dvv[j][c] += P * dO[i][c]
                for c in range(d):
                    dq[i][c] += sc * dS * k[j][c]  # accumulated across K/V blocks
                    dk[j][c] += sc * dS * q[i][c]
    return dq, dk, dvv


def check_symbolic(double_loop=fa2_double_loop) -> None:
    """Nq = 2, Nk = 3, d = 3, dv = 2, every entry its own symbol, blocks of 1 query x {2, 1} keys: the
    double loop against autodiff of L = sum dO o O. Expanded (exp(S - log Z) = exp(S) / Z, exp of a
    sum = product of exps), both sides are rational in the exps of the products q_ic k_jc, so the
    comparison is an exact identity of rational functions."""
    sc = sp.Symbol("scale", positive=True)
    q = [[sp.Symbol(f"q_{i}{c}", real=True) for c in range(D)] for i in range(NQ)]
    k = [[sp.Symbol(f"k_{j}{c}", real=True) for c in range(D)] for j in range(NK)]
    v = [[sp.Symbol(f"v_{j}{c}", real=True) for c in range(DV)] for j in range(NK)]
    dO = [[sp.Symbol(f"dO_{i}{c}", real=True) for c in range(DV)] for i in range(NQ)]
    S = [[sc * sum(q[i][c] * k[j][c] for c in range(D)) for j in range(NK)] for i in range(NQ)]
    Z = [sum(sp.exp(S[i][j]) for j in range(NK)) for i in range(NQ)]
    O = [[sum(sp.exp(S[i][j]) / Z[i] * v[j][c] for j in range(NK)) for c in range(DV)] for i in range(NQ)]
    L = sum(dO[i][c] * O[i][c] for i in range(NQ) for c in range(DV))
    std = ([[sp.diff(L, x) for x in row] for row in q], [[sp.diff(L, x) for x in row] for row in k],
           [[sp.diff(L, x) for x in row] for row in v])
    lse = [sp.log(Z[i]) for i in range(NQ)]
    delta = [sum(dO[i][c] * O[i][c] for c in range(DV)) for i in range(NQ)]
    fa2 = double_loop(S, lse, delta, q, k, v, dO, sc, ([0, 1], [2]))
    # a point where any error shows at once (50 digits), before the exact check (slow on a non-identity)
    point = {x: sp.Rational(3 + 2 * n, 7 + n) for n, x in enumerate(sorted(L.free_symbols, key=sp.default_sort_key))}
    for name, a, b in zip(("dQ", "dK", "dV"), fa2, std):
        for r, (row_a, row_b) in enumerate(zip(a, b)):
            for c, (x, y) in enumerate(zip(row_a, row_b)):
                at = sp.N(sp.sympify(x - y).xreplace(point), 50)
                if abs(at) > sp.Float(10) ** -40:
                    raise AssertionError(f"{name}[{r}][{c}]: double loop != standard backward, differ by {at:.3e} "
                                         f"at a rational point")
                diff = sp.cancel(sp.together(sp.expand(sp.sympify(x - y))))
                if diff != 0:
                    raise AssertionError(f"{name}[{r}][{c}]: double loop != standard backward, residual {diff}")


def check_numeric() -> None:
    import numpy as np

    from flashcheck.proofs.bounds import reference_bound
    from flashcheck.reference import attention, attention_backward, standard_attention_backward
    from flashcheck.reference.exact import exact_attention_backward

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

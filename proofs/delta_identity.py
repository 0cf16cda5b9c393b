"""Lemma 9 (proofs/delta_identity.md): Delta_i = rowsum(dO o O)_i = rowsum(A o dA)_i, and
dP = A o (dA - Delta) = J_softmax dA. Relied on by flashcheck.reference.attention_backward; tests/test_attention_backward.py."""
from __future__ import annotations

import mpmath as mp
import sympy as sp

from flashcheck.proofs.instances import DPS, assert_close, assert_symbolic_zero, softmax

STATEMENT = (
    "For one row with A = softmax(p), O = A V, dA = dO V^T: Delta = sum_c dO_c O_c = sum_j A_j dA_j, and "
    "J_softmax = diag(A) - A A^T (the Jacobian dA_i/dp_j) gives J dA = A o (dA - Delta)."
)

N, DV = 3, 2


def check_symbolic() -> None:
    A = sp.symbols(f"A_1:{N + 1}", real=True)
    V = sp.Matrix(N, DV, lambda j, c: sp.Symbol(f"V_{j}{c}", real=True))
    dO = sp.symbols(f"dO_1:{DV + 1}", real=True)
    O = [sum(A[j] * V[j, c] for j in range(N)) for c in range(DV)]
    dA = [sum(dO[c] * V[j, c] for c in range(DV)) for j in range(N)]
    delta = sum(dO[c] * O[c] for c in range(DV))
    assert_symbolic_zero(delta - sum(A[j] * dA[j] for j in range(N)), "rowsum(dO o O) = rowsum(A o dA)")
    # the Jacobian of softmax is diag(A) - A A^T (computed by sympy from the definition)
    p = sp.symbols(f"p_1:{N + 1}", real=True)
    Z = sum(sp.exp(x) for x in p)
    a = [sp.exp(x) / Z for x in p]
    for i in range(N):
        for j in range(N):
            J_ij = (a[i] if i == j else 0) - a[i] * a[j]
            assert_symbolic_zero(sp.simplify(sp.diff(a[i], p[j]) - J_ij), f"J_softmax[{i},{j}]")
    # J dA = A o (dA - Delta), as a polynomial identity in A and dA (J symmetric)
    g = sp.symbols(f"g_1:{N + 1}", real=True)  # g = dA
    D = sum(A[j] * g[j] for j in range(N))
    for i in range(N):
        J_row = sum(((A[i] if i == j else 0) - A[i] * A[j]) * g[j] for j in range(N))
        assert_symbolic_zero(J_row - A[i] * (g[i] - D), f"(J dA)_{i}")


def check_numeric() -> None:
    import numpy as np

    rng = np.random.default_rng(9)
    with mp.workdps(DPS):
        for scale in (1.0, 20.0):
            p = [mp.mpf(float(x)) for x in rng.standard_normal(5) * scale]
            V = [[mp.mpf(float(x)) for x in row] for row in rng.standard_normal((5, 3))]
            dO = [mp.mpf(float(x)) for x in rng.standard_normal(3)]
            A = softmax(p)
            O = [mp.fsum(A[j] * V[j][c] for j in range(5)) for c in range(3)]
            dA = [mp.fsum(dO[c] * V[j][c] for c in range(3)) for j in range(5)]
            delta = mp.fsum(dO[c] * O[c] for c in range(3))
            assert_close(delta, mp.fsum(A[j] * dA[j] for j in range(5)), "Delta")
            dP = [A[i] * (dA[i] - delta) for i in range(5)]
            # J dA by numerical differentiation of L(p) = dO . (softmax(p) V) at 60 digits
            def loss(*pp):
                a = softmax(list(pp))
                return mp.fsum(dO[c] * mp.fsum(a[j] * V[j][c] for j in range(5)) for c in range(3))
            grad = [mp.diff(loss, tuple(p), tuple(1 if k == i else 0 for k in range(5))) for i in range(5)]
            assert_close(grad, dP, "dP = A o (dA - Delta) = J_softmax dA", scale=10)

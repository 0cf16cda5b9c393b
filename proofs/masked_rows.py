"""Lemma 13 (proofs/masked_rows.md): fully masked rows -- O = 0, LSE = -inf, zero gradients -- and how
the recurrences avoid (-inf) - (-inf). Relied on by every reference function; flashcheck/properties/test_masked_rows.py."""
from __future__ import annotations

import mpmath as mp
import sympy as sp

from flashcheck.proofs.instances import DPS, assert_close, assert_symbolic_zero

STATEMENT = (
    "For a row with no visible key: LSE = log(empty sum) = -inf is the limit of LSE when every logit -> -inf; "
    "O = 0 is the empty sum O~ = 0 and makes (0, -inf) the neutral element of merge_states (its O gets weight "
    "e^{-inf - LSE} = 0), and O does not depend on Q, K, V, so dQ_i = 0 and the row contributes 0 to dK, dV. "
    "With the safe shift (m = -inf => shift 0) every exponent is -inf - 0 = -inf, so exp gives 0 and "
    "(-inf) - (-inf) never reaches exp."
)


def check_symbolic() -> None:
    t = sp.Symbol("t", positive=True)
    xs = sp.symbols("x_1:4", real=True)
    # LSE of the row x - t: log sum e^{x_j - t} = LSE(x) - t -> -oo as t -> oo
    lse = sp.log(sum(sp.exp(x - t) for x in xs))
    assert_symbolic_zero(sp.exp(lse) - sp.exp(-t) * sum(sp.exp(x) for x in xs), "e^{LSE(x - t)} = e^{-t} e^{LSE(x)}")
    c = sp.Symbol("C", positive=True)  # C = e^{LSE(x)}
    assert sp.limit(sp.log(c * sp.exp(-t)), t, sp.oo) == -sp.oo
    # but softmax(x - t) = softmax(x) for every t (Lemma 1): O has no limit "to 0" -- O = 0 is a convention,
    # the empty sum of the unnormalized O~, justified by the merge identity below
    a = sp.exp(xs[0] - t) / sum(sp.exp(x - t) for x in xs)
    assert_symbolic_zero(sp.simplify(a - sp.exp(xs[0]) / sum(sp.exp(x) for x in xs)), "shift invariance")
    # (0, -inf) is neutral for the merge: weight of the empty state -> 0, merged LSE -> LSE_1
    L1, L2, O1 = sp.symbols("L_1 L_2 O_1", real=True)
    lse_m = sp.log(sp.exp(L1) + sp.exp(L2))
    assert sp.limit(sp.exp(L2 - lse_m), L2, -sp.oo) == 0
    assert sp.simplify(sp.limit(sp.exp(L1 - lse_m) * O1, L2, -sp.oo) - O1) == 0
    # the safe shift: m = -inf -> shift 0; the exponent x - shift with x = -inf is -inf and exp(-inf) = 0
    assert sp.exp(-sp.oo - 0) == 0
    # without it, (-inf) - (-inf) is undefined (sympy: nan)
    assert (-sp.oo) - (-sp.oo) is sp.nan


def check_numeric() -> None:
    import numpy as np

    from flashcheck.reference import (attention, attention_backward, block_sparse_attention, flash_attention_1,
                                      flash_attention_2_forward, merge_states, online_softmax, standard_attention_backward,
                                      tiled_online_softmax)

    with mp.workdps(DPS):
        # LSE(x - t) = LSE(x) - t at 60 digits: tends to -inf linearly
        x = [mp.mpf(v) for v in (0.3, -1.2, 2.0)]
        base = mp.log(mp.fsum(mp.exp(v) for v in x))
        for t in (10, 1000, 10**6):
            assert_close(mp.log(mp.fsum(mp.exp(v - t) for v in x)), base - t, "LSE(x - t)", scale=t)
    rng = np.random.default_rng(13)
    B, H, N, d = 1, 2, 6, 4
    q, k, v, do = (rng.standard_normal((B, H, N, d)) for _ in range(4))
    mask = np.ones((N, N), dtype=bool)
    mask[2] = False  # row 2 sees nothing
    with np.errstate(all="raise"):  # an invalid operation ((-inf) - (-inf), 0 * inf) would raise
        results = {
            "attention": attention(q, k, v, mask=mask),
            "flash_attention_2_forward": flash_attention_2_forward(q, k, v, mask=mask, block_q=2, block_k=2),
            "block_sparse_attention": block_sparse_attention(q, k, v, np.ones((3, 3), dtype=bool), block_size=2,
                                                             mask=mask),
        }
        o1, _ = flash_attention_1(q, k, v, sram_size=32, mask=mask)
        o, lse = results["attention"]
        grads = [standard_attention_backward(q, k, v, do, mask=mask),
                 attention_backward(q, k, v, o, lse, do, mask=mask, block_q=2, block_k=2)]
        for row in (np.full(5, -np.inf),):
            assert np.all(online_softmax(row) == 0) and np.all(tiled_online_softmax(row, 2) == 0)
        mo, ml = merge_states(o, lse, np.zeros_like(o), np.full_like(lse, -np.inf))
    for name, (oo, ll) in results.items():
        assert np.all(oo[:, :, 2] == 0) and np.all(ll[:, :, 2] == -np.inf), name
        assert not np.isnan(oo).any() and not np.isnan(ll).any(), name
    assert np.all(o1[:, :, 2] == 0) and not np.isnan(o1).any()
    for dq, dk, dv in grads:
        assert np.all(dq[:, :, 2] == 0) and not any(np.isnan(g).any() for g in (dq, dk, dv))
        # row 2 contributes nothing to dK, dV: same as zeroing dO on that row
    do0 = do.copy()
    do0[:, :, 2] = 0
    for g, g0 in zip(grads[0], standard_attention_backward(q, k, v, do0, mask=mask)):
        assert np.array_equal(g, g0)
    assert np.array_equal(mo, o) and np.array_equal(ml, lse), "(0, -inf) is neutral for merge_states"

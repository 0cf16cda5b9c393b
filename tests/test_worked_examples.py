"""The seeds' worked examples, reproduced with their intermediate states.

Seed 003 ("FlashAttention by hand"): one query with logits x = [1, 2, 3, 6, 2, 1], V rows v_i = (i, i),
tiles of 3. Its numbers are printed to 4 decimals, so they are compared to within half a unit of the
last printed digit.
Seed 001 (book-club notes, "Simple example"): scores [1, 2, 3, 4] in two blocks of 2.
"""
import math

import mpmath
import numpy as np

from flashcheck.reference import (
    attention,
    flash_attention_1,
    flash_attention_2_forward,
    safe_softmax,
    tiled_online_softmax,
    tiled_row_recurrence,
)

X = np.array([1.0, 2.0, 3.0, 6.0, 2.0, 1.0])
V = np.repeat(np.arange(1.0, 7.0)[:, None], 2, axis=1)


def _printed(value, printed: float, decimals: int):
    """`value` rounds to `printed` at `decimals` places: |value - printed| <= half a unit in the last place."""
    assert abs(np.asarray(value) - printed).max() <= 0.5 * 10.0**-decimals, (value, printed)


def _as_attention():
    """The example as an attention problem: q = 1, k_j = x_j, scale 1, so the logits are x."""
    q = np.ones((1, 1, 1, 1))
    k = X.reshape(1, 1, 6, 1)
    return q, k, V.reshape(1, 1, 6, 2)


def test_seed003_vanilla_softmax_step():
    """Step 1 (vanilla): m = 6 and A ~ [0.0061, 0.0167, 0.0453, 0.9092, 0.0167, 0.0061]."""
    a = safe_softmax(X)
    for got, printed in zip(a, [0.0061, 0.0167, 0.0453, 0.9092, 0.0167, 0.0061]):
        _printed(got, printed, 4)


def test_seed003_after_tile_1():
    """After tile 1 ([1, 2, 3]): m = 3, d ~ 1.5032, o_running ~ [3.8711, 3.8711] (un-normalized)."""
    _, states = tiled_row_recurrence(X, V, 3, return_states=True)
    t1 = states[0]
    assert t1.m == 3.0
    _printed(t1.d, 1.5032, 4)
    _printed(t1.acc, 3.8711, 4)
    np.testing.assert_allclose(t1.o, t1.acc / t1.d, rtol=4 * 2.0**-53)  # o' is the normalized o_running


def test_seed003_after_tile_2_and_final_output():
    """After tile 2: m = 6 and final O ~ [3.932, 3.932].

    The seed prints d ~ 1.0998 and o_running ~ [4.3244, 4.3244] after tile 2, computed by hand from
    4-digit-rounded intermediates (1.5032 * 0.04979 + 1.025); the exact values are
    d = e^{-3} (e^{-2} + e^{-1} + 1) + (1 + 2 e^{-4} + e^{-5}) = 1.09989... and o = 4.32474..., so those two
    are checked against the exact closed forms instead (and against the seed within its own rounding, 1e-3).
    """
    o, states = tiled_row_recurrence(X, V, 3, return_states=True)
    t2 = states[1]
    assert t2.m == 6.0
    with mpmath.workdps(30):
        e = [mpmath.exp(mpmath.mpf(x) - 6) for x in X]
        d_exact = mpmath.fsum(e)
        acc_exact = mpmath.fsum(w * (i + 1) for i, w in enumerate(e))
    np.testing.assert_allclose(t2.d, float(d_exact), rtol=32 * 2.0**-53)
    np.testing.assert_allclose(t2.acc, float(acc_exact), rtol=32 * 2.0**-53)
    assert abs(t2.d - 1.0998) < 1e-3 and abs(t2.acc[0] - 4.3244) < 1e-3
    _printed(o, 3.932, 3)
    _printed(o, 3.9320, 4)  # the seed's "3.9323" (its eq. before step 1c) carries its hand rounding


def test_seed003_every_algorithm_gives_the_same_output():
    q, k, v = _as_attention()
    o_std, _ = attention(q, k, v, scale=1.0)
    o_fa2, _ = flash_attention_2_forward(q, k, v, scale=1.0, block_q=1, block_k=3)
    o_fa1, stats = flash_attention_1(q, k, v, scale=1.0, sram_size=12)  # B_c = ceil(12 / 4) = 3
    assert stats.block_c == 3 and stats.block_r == 1
    for o in (o_std, o_fa2, o_fa1):
        _printed(o[0, 0, 0], 3.932, 3)


def test_seed001_second_denominator_is_the_stable_denominator():
    """Scores [1, 2, 3, 4] in blocks of 2: m_1 = 2, l_1 = e^{-1} + e^0; m_2 = 4,
    l_2 = e^{2-4} l_1 + e^{3-4} + e^{4-4} = e^{-3} + e^{-2} + e^{-1} + e^0."""
    x = np.array([1.0, 2.0, 3.0, 4.0])
    _, ((m1, l1), (m2, l2)) = tiled_online_softmax(x, 2, return_states=True)
    assert (m1, m2) == (2.0, 4.0)
    np.testing.assert_allclose(l1, math.exp(-1) + 1.0, rtol=4 * 2.0**-53)
    np.testing.assert_allclose(l2, math.exp(-3) + math.exp(-2) + math.exp(-1) + 1.0, rtol=8 * 2.0**-53)

"""flashcheck.reference.tiled_online_softmax: the online softmax over tiles of b entries (seed 001 example)."""
import math

import numpy as np
from hypothesis import given, note, strategies as st

from flashcheck.reference import safe_softmax, tiled_online_softmax
from flashcheck.reference.exact import exact_softmax
from tests.reference_strategies import assert_within, logit_rows, strict_fp
from flashcheck.proofs.reference_bounds import softmax_bound


@given(logit_rows(), st.sampled_from((1, 2, 3, 5, 16, 64)))
def test_tiled_online_softmax_is_within_bound_of_exact(x, block):
    with strict_fp():
        a = tiled_online_softmax(x, block)
    worst = assert_within("tiled_online_softmax", a, exact_softmax(x), softmax_bound(x).a)
    note(f"x={x!r} block={block} worst |err|/bound={worst:.3g}")


def test_seed_example_second_denominator_is_the_stable_denominator_of_all_four():
    """Seed 001: scores [1, 2, 3, 4] in two blocks of 2: l_1 = e^{-1} + 1 with m_1 = 2, then m_2 = 4 and
    l_2 = e^{2-4} l_1 + e^{-1} + 1 = e^{-3} + e^{-2} + e^{-1} + e^0."""
    x = np.array([1.0, 2.0, 3.0, 4.0])
    a, states = tiled_online_softmax(x, 2, return_states=True)
    (m1, l1), (m2, l2) = states
    assert m1 == 2.0 and m2 == 4.0
    np.testing.assert_allclose(l1, math.exp(-1) + 1, rtol=4 * 2.0**-53)
    stable = math.fsum(math.exp(t - 4) for t in x)
    np.testing.assert_allclose(l2, stable, rtol=8 * 2.0**-53)
    assert_within("a", a, safe_softmax(x), 2 * softmax_bound(x).a)


def test_block_must_be_positive():
    import pytest

    with pytest.raises(ValueError, match="block must be a positive int"):
        tiled_online_softmax(np.zeros(3), 0)

"""flashcheck.reference.online_softmax: the two-pass d' recurrence (seed 000, "online softmax")."""
import math

import numpy as np
from hypothesis import example, given, note

from flashcheck.reference import online_softmax, safe_softmax
from flashcheck.reference.exact import exact_softmax
from tests.reference_strategies import assert_within, logit_rows, strict_fp
from flashcheck.proofs.reference_bounds import softmax_bound


@given(logit_rows())
@example(np.array([[0.0, -725.0, 3.0], [-np.inf] * 3, [-740.0, 0.0, -np.inf]]))  # subnormal weights (found by hypothesis)
def test_online_softmax_is_within_bound_of_exact(x):
    with strict_fp():  # (-inf) - (-inf) reaching exp would raise here
        a = online_softmax(x)
    worst = assert_within("online_softmax", a, exact_softmax(x), softmax_bound(x).a)
    note(f"x={x!r} worst |err|/bound={worst:.3g}")


@given(logit_rows())
def test_online_softmax_agrees_with_safe_softmax(x):
    with strict_fp():
        assert_within("online vs safe", online_softmax(x), safe_softmax(x), 2 * softmax_bound(x).a)


def test_d_prime_is_the_denominator_of_the_prefix_at_every_step():
    x = np.array([1.0, 2.0, 3.0, 6.0, 2.0, 1.0])
    _, states = online_softmax(x, return_states=True)
    for i, (m_i, d_i) in enumerate(states, start=1):
        assert m_i == max(x[:i])
        expect = math.fsum(math.exp(t - m_i) for t in x[:i])
        np.testing.assert_allclose(d_i, expect, rtol=8 * i * 2.0**-53)


def test_leading_minus_inf_entries_keep_the_state_empty():
    x = np.array([[-np.inf, -np.inf, 0.5, -np.inf]])
    with strict_fp():
        a, states = online_softmax(x, return_states=True)
    assert states[1][0][0] == -np.inf and states[1][1][0] == 0.0
    np.testing.assert_array_equal(a, [[0.0, 0.0, 1.0, 0.0]])

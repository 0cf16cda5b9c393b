"""flashcheck.reference.safe_softmax: the three-pass safe softmax (seed 000)."""
import numpy as np
from hypothesis import given, note

from flashcheck.reference import safe_softmax
from flashcheck.reference.exact import exact_softmax
from tests.reference_strategies import assert_within, logit_rows, strict_fp
from flashcheck.proofs.reference_bounds import softmax_bound


@given(logit_rows())
def test_safe_softmax_is_within_bound_of_exact(x):
    with strict_fp():
        a = safe_softmax(x)
    worst = assert_within("safe_softmax", a, exact_softmax(x), softmax_bound(x).a)
    note(f"x={x!r} worst |err|/bound={worst:.3g}")


def test_safe_softmax_does_not_overflow_at_1e4():
    with strict_fp():
        a = safe_softmax(np.array([[1e4, 1e4 - 1.0, -1e4]]))
    assert np.all(np.isfinite(a))
    np.testing.assert_allclose(a.sum(), 1.0, rtol=4 * 2.0**-53)


def test_fully_masked_row_is_zero_without_nan():
    with strict_fp():
        np.testing.assert_array_equal(safe_softmax(np.full((2, 4), -np.inf)), 0.0)


def test_single_entry_row_is_one():
    np.testing.assert_array_equal(safe_softmax(np.array([[-3.5], [7.0]])), 1.0)

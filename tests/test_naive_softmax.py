"""flashcheck.reference.naive_softmax: the unshifted definition, and why the safe variants exist (seed 000)."""
import numpy as np
import pytest

from flashcheck.reference import naive_softmax, safe_softmax
from tests.reference_strategies import assert_within
from flashcheck.proofs.reference_bounds import softmax_bound


def test_naive_agrees_with_safe_for_moderate_logits():
    x = np.random.default_rng(0).standard_normal((4, 9)) * 5
    # both are within the softmax bound of the exact value, so within twice it of each other
    assert_within("naive vs safe", naive_softmax(x), safe_softmax(x), 2 * softmax_bound(x).a)


def test_naive_overflows_beyond_log_dbl_max_and_says_so():
    x = np.array([[710.0, 0.0]])
    with pytest.raises(FloatingPointError, match="naive_softmax overflows: max\\(x\\) = 710.0"):
        naive_softmax(x)  # e^710 = inf: the reason for the max shift
    assert np.all(np.isfinite(safe_softmax(x)))
    naive_softmax(np.array([[709.0, 0.0]]))  # just below the edge it still works


def test_naive_fully_masked_row_is_zero():
    np.testing.assert_array_equal(naive_softmax(np.full((1, 3), -np.inf)), 0.0)

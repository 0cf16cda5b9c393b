"""flashcheck.reference.logsumexp: LSE(x) = max(x) + LSE(x - max(x)) (seed 002)."""
import numpy as np
from hypothesis import given, note

from flashcheck.reference import logsumexp, tiled_online_softmax
from flashcheck.reference.exact import exact_logsumexp
from tests.reference_strategies import assert_within, logit_rows, strict_fp
from flashcheck.proofs.reference_bounds import softmax_bound


@given(logit_rows())
def test_logsumexp_is_within_bound_of_exact(x):
    with strict_fp():
        lse = logsumexp(x)
    worst = assert_within("logsumexp", lse, exact_logsumexp(x), softmax_bound(x).lse)
    note(f"x={x!r} worst |err|/bound={worst:.3g}")


def test_fully_masked_row_is_minus_inf():
    with strict_fp():
        assert logsumexp(np.full((1, 5), -np.inf))[0] == -np.inf


def test_large_logits_do_not_overflow():
    with strict_fp():
        lse = logsumexp(np.array([1e4, 1e4]))
    np.testing.assert_allclose(lse, 1e4 + np.log(2.0), rtol=2.0**-52)


def test_lse_is_the_final_tile_state():
    x = np.random.default_rng(0).standard_normal((2, 7)) * 30
    _, states = tiled_online_softmax(x, 3, return_states=True)
    m, l = states[-1]
    assert_within("m + log l", m + np.log(l), logsumexp(x), 2 * softmax_bound(x).lse)

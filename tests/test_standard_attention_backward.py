"""flashcheck.reference.standard_attention_backward: through J_softmax = diag(P) - P P^T (seed 002)."""
import numpy as np
from hypothesis import given, note

from flashcheck.reference import standard_attention_backward
from flashcheck.reference.exact import exact_attention_backward
from tests.reference_strategies import assert_within, note_comparison, reference_backward_bounds, reference_cases, strict_fp

NAMES = ("dq", "dk", "dv")


@given(reference_cases(small=True, dropout=True))
def test_standard_backward_is_within_the_reference_bound_of_exact(case):
    with strict_fp():
        grads = standard_attention_backward(case.q, case.k, case.v, case.do, **case.kwargs)
    exact = exact_attention_backward(case.q, case.k, case.v, case.do, **case.kwargs)
    *bounds, source = reference_backward_bounds(case.q, case.k, case.v, case.do, **case.kwargs)
    worst = {n: assert_within(n, g, x, b) for n, g, x, b in zip(NAMES, grads, exact, bounds)}
    note_comparison(note, case.describe(), worst, source)


def test_dropout_gradient_matches_the_oracle_and_dropped_keys_get_none():
    rng = np.random.default_rng(5)
    q, k, v = rng.standard_normal((1, 1, 3, 2)), rng.standard_normal((1, 1, 4, 2)), rng.standard_normal((1, 1, 4, 2))
    do = rng.standard_normal((1, 1, 3, 2))
    keep = rng.random((1, 1, 3, 4)) < 0.6
    kw = dict(dropout_p=0.4, dropout_mask=keep)
    _, _, dv = standard_attention_backward(q, k, v, do, **kw)
    _, _, dv_x = exact_attention_backward(q, k, v, do, **kw)
    *_, b_dv, _ = reference_backward_bounds(q, k, v, do, **kw)
    assert_within("dv", dv, dv_x, b_dv)
    # dropped entries carry no gradient: a key dropped for every query gets dV = 0 exactly
    keep[..., 1] = False
    _, _, dv = standard_attention_backward(q, k, v, do, **kw)
    np.testing.assert_array_equal(dv[0, 0, 1], 0.0)


def test_jacobian_rows_sum_to_zero_so_constant_dp_gives_no_ds():
    """J_softmax 1 = P - P (P^T 1) = 0: a dO orthogonal to V's variation (V constant) gives dQ = dK = 0."""
    rng = np.random.default_rng(6)
    q, k = rng.standard_normal((1, 1, 3, 2)), rng.standard_normal((1, 1, 5, 2))
    v = np.ones((1, 1, 5, 2))
    do = rng.standard_normal((1, 1, 3, 2))
    dq, dk, _ = standard_attention_backward(q, k, v, do)
    b_dq, b_dk, _, _ = reference_backward_bounds(q, k, v, do)
    assert_within("dq", dq, np.zeros_like(dq), b_dq)  # exactly 0 up to rounding
    assert_within("dk", dk, np.zeros_like(dk), b_dk)


def test_underflowing_probabilities_are_within_the_bound():
    """Found by hypothesis (seed 0, logit scale 1e4): exact dK entries ~ 1e-322 (subnormal) come out as 0;
    the bound carries an absolute underflow floor for that."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 1, 1, 2)) * 1e4
    k, v, do = rng.standard_normal((1, 1, 8, 2)), rng.standard_normal((1, 1, 8, 2)), rng.standard_normal((1, 1, 1, 2))
    kw = dict(dropout_p=0.1, dropout_mask=rng.random((1, 1, 1, 8)) >= 0.1)
    with strict_fp():
        grads = standard_attention_backward(q, k, v, do, **kw)
    exact = exact_attention_backward(q, k, v, do, **kw)
    *bounds, _ = reference_backward_bounds(q, k, v, do, **kw)
    for n, g, x, b in zip(NAMES, grads, exact, bounds):
        assert_within(n, g, x, b)

"""The float64 references agree with the mpmath oracle (flashcheck.reference.exact) within the stated bound."""
import mpmath
import numpy as np
import pytest
from hypothesis import given, note

from flashcheck.reference import attention, logsumexp, safe_softmax, standard_attention_backward
from flashcheck.reference.exact import exact_attention, exact_attention_backward, exact_logsumexp, exact_softmax
from flashcheck.proofs.reference_bounds import softmax_bound
from tests.reference_strategies import (
    assert_within,
    logit_rows,
    note_comparison,
    reference_backward_bounds,
    reference_bounds,
    reference_cases,
    strict_fp,
)


@given(reference_cases(small=True, dropout=True))
def test_attention_is_within_the_reference_bound_of_exact(case):
    with strict_fp():
        o, lse = attention(case.q, case.k, case.v, **case.kwargs)
    o_x, lse_x = exact_attention(case.q, case.k, case.v, **case.kwargs)
    b_o, b_lse, source = reference_bounds(case.q, case.k, case.v, **case.kwargs)
    worst = {"o": assert_within("o", o, o_x, b_o), "lse": assert_within("lse", lse, lse_x, b_lse)}
    note_comparison(note, case.describe(), worst, source)


@given(reference_cases(small=True, dropout=True))
def test_standard_backward_is_within_the_reference_bound_of_exact(case):
    with strict_fp():
        grads = standard_attention_backward(case.q, case.k, case.v, case.do, **case.kwargs)
    exact = exact_attention_backward(case.q, case.k, case.v, case.do, **case.kwargs)
    *bounds, source = reference_backward_bounds(case.q, case.k, case.v, case.do, **case.kwargs)
    worst = {n: assert_within(n, g, x, b) for n, g, x, b in zip(("dq", "dk", "dv"), grads, exact, bounds)}
    note_comparison(note, case.describe(), worst, source)


@given(logit_rows(max_n=8))
def test_safe_softmax_and_logsumexp_are_within_bound_of_exact(x):
    b = softmax_bound(x)
    b_a, b_lse = b.a, b.lse
    with strict_fp():
        a, lse = safe_softmax(x), logsumexp(x)
    worst = {"a": assert_within("softmax", a, exact_softmax(x), b_a),
             "lse": assert_within("logsumexp", lse, exact_logsumexp(x), b_lse)}
    note(f"x = {x!r}; worst |err|/bound {worst}")


def test_oracle_precision_is_configurable():
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((1, 1, 3, 2)), rng.standard_normal((1, 1, 4, 2)), rng.standard_normal((1, 1, 4, 2))
    o30, _ = exact_attention(q, k, v, dps=30, as_mpf=True)
    o80, _ = exact_attention(q, k, v, dps=80, as_mpf=True)
    with mpmath.workdps(80):
        worst = max(abs(a - b) for a, b in zip(o30.ravel(), o80.ravel()))
    assert worst < mpmath.mpf(10) ** -28
    assert worst > 0  # 30 digits really is less precise than 80


def test_oracle_masked_rows_follow_the_conventions():
    rng = np.random.default_rng(1)
    q, k, v = rng.standard_normal((1, 1, 3, 2)), rng.standard_normal((1, 1, 4, 2)), rng.standard_normal((1, 1, 4, 2))
    mask = np.ones((3, 4), bool)
    mask[1] = False
    o, lse = exact_attention(q, k, v, mask=mask)
    assert np.all(o[0, 0, 1] == 0) and lse[0, 0, 1] == -np.inf
    dq, dk, dv = exact_attention_backward(q, k, v, np.ones((1, 1, 3, 2)), mask=mask)
    assert np.all(dq[0, 0, 1] == 0)
    np.testing.assert_array_equal(exact_softmax(np.full((1, 3), -np.inf)), 0.0)
    assert exact_logsumexp(np.full((1, 3), -np.inf))[0] == -np.inf


def _bias_cancellation_case():
    """Found by hypothesis (seed 772): scale q.k ~ 1e4 cancelled by a bias ~ -1e4 to logits ~ -58, so the
    rounding of the product scale*q.k (u * 1e4) dwarfs u |s|."""
    rng = np.random.default_rng(772)
    q = rng.standard_normal((2, 1, 3, 2)) * 1e4
    k, v = rng.standard_normal((2, 1, 1, 2)), rng.standard_normal((2, 1, 1, 3))
    rng.standard_normal((2, 1, 3, 3))  # do, unused
    return q, k, v, {"bias": rng.standard_normal((1, 1, 3, 1)) * 1e4}


def test_bias_cancellation_is_within_the_dropout_bound():
    """The same case through flashcheck.proofs.reference_bounds (which charges the product's rounding on kappa)."""
    from flashcheck.proofs.reference_bounds import dropout_attention_bound

    q, k, v, kw = _bias_cancellation_case()
    o, lse = attention(q, k, v, **kw)
    o_x, lse_x = exact_attention(q, k, v, **kw)
    b = dropout_attention_bound(q, k, v, **kw)
    b_o, b_lse = b.o, b.lse
    assert_within("o", o, o_x, b_o)
    assert_within("lse", lse, lse_x, b_lse)


def test_bias_cancellation_is_within_the_proofs_reference_bound():
    """Regression: flashcheck.proofs.bounds once charged the product's rounding as u|s| (s after the bias)."""
    bounds = pytest.importorskip("flashcheck.proofs.bounds")
    q, k, v, kw = _bias_cancellation_case()
    _, lse = attention(q, k, v, **kw)
    _, lse_x = exact_attention(q, k, v, **kw)
    assert_within("lse", lse, lse_x, bounds.reference_bound(q, k, v, **kw).lse)

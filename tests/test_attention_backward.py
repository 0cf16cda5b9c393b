"""reference.attention_backward: the FA2 tiled backward with Delta = rowsum(dO o O) (seed 002)."""
import numpy as np
from hypothesis import given, note, strategies as st

from reference import attention, attention_backward, standard_attention_backward
from reference.exact import exact_attention_backward
from tests.reference_strategies import (
    U,
    assert_within,
    finite_difference_tolerance,
    note_comparison,
    reference_backward_bounds,
    reference_cases,
    strict_fp,
)

BLOCKS = st.sampled_from(((1, 1), (2, 3), (4, 4), (64, 64)))
NAMES = ("dq", "dk", "dv")


@given(reference_cases(), BLOCKS)
def test_fa2_backward_agrees_with_the_standard_backward(case, blocks):
    with strict_fp():
        o, lse = attention(case.q, case.k, case.v, **case.kwargs)
        grads = attention_backward(case.q, case.k, case.v, o, lse, case.do, block_q=blocks[0], block_k=blocks[1],
                                   **case.kwargs)
        ref = standard_attention_backward(case.q, case.k, case.v, case.do, **case.kwargs)
    *bounds, source = reference_backward_bounds(case.q, case.k, case.v, case.do, **case.kwargs)
    worst = {n: assert_within(n, g, r, 2 * b) for n, g, r, b in zip(NAMES, grads, ref, bounds)}
    note_comparison(note, f"{case.describe()} blocks={blocks}", worst, source)


@given(reference_cases(small=True), BLOCKS)
def test_fa2_backward_is_within_the_reference_bound_of_exact(case, blocks):
    with strict_fp():
        o, lse = attention(case.q, case.k, case.v, **case.kwargs)
        grads = attention_backward(case.q, case.k, case.v, o, lse, case.do, block_q=blocks[0], block_k=blocks[1],
                                   **case.kwargs)
    exact = exact_attention_backward(case.q, case.k, case.v, case.do, **case.kwargs)
    *bounds, source = reference_backward_bounds(case.q, case.k, case.v, case.do, **case.kwargs)
    worst = {n: assert_within(n, g, x, b) for n, g, x, b in zip(NAMES, grads, exact, bounds)}
    note_comparison(note, f"{case.describe()} blocks={blocks}", worst, source)


def test_fully_masked_rows_have_zero_gradients_and_contribute_nothing():
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((1, 2, 4, 3)), rng.standard_normal((1, 1, 5, 3)), rng.standard_normal((1, 1, 5, 2))
    do = rng.standard_normal((1, 2, 4, 2))
    mask = np.ones((4, 5), bool)
    mask[2] = False
    with strict_fp():
        o, lse = attention(q, k, v, mask=mask)
        dq, dk, dv = attention_backward(q, k, v, o, lse, do, mask=mask, block_q=2, block_k=2)
    np.testing.assert_array_equal(dq[:, :, 2], 0.0)
    # dK, dV do not change when the masked row's dO changes
    do2 = do.copy()
    do2[:, :, 2] = 100.0
    _, dk2, dv2 = attention_backward(q, k, v, o, lse, do2, mask=mask, block_q=2, block_k=2)
    np.testing.assert_array_equal(dk, dk2)
    np.testing.assert_array_equal(dv, dv2)


def _loss(q, k, v, do, kw):
    o, _ = attention(q, k, v, **kw)
    return float((o * do).sum()), float(np.abs(o * do).sum())


# h = 1e-4 must stay far below the length over which the logits' curvature acts (1 / logit scale)
@given(reference_cases(logit_scales=(1.0, 10.0)), st.integers(0, 2**32 - 1))
def test_gradients_match_central_finite_differences(case, seed):
    """L = sum(dO o O); d/dt L(x + t e) at t = 0 equals <grad, e> for a random direction e in (q, k, v)."""
    kw = case.kwargs
    rng = np.random.default_rng(seed)
    eq, ek, ev = (rng.standard_normal(x.shape) for x in (case.q, case.k, case.v))
    o, lse = attention(case.q, case.k, case.v, **kw)
    dq, dk, dv = attention_backward(case.q, case.k, case.v, o, lse, case.do, block_q=3, block_k=2, **kw)
    analytic = float((dq * eq).sum() + (dk * ek).sum() + (dv * ev).sum())
    h = 1e-4
    f = {t: _loss(case.q + t * eq, case.k + t * ek, case.v + t * ev, case.do, kw)[0] for t in (h, -h, h / 2, -h / 2)}
    _, f_abs = _loss(case.q, case.k, case.v, case.do, kw)
    fd = (f[h / 2] - f[-h / 2]) / h
    tol = finite_difference_tolerance(f[h], f[-h], f[h / 2], f[-h / 2], h, f_abs) + 64 * U * abs(analytic)
    note(f"{case.describe()} analytic={analytic!r} fd={fd!r} tol={tol:.3e}")
    assert abs(fd - analytic) <= tol, f"finite difference {fd!r} vs analytic {analytic!r}: |diff| {abs(fd - analytic):.3e} > {tol:.3e}"

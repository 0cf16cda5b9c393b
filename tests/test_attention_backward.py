"""flashcheck.reference.attention_backward: the FA2 tiled backward with Delta = rowsum(dO o O) (seed 002)."""
import numpy as np
from hypothesis import given, note, strategies as st

from flashcheck.reference import attention, attention_backward, standard_attention_backward
from flashcheck.reference.exact import exact_attention_backward
from tests.reference_strategies import (
    FD_GRID_BITS,
    FD_STEP,
    assert_within,
    directional_derivative_bound,
    finite_difference_tolerance,
    loss_rounding_bound,
    on_grid,
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
    """(sum(dO o O), its rounding bound) for the float64 reference at exactly these inputs."""
    o, _ = attention(q, k, v, **kw)
    return float((o * do).sum()), loss_rounding_bound(q, k, v, do, o, **kw)


# h = 2^-13 must stay far below the length over which the logits' curvature acts (1 / logit scale)
@given(reference_cases(logit_scales=(1.0, 10.0)), st.integers(0, 2**32 - 1))
def test_gradients_match_central_finite_differences(case, seed):
    """L = sum(dO o O); d/dt L(x + t e) at t = 0 equals <grad, e> for a random direction e in (q, k, v).
    The inputs lie on the grid 2^-40 and e on 2^-20, so every x + t e (t = +-h, +-h/2, h = 2^-13) is
    exact and the tolerance is derived: the references' bounds and the Richardson estimate (sec. 9a)."""
    kw = case.kwargs
    rng = np.random.default_rng(seed)
    x = [on_grid(a, FD_GRID_BITS) for a in (case.q, case.k, case.v)]
    e = [on_grid(rng.standard_normal(a.shape), 20) for a in x]
    o, lse = attention(*x, **kw)
    grads = attention_backward(*x, o, lse, case.do, block_q=3, block_k=2, **kw)
    analytic = float(sum((g * d).sum() for g, d in zip(grads, e)))
    *grad_bounds, _ = reference_backward_bounds(*x, case.do, **kw)
    h = FD_STEP
    pts = {t: [a + t * d for a, d in zip(x, e)] for t in (h, -h, h / 2, -h / 2)}
    for t, p in pts.items():  # the perturbed inputs are exactly x + t e
        assert all(np.array_equal(a - (a - t * d), t * d) and np.array_equal(a - t * d, b)
                   for a, d, b in zip(p, e, x)), f"x + {t} e is not exact"
    f = {t: _loss(*p, case.do, kw) for t, p in pts.items()}
    fd = (f[h / 2][0] - f[-h / 2][0]) / h
    tol = (finite_difference_tolerance(f[h][0], f[-h][0], f[h / 2][0], f[-h / 2][0], h,
                                       f[h][1], f[-h][1], f[h / 2][1], f[-h / 2][1])
           + directional_derivative_bound(grads, grad_bounds, e))
    note(f"{case.describe()} analytic={analytic!r} fd={fd!r} tol={tol:.3e}")
    assert abs(fd - analytic) <= tol, f"finite difference {fd!r} vs analytic {analytic!r}: |diff| {abs(fd - analytic):.3e} > {tol:.3e}"


def test_finite_difference_check_catches_a_wrong_gradient():
    """The derived tolerance is sharp enough to see dV off by 1e-6 relative (a planted bug)."""
    rng = np.random.default_rng(1)
    q, k, v = (on_grid(rng.standard_normal(s), FD_GRID_BITS) for s in ((1, 1, 5, 4), (1, 1, 7, 4), (1, 1, 7, 3)))
    do = rng.standard_normal((1, 1, 5, 3))
    e = [on_grid(rng.standard_normal(a.shape), 20) for a in (q, k, v)]
    o, lse = attention(q, k, v)
    dq, dk, dv = attention_backward(q, k, v, o, lse, do)
    h = FD_STEP
    f = {t: _loss(q + t * e[0], k + t * e[1], v + t * e[2], do, {}) for t in (h, -h, h / 2, -h / 2)}
    fd = (f[h / 2][0] - f[-h / 2][0]) / h
    *gb, _ = reference_backward_bounds(q, k, v, do)
    tol = (finite_difference_tolerance(f[h][0], f[-h][0], f[h / 2][0], f[-h / 2][0], h,
                                       f[h][1], f[-h][1], f[h / 2][1], f[-h / 2][1])
           + directional_derivative_bound((dq, dk, dv), gb, e))
    right = float((dq * e[0]).sum() + (dk * e[1]).sum() + (dv * e[2]).sum())
    wrong = right + 1e-6 * float((dv * e[2]).sum())
    assert abs(fd - right) <= tol < abs(fd - wrong), (fd, right, wrong, tol)

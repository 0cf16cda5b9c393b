"""The backward's round-to-nearest accumulations charged by half an ulp of the binade (bounds.md sec. 8,
"Round-to-nearest accumulations"; `backward._rn_step_bounds` with fmt = "float32", `backward._delta_dot`).

Each fp32 step fl(acc + p) errs by at most half an ulp of the binade of the value it rounds, the COMPUTED partial
sum; the tile/order-free bounds X_s bound only the exact partial sum, so the step bound is the half ulp of
X_s + W + E (the products' errors and the roundings so far). Checked here against actual fp32 accumulations
(numpy float32, one rounding per step: the products are fp32 values, so acc + p is exact in float64), including
sequences whose partial sums sit just below a power of two while the computed sum has already crossed it, where
the half ulp of the exact partial sum alone (one binade too low) is exceeded."""
from __future__ import annotations

import math

import numpy as np
import pytest

from flashcheck.proofs.bounds import backward
from flashcheck.proofs.bounds.backward import _delta_dot, _rn_step_bounds
from flashcheck.proofs.bounds.common import _half_ulp

U = 2.0**-24


def _fp32_steps(p_hat):
    """Per-step rounding errors e_s = fl32(T_s) - T_s of the recursive fp32 sum of the fp32 values p_hat (in order):
    T_s = acc + p_s is exact in float64 (operands within 2^29 of each other's binades, asserted)."""
    acc, errs = np.float32(0.0), np.empty(len(p_hat))
    for s, x in enumerate(p_hat):
        t = float(acc) + float(x)
        assert math.fsum([float(acc), float(x), -t]) == 0.0, "T_s not exact in float64"
        acc = np.float32(t)
        errs[s] = float(acc) - t
    return errs


def _bounds(S, tol, block, ordered, chain, fmt="float32"):
    p = S[None, :]
    c, _ = _rn_step_bounds(p == 0.0, p, tol[None, :], U, block, np.array([[ordered]]), chain, fmt)
    return c[0]


def _planted(scale=1.0):
    """Steps of 0.75 ulp round up by 0.25 ulp each: after four, the computed sum is 1 while the exact one is
    1 - 2^-24; the next product 2^-24 - 2^-30 is lost to rounding (error ~2^-24, half an ulp of [1, 2)) while the
    exact partial sum 1 - 2^-30 is still in [1/2, 1), whose half ulp is 2^-25."""
    return scale * np.array([1.0 - 2.0**-22] + [3.0 * 2.0**-26] * 4 + [2.0**-24 - 2.0**-30])


def _climb(rng, n):
    """Start just below 1, climb by 0.75-ulp steps (each rounding up), then hover around 1 by small grid products."""
    head = [1.0 - 2.0**-14] + [3.0 * 2.0**-26] * (n // 4)
    tail = np.float32(rng.integers(-64, 65, n - len(head)) * 2.0**-30).astype(np.float64)
    return np.r_[head, tail]


def _below_powers(rng, n):
    """Partial sums that sit just below powers of two: each product brings the exact sum to 2^k (1 - tiny)."""
    out, s = [], 0.0
    for _ in range(n):
        target = 2.0 ** rng.integers(-2, 3) * (1.0 - float(rng.integers(1, 9)) * 2.0**-24)
        x = float(np.float32(target - s))
        out.append(x)
        s += x
    return np.array(out)


def _sequences():
    rng = np.random.default_rng(0)
    yield "planted", _planted(), np.zeros(6)
    yield "planted, negated and scaled", _planted(-2.0**5), np.zeros(6)
    yield "climb", _climb(rng, 400), np.zeros(400)
    yield "below powers of two", _below_powers(rng, 300), np.zeros(300)
    # products as computed off the exact ones: S exact in float64, the kernel's operand fp32 (|S^ - S| <= u |S|)
    for name, S in (("normal", rng.standard_normal(512)), ("positive", rng.random(512)),
                    ("alternating", np.repeat([1.0, -1.0], 256) * (1 + 1e-3 * rng.standard_normal(512)))):
        yield name, S, U * np.abs(S)


@pytest.mark.parametrize("block", [1, 16, 64])
@pytest.mark.parametrize("ordered, chain", [(True, True), (True, False), (False, False)])
def test_step_bounds_hold_for_actual_fp32_accumulations(block, ordered, chain):
    """|e_s| <= c_s at every step of the fp32 sum of the products as computed, added in the order the bound
    assumes (the chain: exactly in order; tiles: in ascending tile order, any order inside a tile: permuted)."""
    rng = np.random.default_rng(block)
    for name, S, tol in _sequences():
        n = len(S)
        S_hat = np.float32(S).astype(np.float64)
        assert (np.abs(S_hat - S) <= tol).all()
        c = _bounds(S, tol, block, ordered, chain)
        order = np.arange(n)
        if not chain:  # any order inside each tile (and, unordered, any order at all)
            order = (np.concatenate([rng.permutation(np.arange(t, min(n, t + block))) for t in range(0, n, block)])
                     if ordered else rng.permutation(n))
        e = _fp32_steps(S_hat[order])
        over = np.abs(e) > c[order]
        assert not over.any(), (name, np.flatnonzero(over)[:5], np.abs(e)[over][:5], c[order][over][:5])


def test_a_step_bound_from_the_exact_partial_sum_is_exceeded():
    """The half ulp of the EXACT partial sum's bound (without the products' errors and the roundings so far) is
    one binade too low at the planted step, and so is half the bound charged; the bound charged holds."""
    S = _planted()
    e = _fp32_steps(np.float32(S).astype(np.float64))
    c = _bounds(S, np.zeros_like(S), 1, True, False)
    naive = _half_ulp(np.abs(np.cumsum(S)), "float32")  # exact partial sums: 1 - 2^-30 at the last step
    assert abs(e[-1]) > naive[-1], (e[-1], naive[-1])
    assert abs(e[-1]) > c[-1] / 2.0
    assert (np.abs(e) <= c).all()


def test_half_ulp_steps_never_exceed_the_u_form_and_are_sharper_on_random_products():
    """The binade form only lowers a step's bound (min with u X_s), and by ~1/(2 ln 2) on random magnitudes."""
    rng = np.random.default_rng(3)
    S = rng.standard_normal((64, 1024))
    tol = U * np.abs(S)
    for ordered, chain in ((True, True), (True, False), (False, False)):
        old, _ = _rn_step_bounds(S == 0, S, tol, U, 64, np.array([[ordered]]), chain, None)
        new, C1 = _rn_step_bounds(S == 0, S, tol, U, 64, np.array([[ordered]]), chain, "float32")
        C1_old = _rn_step_bounds(S == 0, S, tol, U, 64, np.array([[ordered]]), chain, None)[1]
        assert (new <= old).all()
        np.testing.assert_array_equal(C1, C1_old)  # C1 (the remainder's) is the partial-sum bounds' sum either way
        assert np.median(new / old) < 0.9, np.median(new / old)


def _tree_sum32(x, rng):
    """fp32 sum of the fp32 values x in a random addition tree (tl.sum's order is not fixed)."""
    vals = [np.float32(v) for v in x]
    while len(vals) > 1:
        i, j = sorted(rng.choice(len(vals), 2, replace=False))
        b, a = vals.pop(j), vals.pop(i)
        vals.append(np.float32(float(a) + float(b)))
    return float(vals[0])


def test_delta_dot_steps_hold_for_fp32_sums(monkeypatch):
    """Delta = tl.sum(dO * O_hat) in fp32 (products rounded, then a tree of additions): its error stays within the
    sum of the per-product bounds _delta_dot charges (each covers its product's rounding and one addition), on
    rows whose partial sums sit just below powers of two (dO_c O_c summing to 2^k (1 - small))."""
    seen = []
    real = backward._grouped_square_sum
    monkeypatch.setattr(backward, "_grouped_square_sum", lambda p, c, t: seen.append(c.copy()) or real(p, c, t))
    rng = np.random.default_rng(5)
    dv, rows = 16, 200
    dO = np.float32(rng.standard_normal((rows, dv))).astype(np.float64)
    O = np.float32(rng.standard_normal((rows, dv))).astype(np.float64)
    scale = 2.0 ** np.ceil(np.log2(np.abs((dO * O).sum(-1)) + 1e-3))  # push each row's sum up to just below 2^k
    O[:, 0] += (scale * (1 - 2.0**-22) - (dO * O).sum(-1)) / dO[:, 0]
    O = np.float32(O).astype(np.float64)
    O_exact = O * (1 + U * rng.uniform(-1, 1, O.shape))  # the bound's O; O_hat = O within o_err = 2u |O|
    o_err = 2 * U * np.abs(O)
    for fmt in (None, "float32"):
        seen.clear()
        _delta_dot(dO[None, None], O_exact[None, None], o_err[None, None], U, dv, fmt)
        c = seen[0].reshape(rows, dv)
        for i in range(rows):
            err = abs(_tree_sum32(dO[i] * O[i], rng) - math.fsum(dO[i] * O[i]))  # products exact in float64
            S = (np.abs(dO[i] * O_exact[i]) + np.abs(dO[i]) * o_err[i]).sum()
            assert err <= c[i].sum() + (float(backward.gamma(dv, U)) - dv * U) * S, (fmt, i, err, c[i].sum())

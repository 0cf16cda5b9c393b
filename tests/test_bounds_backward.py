"""The backward bound's accumulation and conversion models (proofs/bounds.md sec. 8, "round-to-nearest
accumulations", "tensor-core accumulations", "input conversions"): each helper against what it claims,
and the bound against inputs built so that every product of an accumulation is equal (the rounding
errors are then all alike, which the grouping must charge worst case)."""
from __future__ import annotations

import numpy as np
import pytest

from flashcheck.proofs.bounds import Precision, backward_bound
from flashcheck.proofs.bounds.backward import (_accumulation_coefficients, _grouped_square_sum, _tensor_core_steps,
                                               _tf32_truncate, backward_terms)


def test_equal_products_form_one_group_and_distinct_ones_add_in_quadrature():
    p = np.array([[0.5, 0.5, 0.5, 0.5], [0.1, 0.2, 0.3, 0.4]])
    coef = np.ones_like(p)
    got = _grouped_square_sum(p, coef, np.zeros_like(p))
    np.testing.assert_array_equal(got, [16.0, 4.0])  # (1+1+1+1)^2 ; 1+1+1+1


def _partitions(items):
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in _partitions(rest):
        for i in range(len(part)):
            yield part[:i] + [[first] + part[i]] + part[i + 1:]
        yield [[first]] + part


def test_grouping_bounds_every_partition_into_classes_of_possibly_equal_products():
    """For any split of the steps into classes whose intervals share a point (products equal as computed),
    sum over classes of (sum coef)^2 is at most the bound (brute force over all partitions of 6 steps)."""
    rng = np.random.default_rng(4)
    for _ in range(30):
        p = np.round(rng.uniform(0, 1, (1, 6)), 1)
        tol = rng.choice([0.0, 0.05, 0.1, 0.3], size=(1, 6))
        coef = rng.uniform(0.1, 1.0, (1, 6))
        bound = _grouped_square_sum(p, coef, tol)[0]
        best = 0.0
        for part in _partitions(list(range(6))):
            if all(max(p[0, i] - tol[0, i] for i in g) <= min(p[0, i] + tol[0, i] for i in g) for g in part):
                best = max(best, sum(coef[0, g].sum() ** 2 for g in part))
        assert best <= bound * (1 + 1e-12), (p, tol, coef, best, bound)
    # touching intervals meet; a chain 0.1 - 0.2 - 0.3 does not make 0.1 and 0.3 one class
    got = _grouped_square_sum(np.array([[0.1, 0.9, 0.3, 0.2]]), np.ones((1, 4)), np.full((1, 4), 0.05))
    np.testing.assert_allclose(got, [2 + 1 + 2 + 3])


def test_grouping_equals_the_pairwise_sum_over_meeting_intervals():
    """The one-sweep form 2 U - C^2 is sum_s c_s sum_t c_t [intervals s and t meet], computed pairwise here,
    with ties (touching intervals meet), exact zeros, infinite tolerances and zero coefficients."""
    rng = np.random.default_rng(7)
    for trial in range(60):
        m, n = int(rng.integers(1, 4)), int(rng.integers(1, 90))
        p = np.round(rng.standard_normal((m, n)), int(rng.integers(0, 3))) * rng.choice([0.0, 1.0], size=(m, n), p=[0.1, 0.9])
        tol = rng.choice([0.0, 0.01, 0.05, 0.25, np.inf], size=(m, n))
        coef = rng.uniform(0, 1, (m, n)) * (rng.random((m, n)) > 0.2)
        lo, hi = p - tol, p + tol
        meet = (lo[:, None, :] <= hi[:, :, None]) & (hi[:, None, :] >= lo[:, :, None])
        want = np.einsum("ms,mst,mt->m", coef, meet, coef)
        np.testing.assert_allclose(_grouped_square_sum(p, coef, tol), want, rtol=1e-12, atol=0,
                                   err_msg=f"trial {trial}: p={p}, tol={tol}")


def test_accumulation_coefficients_bound_every_partial_sum_in_any_order_within_tiles():
    rng = np.random.default_rng(0)
    p = rng.standard_normal((3, 40))
    block = 8
    c = _accumulation_coefficients(p, block, True)
    for _ in range(20):  # tiles in order, any order inside each tile, blocked or recursive
        perm = np.concatenate([t0 + rng.permutation(min(block, 40 - t0)) for t0 in range(0, 40, block)])
        partial = np.cumsum(p[:, perm], axis=-1)
        assert (np.abs(partial) <= c[:, perm] * (1 + 1e-12)).all()
    assert (_accumulation_coefficients(p, block, False) >= np.abs(np.cumsum(p, axis=-1))).all()


def test_tensor_core_steps_never_exceed_the_old_count_and_cover_each_step():
    rng = np.random.default_rng(1)
    p = rng.standard_normal((2, 64))
    block, k = 16, 4
    got = _tensor_core_steps(p, block, k, np.array([True, False]))
    old = (64 // k) * np.abs(p).sum(-1)
    assert got[1] == old[1] and got[0] <= old[0]
    # each step: |accumulator before it| + its products' |p|, ascending
    acc, need = 0.0, 0.0
    for s0 in range(0, 64, k):
        need += abs(acc) + np.abs(p[0, s0:s0 + k]).sum()
        acc += p[0, s0:s0 + k].sum()
    assert need <= got[0]


def test_tf32_truncation_matches_the_emulation():
    from flashcheck.proofs.emulation import round_to

    x = np.random.default_rng(2).standard_normal(1000).astype(np.float32).astype(np.float64)
    np.testing.assert_array_equal(_tf32_truncate(x), round_to(x, "tf32"))


def _triangle(n: int, d: int, kval: float):
    """Uniform rows (q = 0), V's column 0 = +1 for the first half of the keys and -1 after, dO = e_0,
    K constant: the dQ accumulation adds n/2 equal products then n/2 equal negative ones."""
    q = np.zeros((1, 1, 2, d))
    k = np.full((1, 1, n, d), kval)
    v = np.zeros((1, 1, n, d))
    v[..., : n // 2, 0], v[..., n // 2:, 0] = 1.0, -1.0
    v[..., 1] = np.where(np.arange(n) < n // 4, 1.0, -1.0 / 3.0)
    do = np.zeros((1, 1, 2, d))
    do[..., 0, 0] = do[..., 1, 1] = 1.0
    return q, k, v, do


@pytest.mark.parametrize("kval", [0.1, 1.0 / 3.0])
def test_probabilistic_dq_bound_holds_when_every_product_is_equal(kval):
    from flashcheck.proofs.emulation import fa2_backward, fa2_forward, round_to
    from flashcheck.reference.attention import attention
    from flashcheck.reference.backward import attention_backward

    q, k, v, do = (round_to(x, "float32") for x in _triangle(2048, 16, kval))
    o, lse = fa2_forward(q, k, v, dtype="float32", dot="ieee")
    got = fa2_backward(q, k, v, o, lse, do, dtype="float32", dot="ieee")
    O, L = attention(q, k, v)
    exact = attention_backward(q, k, v, O, L, do)
    pr = Precision("float32", "ieee", exp="libm")
    for kind in ("probabilistic", "worst_case"):
        bb = backward_bound(q, k, v, do, precision=pr, kind=kind)
        for name, g, e, b in zip(("dQ", "dK", "dV"), got, exact, (bb.dq, bb.dk, bb.dv)):
            err = np.abs(g - e)
            assert (err <= b).all(), f"{kind} {name}: max error/bound {np.max(err / np.maximum(b, 1e-300)):.3g}"


def test_terms_name_every_piece_of_each_gradient():
    rng = np.random.default_rng(3)
    q, k, v, do = (rng.standard_normal(s) for s in ((1, 1, 8, 4), (1, 1, 16, 4), (1, 1, 16, 4), (1, 1, 8, 4)))
    bb, terms = backward_terms(q, k, v, do, precision=Precision("float32", "ieee", exp="libm"))
    np.testing.assert_array_equal(bb.dq, backward_bound(q, k, v, do, precision=bb.precision).dq)
    assert set(terms) == {"dQ", "dK", "dV"}
    for name, ts in terms.items():
        assert {"var", "det"} <= {t.kind for t in ts}, name
        assert all(np.all(t.value >= 0) for t in ts), name


def _rows_triangle(nq: int, nk: int, d: int, qval: float):
    """The transpose of _triangle for dK, dV: every query row identical (q = qval, so P_ij and dS_ij repeat
    down each key's column), dO = +e_0 on the first half of each head's rows and -e_0 after, two query heads on
    one kv head: each dK, dV accumulation over the rows adds runs of equal products of both signs."""
    rng = np.random.default_rng(5)
    q = np.full((1, 2, nq, d), qval)
    k, v = rng.standard_normal((1, 1, nk, d)), rng.standard_normal((1, 1, nk, d))
    do = np.zeros((1, 2, nq, d))
    do[:, :, : nq // 2, 0], do[:, :, nq // 2:, 0] = 0.1, -0.1
    return q, k, v, do


def test_probabilistic_dk_dv_bounds_hold_when_every_row_product_is_equal():
    """End to end against the emulated kernel on rows whose products repeat (a soundness check: the
    accumulation is not the largest term here, test_rows_accumulation_groups_* checks it alone)."""
    from flashcheck.proofs.emulation import fa2_backward, fa2_forward, round_to
    from flashcheck.reference.attention import attention
    from flashcheck.reference.backward import attention_backward

    q, k, v, do = (round_to(x, "float32") for x in _rows_triangle(1024, 16, 16, 0.1))
    o, lse = fa2_forward(q, k, v, dtype="float32", dot="ieee")
    got = fa2_backward(q, k, v, o, lse, do, dtype="float32", dot="ieee")
    O, L = attention(q, k, v)
    exact = attention_backward(q, k, v, O, L, do)
    bb = backward_bound(q, k, v, do, precision=Precision("float32", "ieee", exp="libm"), kind="probabilistic")
    for name, g, e, b in zip(("dK", "dV"), got[1:], exact[1:], (bb.dk, bb.dv)):
        err = np.abs(g - e)
        worst = np.unravel_index(np.argmax(err / b), err.shape)
        assert (err <= b).all(), f"{name}: error {err[worst]:.3g} over the bound {b[worst]:.3g} at {worst}"


def test_rows_accumulation_charges_the_steps_worst_case_across_the_gqa_group():
    """dK/dV's accumulation over the query rows: one accumulator through both query heads of the kv head, tiles of
    block_q in order. Where its chain is not evaluated on the data, the charge is the worst case sum_s c_s over the
    2 N_q steps (split evenly over the heads), c_s from the tiles' partial sums; a kernel that states no order, or a
    masked entry, gives u sum |p| at every step. Nothing is modelled as random: the grouped model (Azuma over equal
    products) was exceeded by coherent residues of distinct products (bench/adversaries/constant_residue_rows.py:
    3.6x in the "any" order of a third-party fp32 kernel)."""
    from flashcheck.proofs.bounds.backward import _rows_accumulation
    from flashcheck.proofs.bounds.precision import _model

    M = _model(Precision("float32", "ieee", exp="libm"))
    nq, nk, c, bq = 256, 3, 2, 64
    S, other = np.full((1, 2, nq, nk), 0.25), np.full((1, 2, nq, c), 1.0 / 3.0)
    vis, tol = np.ones(S.shape, dtype=bool), np.zeros(S.shape)
    p = np.full(2 * nq, 0.25 / 3.0)
    acc, _, det = _rows_accumulation(M, S, other, tol, vis, bq, group=2, tile_order="partial_first")
    assert not acc.any(), "no part of the accumulation is modelled as random"
    np.testing.assert_allclose(det.sum(axis=1), M.u_dacc * _accumulation_coefficients(p, bq, True).sum()
                               * np.ones((1, nk, c)), rtol=1e-12)
    np.testing.assert_array_equal(det[:, 0], det[:, 1])
    # a kernel that does not state its tile order: the order-free coefficients
    any_order = _rows_accumulation(M, S, other, tol, vis, bq, group=2, tile_order="any")[2].sum(axis=1)
    np.testing.assert_allclose(any_order, M.u_dacc * 2 * nq * np.abs(p).sum() * np.ones((1, nk, c)), rtol=1e-12)
    vis[0, 1, 5, 0] = False  # order unknown for the whole kv head
    unordered = _rows_accumulation(M, S, other, tol, vis, bq, group=2, tile_order="partial_first")[2].sum(axis=1)
    np.testing.assert_allclose(unordered, M.u_dacc * 2 * nq * np.abs(p).sum() * np.ones((1, nk, c)), rtol=1e-12)


def test_dq_accumulation_takes_ascending_tiles_only_where_nothing_of_the_head_is_masked():
    """The kernels visit a query block's partial key tiles first: a row that sees every key may still meet its
    diagonal tile first (causal). So the ascending-tile model of the dQ accumulation applies only where nothing
    of the head is masked; a head with one masked entry takes the order-free coefficients for every row, the
    row that sees every key included."""
    from flashcheck.proofs.bounds.backward import _dq_accumulation, _rn_accumulation_sq
    from flashcheck.proofs.bounds.precision import _model

    rng = np.random.default_rng(5)
    nq, nk, d, bk = 4, 128, 8, 32
    precision = Precision("float32", "ieee", exp="libm", block_k=bk)
    M = _model(precision)
    dS = rng.standard_normal((1, 1, nq, nk)) / nk
    kf = rng.standard_normal((1, 1, nk, d))
    tolS = 1e-7 * np.abs(dS)
    vis = np.ones((1, 1, nq, nk), bool)
    vis[0, 0, 1:, -1] = False  # causal-like: rows 1.. miss the last key; row 0 sees every key
    dS = np.where(vis, dS, 0.0)
    head_full = vis.all(axis=(-2, -1), keepdims=True)
    _, _, _, got = _dq_accumulation(M, "probabilistic", dS, kf, tolS, vis, bk, head_full, "partial_first")
    _, _, order_free = _rn_accumulation_sq(dS, kf, tolS, M.u_dacc, bk, np.zeros((1, 1, nq), bool))
    _, _, ascending = _rn_accumulation_sq(dS, kf, tolS, M.u_dacc, bk, np.ones((1, 1, nq), bool))
    np.testing.assert_allclose(got[0, 0, 0], order_free[0, 0, 0], rtol=1e-12)
    assert not np.allclose(ascending[0, 0, 0], order_free[0, 0, 0], rtol=1e-3, atol=0)  # they differ: it can fail


def test_dq_accumulation_follows_the_stated_order_of_a_ragged_row():
    """Our kernel visits a ragged key tile first ("partial_first"): the model's partial sums are those of that
    order (the ragged tile padded at the front to a full one), not the order-free u sum |p| at every step; a kernel
    that states no order ("any": flash-attn adds dQ over key blocks atomically) keeps the order-free bound."""
    from flashcheck.proofs.bounds.backward import _dq_accumulation, _rn_accumulation_sq
    from flashcheck.proofs.bounds.precision import _model

    rng = np.random.default_rng(6)
    nq, nk, d, bk = 3, 100, 8, 32  # 3 full tiles and a ragged one of 4 keys
    M = _model(Precision("float32", "ieee", exp="libm", block_k=bk))
    dS, kf = rng.standard_normal((1, 1, nq, nk)) / nk, rng.standard_normal((1, 1, nk, d))
    tolS, vis = 1e-7 * np.abs(dS), np.ones((1, 1, nq, nk), bool)
    head_full = vis.all(axis=(-2, -1), keepdims=True)
    _, _, _, got = _dq_accumulation(M, "probabilistic", dS, kf, tolS, vis, bk, head_full, "partial_first")
    perm = np.r_[np.arange(96, 100), np.arange(96)]
    pad = lambda x, ax: np.concatenate([np.zeros(x.shape[:ax] + (28,) + x.shape[ax + 1:]), x], axis=ax)  # noqa: E731
    _, _, want = _rn_accumulation_sq(pad(dS[..., perm], 3), pad(kf[..., perm, :], 2), pad(tolS[..., perm], 3),
                                     M.u_dacc, bk, np.ones((1, 1, nq), bool))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    _, _, _, free = _dq_accumulation(M, "probabilistic", dS, kf, tolS, vis, bk, head_full, "any")
    _, _, order_free = _rn_accumulation_sq(dS, kf, tolS, M.u_dacc, bk, np.zeros((1, 1, nq), bool))
    np.testing.assert_allclose(free, order_free, rtol=1e-12)
    assert (got < free).all() and np.median(got / free) < 0.5  # the order is worth stating

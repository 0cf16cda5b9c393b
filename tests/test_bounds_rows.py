"""The row-common errors of dK and dV (proofs/bounds.md sec. 8, "row-common errors of dK, dV"): rows that
compute alike make one error, so their random parts are grouped (_RowGroups), and the round-to-nearest parts
of each row's LSE and Delta are random only over groups of equal summands (_lse_random, _delta_dot)."""
from __future__ import annotations

import numpy as np
import pytest

from flashcheck.proofs.bounds import Precision, backward_bound
from flashcheck.proofs.bounds.backward import _delta_dot, _lse_random, _RowGroups
from flashcheck.proofs.bounds.forward import _forward
from flashcheck.proofs.bounds.precision import _model


def test_rows_that_compute_alike_form_one_group():
    """Bit-identical rows as the dot sees them, -0 like +0, across the query heads of a kv head (GQA)."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 4, 3, 8))  # 4 query heads on 2 kv heads
    q[0, 0, 1] = q[0, 0, 0]
    q[0, 1, 2] = q[0, 0, 0]  # same kv head as head 0: one group of 3
    q[0, 2, 0] = q[0, 0, 0]  # another kv head: not in it
    z = np.zeros(8)
    q[0, 3, 0], q[0, 3, 1] = z, -z  # -0 computes like +0
    do = rng.standard_normal((1, 4, 3, 8))
    g = _RowGroups.of(q, do, Precision("float32", "ieee"), group=2)
    np.testing.assert_array_equal(g.by_q[0], [[3, 3, 1], [1, 1, 3], [1, 1, 1], [2, 2, 1]])
    np.testing.assert_array_equal(g.by_do, np.ones((1, 4, 3)))  # every dO row distinct
    np.testing.assert_array_equal(g.by_q_do, np.ones((1, 4, 3)))
    # fp32 rows that differ below tf32's 10 bits reach the tensor core as the same operand
    q2 = np.repeat(np.float32(rng.standard_normal((1, 1, 1, 8))).astype(np.float64), 2, axis=2)
    q2[0, 0, 1, 0] = float(np.nextafter(np.float32(q2[0, 0, 0, 0]), np.float32(np.inf)))
    trunc = Precision("float32", "tf32")
    assert trunc.hardware.tf32_operand == "truncate"
    low_bit = int(np.float32(q2[0, 0, 0, 0]).view(np.int32)) & 0x1FFF != 0x1FFF  # no carry into bit 13
    np.testing.assert_array_equal(_RowGroups.of(q2, q2, Precision("float32", "ieee"), 1).by_q, [[[1, 1]]])
    if low_bit:
        np.testing.assert_array_equal(_RowGroups.of(q2, q2, trunc, 1).by_q, [[[2, 2]]])


def _parts(q, k, v, precision):
    pr = precision.fitted(q.shape[2], k.shape[2])
    F = _forward(q, k, v, None, False, None, None, None, pr, "probabilistic")
    return F, _lse_random(F, _model(pr), F.kf, F.scale, q.shape[-1], False, pr)


def test_equal_summands_of_l_keep_their_worst_case_and_distinct_ones_average():
    """l's sum: uniform rows (every P_j = 1) are one group of equal summands, so the variance proxy is the
    square of the worst case of those roundings; random logits give distinct summands and far less."""
    rng = np.random.default_rng(1)
    k, v = rng.standard_normal((1, 1, 256, 16)), rng.standard_normal((1, 1, 256, 16))
    precision = Precision("float32", "ieee", exp="libm", block_k=64)
    F, lr = _parts(np.zeros((1, 1, 4, 16)), k, v, precision)
    assert lr.l_ok.all()
    wc = F.parts.l_sum_det - lr.l_det
    np.testing.assert_allclose(lr.l_var, wc**2, rtol=1e-12)
    F, lr = _parts(rng.standard_normal((1, 1, 4, 16)), k, v, precision)
    assert lr.l_ok.all()
    assert (lr.l_var < 0.1 * (F.parts.l_sum_det - lr.l_det) ** 2).all(), lr.l_var  # ~0.05 at N_k = 256


def test_delta_sum_of_equal_products_is_charged_worst_case():
    u, dv = 2.0**-24, 8
    do = np.ones((1, 1, 2, dv))
    o = np.stack([np.full(dv, 0.3), np.linspace(0.1, 0.9, dv)])[None, None]
    var, _ = _delta_dot(do, o, np.zeros_like(o), u, dv)
    S = np.abs(o).sum(-1)[0, 0]
    assert var[0, 0, 0] == pytest.approx((dv * u * S[0]) ** 2)  # one group: capped at the worst case
    assert var[0, 0, 1] < 0.2 * (dv * u * S[1]) ** 2  # distinct products add in quadrature


def _two_groups(nq, nk, d, seed, spread, dtype):
    """Two groups of bit-identical query rows (q0 and a copy of q0 perturbed by `spread`, relative), dO = +w
    on the first and -w on the second: dV and dK nearly cancel between the groups, while each group's
    roundings (P into the operand format, the logits, the LSE) repeat on all of its rows."""
    from flashcheck.proofs.emulation import round_to

    rng = np.random.default_rng(seed)
    q0 = rng.standard_normal(d)
    k, v = rng.standard_normal((1, 1, nk, d)), rng.standard_normal((1, 1, nk, d))
    w = rng.standard_normal(d)
    q1 = q0 * (1 + spread * rng.standard_normal(d))
    half = np.arange(nq) < nq // 2
    q = np.where(half[:, None], q0, q1)[None, None]
    do = np.where(half[:, None], w, -w)[None, None]
    return [round_to(x, dtype) for x in (q, k, v, do)]


@pytest.mark.parametrize("dtype, dot, spread", [("float16", "fp16", 1e-4), ("bfloat16", "bf16", 1e-3)])
def test_identical_rows_are_one_random_variable(dtype, dot, spread):
    """Against the emulated kernel: the grouped probabilistic bound holds on every dK, dV entry. (Until
    2026-11-25 the version that treats every row as independent was exceeded here, dV 2.3-3.0x: P's rounding
    into the operand format repeats on every row of a group. That rounding is now charged worst case
    (bounds.md sec. 6, bench/adversaries/p_residue_dv.py), which covers the repeats too: the ungrouped bound
    holds as well now, 0.84 at most; the grouping still weighs the remaining random parts.) The spread
    keeps the two groups distinct in the operand format (a smaller one rounds them together)."""
    from flashcheck.proofs.emulation import fa2_backward, fa2_forward
    from flashcheck.reference.attention import attention
    from flashcheck.reference.backward import attention_backward

    q, k, v, do = _two_groups(512, 128, 64, 0, spread, dtype)
    o, lse = fa2_forward(q, k, v, dtype=dtype, dot=dot)
    got = fa2_backward(q, k, v, o, lse, do, dtype=dtype, dot=dot)
    O, L = attention(q, k, v)
    exact = attention_backward(q, k, v, O, L, do)
    precision = Precision(dtype, dot, exp="libm")
    grouped = backward_bound(q, k, v, do, precision=precision)
    for name, g, e, b in (("dK", got[1], exact[1], grouped.dk), ("dV", got[2], exact[2], grouped.dv)):
        err = np.abs(g - e)
        worst = np.unravel_index(np.argmax(err / b), err.shape)
        assert (err <= b).all(), (f"{name}: error {err[worst]:.3g} over the grouped bound {b[worst]:.3g} "
                                  f"at {worst}")


def test_rescales_of_o_in_delta_count_only_tiles_that_can_move_the_max():
    """Delta's acc * alpha roundings: with the max in the first tile no later alpha differs from 1 (nothing is
    charged); logits rising along the keys move it in every tile (charged, each on the share visited so far)."""
    from flashcheck.proofs.bounds.backward import _delta_rescales
    from flashcheck.proofs.bounds.logits import _logit_errors

    def rescales(F, do):  # the rescales' part of _delta_accumulation's det
        lgf = _logit_errors(F.qf, F.kf, F.s, F.m, F.vis, F.scale, M, d, False, qk=F.parts.qk)
        return _delta_rescales(F.A, F.vis, F.s, lgf.wc, np.abs(do), F.vf, precision.block_k, precision.tile_order, M)

    rng = np.random.default_rng(3)
    d, nk = 16, 256
    precision = Precision("float32", "ieee", exp="libm", block_k=64)
    M = _model(precision)
    assert M.alpha_exact_at_zero
    q = rng.standard_normal((1, 1, 2, d))
    q[0, 0, 1] = -q[0, 0, 0]  # row 1: key 0 far below its max
    k, v, do = rng.standard_normal((1, 1, nk, d)), rng.standard_normal((1, 1, nk, d)), rng.standard_normal((1, 1, 2, d))
    first = k.copy()
    first[0, 0, 0] = 40.0 * q[0, 0, 0] / np.linalg.norm(q[0, 0, 0])  # row 0's max in the first tile, by far
    for keys, charged in ((first, [False, True]), (k, [True, True])):
        F = _forward(q, keys, v, None, False, None, None, None, precision, "probabilistic")
        det = rescales(F, do)
        assert list(det[0, 0] > 0) == charged, det
    u = np.linspace(1, 0, d)[None, None, None] / np.sqrt(d)  # logits rising by 8 along the keys
    kr = 8 * np.sqrt(d) * np.arange(nk)[None, None, :, None] / nk * u[0] / np.sum(u[0] ** 2)
    F = _forward(np.broadcast_to(u, (1, 1, 1, d)).copy(), kr, v, None, False, None, None, None, precision,
                 "probabilistic")
    det = rescales(F, do[:, :, :1])
    A = F.A[0, 0, 0]
    shares = np.array([(A[: 64 * t, None] * np.abs(v[0, 0, : 64 * t])).sum(0) for t in (1, 2, 3)])
    np.testing.assert_allclose(det[0, 0, 0], M.u_w * (np.abs(do[0, 0, 0]) * shares.sum(0)).sum(), rtol=1e-9)


def test_keys_that_compute_alike_are_one_random_variable_in_dq():
    """dQ sums over the keys: keys and values drawn from a pool of 3 (k, v) pairs give equal dS_ij on every copy,
    so dS's rounding to fp16 repeats N_k / 3 times in each dQ entry. Weighted by the key groups (_KeyGroups) the
    probabilistic bound holds. (With the weights set to 1 it was exceeded until 2026-11-25, 0.92 of the error;
    dS's rounding into the operand format is now charged worst case, which covers the repeats.)"""
    from flashcheck.proofs.emulation import fa2_backward, fa2_forward, round_to
    from flashcheck.reference.attention import attention
    from flashcheck.reference.backward import attention_backward

    rng = np.random.default_rng(0)
    nq, nk, d = 64, 4096, 64
    q, do = rng.standard_normal((1, 1, nq, d)), rng.standard_normal((1, 1, nq, d))
    kp, vp = rng.standard_normal((3, d)), rng.standard_normal((3, d))
    idx = rng.integers(0, 3, nk)
    q, k, v, do = (round_to(x, "float16") for x in (q, kp[idx][None, None], vp[idx][None, None], do))
    o, lse = fa2_forward(q, k, v, dtype="float16", dot="fp16")
    got = fa2_backward(q, k, v, o, lse, do, dtype="float16", dot="fp16")[0]
    O, L = attention(q, k, v)
    err = np.abs(got - attention_backward(q, k, v, O, L, do)[0])
    precision = Precision("float16", "fp16", exp="libm")
    assert (err <= backward_bound(q, k, v, do, precision=precision).dq).all()


def _row_twin(which, kind):
    """bench/adversaries/constant_residue_rows.py (emulation of our fp32 ieee kernel, every claim): max error/bound."""
    import os
    import sys

    from bench.bounds_attack import run_source
    from flashcheck.proofs.bounds import backward_bound
    from flashcheck.reference.attention import attention
    from flashcheck.reference.backward import attention_backward

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench", "adversaries"))
    from constant_residue_rows import build

    q, k, v, do = build(4096, which)
    (_, _, _, dk, dv), precision = run_source("emulation", "cpu", "float32", "ieee", q, k, v, do)
    O, L = attention(q, k, v)
    exact = attention_backward(q, k, v, O, L, do)
    bb = backward_bound(q, k, v, do, precision=precision, kind=kind)
    got, want, b = (dk, exact[1], bb.dk) if which == "dk" else (dv, exact[2], bb.dv)
    return float(np.max(np.abs(got - want) / b))


@pytest.mark.parametrize("which", ["dk", "dv"])
def test_row_chains_with_coherent_residues_stay_within_the_worst_case(which):
    assert _row_twin(which, "worst_case") <= 1


@pytest.mark.parametrize("which", ["dk", "dv"])
def test_row_chains_with_coherent_residues_stay_within_the_probabilistic_bound(which):
    """The grouped round-to-nearest model of these chains was exceeded 7.5x (dK) / 5.8x (dV) here (the known gap of
    2026-11-26f); the chains are now evaluated on the data (backward._rn_chain_on_data): 0.98 / 0.89."""
    assert _row_twin(which, "probabilistic") <= 1

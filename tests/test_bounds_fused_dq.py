"""dQ summed in the dK/dV kernel (Precision.fused_dq; proofs/bounds.md sec. 8b). The Gluon backward's second form for
long unbanded calls at head dim 64 computes dQ's products inside its dK/dV kernel: per key tile of 128 keys ONE
tensor-core MMA chain from zero, the tiles' fp32 partials added into a zeroed fp32 accumulator in DESCENDING tile
order (one fp32 round-to-nearest add each, the first exact), then the scale and the store. Its dQ arithmetic differs
from the dQ kernel's one chain through every key tile, so the Precision states it (FusedDq, for_call), the bound models
it as a "blocked" dQ (Precision.dq_accumulation; each product through <= ceil(128 / 16) MMA steps + T adds) and the CPU
emulation computes it (proofs/emulation.py fa2_backward(dq_accumulation="blocked", mma="h100"): the H100's measured
truncating step model). Here: the substitution, the bound against the emulation on random and structured inputs, and
planted bugs in the sum that the bound catches."""
from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np
import pytest
import torch

from flashcheck.proofs import emulation
from flashcheck.proofs.bounds import (BandForward, FusedDq, Precision, backward_bound, is_band,
                                      lse_gradient_bound)
from flashcheck.proofs.bounds.precision import _dot_steps, _dq_model, _model
from flashcheck.proofs.emulation import fa2_backward, fa2_forward, round_to
from flashcheck.proofs.tightness import worst_ratio
from flashcheck.reference.attention import attention
from flashcheck.reference.backward import attention_backward
from flashcheck.structured import structured_inputs

TILE = 128  # the fused kernel's key tile (the dK/dV program's keys)
FUSED = FusedDq(queries=1, keys=1, block_k=TILE)  # every unbanded call fused: small shapes use it
DOT = {"bfloat16": "bf16", "float16": "fp16"}
KINDS = ("worst_case", "probabilistic")
D = 64


# ---- the substitution -------------------------------------------------------------------------------------------

def test_for_call_states_the_fused_dq_exactly_for_unbanded_calls_at_the_thresholds():
    """for_call gives dq_accumulation "blocked" over fused_dq.block_k keys, fused_dq spent, for an unbanded call with
    N_q >= queries and N_k >= keys, and nothing else changes; one query or key fewer, no query count, or any band
    (causal in each spelling, a window with a side) leaves the precision as it was (the dQ kernel's chain)."""
    p = Precision("bfloat16", "bf16", block_k_dq=64, fused_dq=FusedDq(queries=300, keys=400, block_k=TILE))
    want = dataclasses.replace(p, dq_accumulation="blocked", block_k_dq=TILE, fused_dq=None)
    for causal, window in ((False, None), (None, None), (np.False_, None), (False, (None, None))):
        got = p.for_call(causal, window, 400, 300)
        assert got == want, f"unbanded (causal={causal!r}, window={window!r}): {got}"
        assert (got.dq_accumulation, got.dq_key_tile, got.fused_dq) == ("blocked", TILE, None), got
    assert p.for_call(False, None, 10**6, 10**6) == want
    for what, call in (("one query fewer", p.for_call(False, None, 400, 299)),
                       ("one key fewer", p.for_call(False, None, 399, 300)),
                       ("no query count", p.for_call(False, None, 400))):
        assert call is p, f"{what}: {call}"
    for causal, window in ((True, None), ("top_left", None), ("bottom_right", None), (np.True_, None),
                           (False, (8, None)), (False, (None, 0)), (True, (16, 16))):
        assert is_band(causal, window)
        got = p.for_call(causal, window, 10**6, 10**6)
        assert got.dq_accumulation is None and got.dq_key_tile == 64, f"banded {causal!r}, {window!r}: {got}"


def test_for_call_combines_the_long_tile_and_the_fused_dq():
    """A call long enough for both: the long tile's forward and backward tiles (long_forward) and the fused dQ's sum
    over its own key tile; long but short of the fused thresholds, or banded: the long tile alone, the dQ kernel's
    key tile kept."""
    long = BandForward(block_k=128, block_q_fwd=128, rowsum_depth=None, block_q_dq=128, block_k_dkdv=128, block_q=128)
    p = Precision("bfloat16", "bf16", block_k=64, block_q=64, block_q_fwd=64, rowsum_depth=6, block_q_dq=64,
                  block_k_dkdv=64, block_k_dq=64, long_forward=long, long_keys=300,
                  fused_dq=FusedDq(queries=200, keys=400, block_k=TILE))
    both = p.for_call(False, None, 400, 200)
    assert (both.block_k, both.block_q_fwd, both.rowsum_depth, both.block_q_dq, both.block_k_dkdv, both.block_q) == (
        128, 128, None, 128, 128, 128), both
    assert (both.long_forward, both.long_keys, both.fused_dq) == (None, None, None), both
    assert (both.dq_accumulation, both.dq_key_tile) == ("blocked", TILE), both
    assert both == dataclasses.replace(p.for_call(False, None, 400, 199), dq_accumulation="blocked", block_k_dq=TILE,
                                       fused_dq=None)  # (199 queries: the long tile alone)
    for what, call in (("short of the fused keys", p.for_call(False, None, 399, 200)),
                       ("short of the fused queries", p.for_call(False, None, 400, 199)),
                       ("banded", p.for_call("bottom_right", None, 400, 200))):
        assert call.block_k == 128 and call.long_forward is None, f"{what}: not the long tile: {call}"
        assert (call.dq_accumulation, call.dq_key_tile) == (None, 64), f"{what}: {call}"


def test_for_call_states_the_fused_dq_only_for_its_value_dim():
    """A FusedDq with a value_dim (ours: the kernel fuses dv = d only) applies to calls of that V head dim; another
    dv, or none given, leaves the precision as it was (the dQ kernel's chain). Without one, any dv (or none)."""
    p = Precision("bfloat16", "bf16", block_k_dq=64, fused_dq=FusedDq(queries=300, keys=400, block_k=TILE,
                                                                      value_dim=64))
    want = dataclasses.replace(p, dq_accumulation="blocked", block_k_dq=TILE, fused_dq=None)
    assert p.for_call(False, None, 400, 300, 64) == want
    for dv in (32, 128, None):
        assert p.for_call(False, None, 400, 300, dv) is p, f"dv {dv}"
    any_dv = dataclasses.replace(p, fused_dq=FusedDq(queries=300, keys=400, block_k=TILE))
    for dv in (32, 64, None):
        assert any_dv.for_call(False, None, 400, 300, dv) == want, f"dv {dv}"


@pytest.mark.parametrize("field", ["queries", "keys", "block_k", "value_dim"])
def test_bad_fused_dq_values_are_refused_naming_the_field(field):
    good = dict(queries=8192, keys=8192, block_k=TILE)
    for bad in (0, -1, 128.0, True, "128") + ((None,) if field != "value_dim" else ()):
        with pytest.raises(ValueError, match=f"FusedDq.{field}"):
            FusedDq(**{**good, field: bad})
    if field == "value_dim":
        assert FusedDq(**good, value_dim=None).value_dim is None


def test_bad_dq_accumulation_and_fused_dq_are_refused_naming_the_field():
    for bad in ("tree", "Blocked", "", 1, True):
        with pytest.raises(ValueError, match="Precision.dq_accumulation"):
            Precision("bfloat16", "bf16", dq_accumulation=bad)
    for bad in ((1, 1, 128), {"queries": 1, "keys": 1, "block_k": 128}, BandForward(block_k=128)):
        with pytest.raises(ValueError, match="Precision.fused_dq"):
            Precision("bfloat16", "bf16", fused_dq=bad)
    for ok in (None, "recursive", "blocked"):
        assert Precision("bfloat16", "bf16", dq_accumulation=ok).dq_accumulation == ok


# ---- the model ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("nk", [1, 100, 128, 1000, 1024, 8192, 32768])
def test_dq_steps_of_the_fused_sum(nk):
    """A product of the fused sum passes at most ceil(128 / k_step) MMA steps of its tile's chain (ceil(N_k / k_step)
    when N_k < 128), then the T = ceil(N_k / 128) additions: 8 + T on bf16 / fp16 tensor cores (k_step 16), against
    the dQ kernel's T * 8 through every tile and the any-order tile sum's 128 + T; on CUDA cores (k_step 1) the
    chain is the tile's width. Only dQ's model changes (dq_accumulation None: the model itself)."""
    T, width = -(-nk // TILE), min(nk, TILE)
    for dtype, dot in (("bfloat16", "bf16"), ("float16", "fp16")):
        p = Precision(dtype, dot, block_k_dq=TILE, dq_accumulation="blocked")
        M = _model(p)
        M_dq = _dq_model(M, p)
        assert M.recursive and not M_dq.recursive and M.k_step == 16, (M, M_dq)
        assert dataclasses.replace(M_dq, recursive=True) == M  # nothing but the accumulation differs
        assert _dot_steps(M_dq, nk, TILE, tile_chain=True) == math.ceil(width / 16) + T, dtype
        assert _dot_steps(M_dq, nk, TILE) == width + T
        assert _dot_steps(M, nk, TILE) == T * math.ceil(width / 16)
        assert _dq_model(M, Precision(dtype, dot)) is M
    p32 = Precision("float32", "ieee", dq_accumulation="blocked")
    assert _dot_steps(_dq_model(_model(p32), p32), nk, TILE, tile_chain=True) == width + T


def test_the_blocked_steps_bound_every_order_of_the_tiles():
    """_blocked_tile_steps bounds, for the fused sum in ANY order of its tiles, the sum over its roundings of the exact
    value each rounds (what the step error u_dacc multiplies, to first order): each tile's MMA steps from zero (the
    step model's |acc| + the step's sum |p|), then every addition of a partial (the exact sum of the tiles added so
    far). Walked step by step for the descending order (the kernel's) and random ones, on products with and without
    cancellation; and never above the count _dot_steps(tile_chain=True) times sum |p|."""
    from flashcheck.proofs.bounds.backward import _blocked_tile_steps

    rng = np.random.default_rng(4)
    n, k = 1000, 16
    tiles = [(j0, min(n, j0 + TILE)) for j0 in range(0, n, TILE)]
    for S in (rng.standard_normal((1, 1, 3, n)), rng.random((1, 1, 3, n))):  # cancelling, one-signed
        K = rng.standard_normal((1, 1, n, 4))
        bound = _blocked_tile_steps(S, K, TILE, k)
        p = S[..., :, None, :] * np.swapaxes(K, -1, -2)[..., None, :, :]  # (1, 1, 3, 4, n)
        in_tiles = 0.0
        for j0, j1 in tiles:
            for s0 in range(j0, j1, k):
                in_tiles = in_tiles + np.abs(p[..., j0:s0].sum(-1)) + np.abs(p[..., s0:s0 + k]).sum(-1)
        orders = [tiles[::-1]] + [[tiles[i] for i in rng.permutation(len(tiles))] for _ in range(10)]
        for order in orders:
            walk, acc = in_tiles, 0.0
            for i, (j0, j1) in enumerate(order):
                acc = acc + p[..., j0:j1].sum(-1)
                if i:  # the first addition, into the zeroed accumulator, is exact
                    walk = walk + np.abs(acc)
            assert np.all(walk <= bound), f"order {order}: walked {np.max(walk / bound):.4g} x the bound"
        blocked = Precision("bfloat16", "bf16", dq_accumulation="blocked")
        count = _dot_steps(_dq_model(_model(blocked), blocked), n, TILE, tile_chain=True)
        assert np.all(bound <= count * (np.abs(S) @ np.abs(K)) * (1 + 1e-12)), "above the count"


def test_a_blocked_dq_is_charged_its_tile_steps_deterministically():
    """_dq_accumulation of a blocked dQ (tile_chain): on tensor cores the steps of _blocked_tile_steps as tc_steps
    (times u_dacc in _grad), on CUDA cores (probabilistic) u_dacc times them as acc_det with a zero random proxy (the
    per-product round-to-nearest chain model neither counts the tiles' additions nor caps them by a product), nothing
    for the worst case (its majorant reads the count)."""
    from flashcheck.proofs.bounds.backward import _blocked_tile_steps, _dq_accumulation

    rng = np.random.default_rng(3)
    dS, kf = rng.standard_normal((1, 2, 5, 300)), rng.standard_normal((1, 2, 300, 8))
    vis = np.ones(dS.shape, dtype=bool)
    for dtype, dot in (("float32", "ieee"), ("bfloat16", "bf16")):
        p = Precision(dtype, dot, dq_accumulation="blocked", block_k_dq=TILE)
        M = _dq_model(_model(p), p)
        steps = _blocked_tile_steps(dS, kf, TILE, M.k_step)
        got = _dq_accumulation(M, "probabilistic", dS, kf, 0.0 * dS, vis, TILE, tile_chain=True)
        if M.tensor_core:
            assert got[0] is None and got[1] is None and got[3] is None, got
            np.testing.assert_array_equal(got[2], steps)
            continue
        acc_sq, partial, tc_steps, acc_det = got
        assert partial is None and tc_steps is None and not acc_sq.any()
        np.testing.assert_array_equal(acc_det, M.u_dacc * steps)
        assert _dq_accumulation(M, "worst_case", dS, kf, 0.0 * dS, vis, TILE, tile_chain=True) == (None,) * 4


def _problem(nq=24, nk=300, d=16, seed=0, dtype="bfloat16"):
    g = np.random.default_rng(seed)
    return [round_to(g.standard_normal((1, 2, n, d)), dtype) for n in (nq, nk, nk, nq)]


def test_the_fused_precision_bounds_dq_as_the_blocked_sum_and_leaves_dk_dv():
    """The bounds read the field: an unbanded call under fused_dq is bounded as the precision that states the blocked
    dQ over 128-key tiles (bit for bit), its dK and dV are those of the dQ kernel's precision (bit for bit: only dQ's
    sum moved) and its dQ bound is not (the model changed: ignoring fused_dq would leave it equal); a banded call, or
    one with a dense mask (the fused kernel runs unmasked calls), is the dQ kernel's, bit for bit. lse_gradient_bound
    (the same dQ pass) likewise."""
    xs = _problem()
    kernel = Precision("bfloat16", "bf16", exp="libm", block_k_dq=64)
    fused = dataclasses.replace(kernel, fused_dq=FUSED)
    blocked = dataclasses.replace(kernel, dq_accumulation="blocked", block_k_dq=TILE)
    for kind in KINDS:
        f, b, k = (backward_bound(*xs, precision=p, kind=kind) for p in (fused, blocked, kernel))
        for name in ("dq", "dk", "dv"):
            np.testing.assert_array_equal(getattr(f, name), getattr(b, name), err_msg=f"{kind} {name}: vs blocked")
        for name in ("dk", "dv"):
            np.testing.assert_array_equal(getattr(f, name), getattr(k, name), err_msg=f"{kind} {name}: dK/dV moved")
        assert not np.array_equal(f.dq, k.dq), f"{kind}: the fused dQ's bound is the dQ kernel's: the field is unread"
        assert f.precision is fused  # the bound reports the precision it was given
        mask = np.random.default_rng(1).random((1, 2, 24, 300)) < 0.9
        for what, kw in (("causal", dict(causal=True)), ("dense mask", dict(mask=mask))):
            fc, kc = (backward_bound(*xs, precision=p, kind=kind, **kw) for p in (fused, kernel))
            for name in ("dq", "dk", "dv"):
                np.testing.assert_array_equal(getattr(fc, name), getattr(kc, name), err_msg=f"{kind} {name}: {what}")
        q, k_ = xs[:2]
        lf, lb, lk = (lse_gradient_bound(q, k_, precision=p, kind=kind) for p in (fused, blocked, kernel))
        np.testing.assert_array_equal(lf, lb, err_msg=f"{kind}: lse_gradient fused vs blocked")
        assert not np.array_equal(lf, lk), f"{kind}: lse_gradient_bound ignores fused_dq"
        for what, kw in (("causal", dict(causal=True)), ("dense mask", dict(mask=mask))):
            np.testing.assert_array_equal(lse_gradient_bound(q, k_, precision=fused, kind=kind, **kw),
                                          lse_gradient_bound(q, k_, precision=kernel, kind=kind, **kw), err_msg=what)


def test_a_fused_dq_for_one_value_dim_bounds_other_calls_as_the_dq_kernel():
    """Ours fuses dv = d only (FusedDq.value_dim): backward_bound reads V's head dim, lse_gradient_bound its `dv`
    argument (default q's d). A call with V of d columns is bounded as the blocked sum; with another dv, as the dQ
    kernel's chain, bit for bit."""
    q, k, v, do = _problem()
    d = q.shape[-1]
    kernel = Precision("bfloat16", "bf16", exp="libm", block_k_dq=64)
    fused = dataclasses.replace(kernel, fused_dq=dataclasses.replace(FUSED, value_dim=d))
    blocked = dataclasses.replace(kernel, dq_accumulation="blocked", block_k_dq=TILE)
    v8, do8 = v[..., :8], do[..., :8]
    for kind in KINDS:
        np.testing.assert_array_equal(backward_bound(q, k, v, do, precision=fused, kind=kind).dq,
                                      backward_bound(q, k, v, do, precision=blocked, kind=kind).dq, err_msg=kind)
        np.testing.assert_array_equal(backward_bound(q, k, v8, do8, precision=fused, kind=kind).dq,
                                      backward_bound(q, k, v8, do8, precision=kernel, kind=kind).dq, err_msg=kind)
        for dv, want in ((None, blocked), (d, blocked), (8, kernel)):
            np.testing.assert_array_equal(lse_gradient_bound(q, k, precision=fused, kind=kind, dv=dv),
                                          lse_gradient_bound(q, k, precision=want, kind=kind), err_msg=f"{kind} dv {dv}")
    for bad in (0, -3, 2.5, True, "64"):
        with pytest.raises(ValueError, match="dv"):
            lse_gradient_bound(q, k, precision=fused, dv=bad)


# ---- the emulation -----------------------------------------------------------------------------------------------

def test_the_emulated_fused_sum_adds_the_tiles_from_the_last():
    """fused_over_keys adds the tiles' partials last tile first, one fp32 rounding each, each partial its own chain
    from zero: partials (x, 1, -1), x = 1.5 2^-25, over a ragged last tile give x ((0 - 1) + 1 exact, then x), and
    the same partials in the other order (-1, 1, x) give 0 ((0 + x) + 1 rounds to 1: x is under half an ulp; then
    - 1): ascending tiles would give the opposite results."""
    nk, block, x = 40, 16, 1.5 * 2.0**-25  # tiles [0, 16), [16, 32), [32, 40)
    K = torch.ones((1, 1, nk, 1))
    mma = emulation._resolve_mma("h100", "bf16", None)
    for first, last, want in ((x, -1.0, x), (-1.0, x, 0.0)):
        S = torch.zeros((1, 1, 1, nk))
        S[..., 3], S[..., 20], S[..., 35] = first, 1.0, last
        for m in (None, mma):
            got = emulation.fused_over_keys(S, K, block, 16, m)
            assert got.dtype == torch.float32 and got.item() == want, (
                f"partials ({first}, 1, {last}), mma={m}: {got.item()!r}, want {want!r} (the last tile first)")


def test_the_emulated_fused_dq_runs_unbanded_calls_and_the_bands_the_kernel_takes_only():
    """As the kernel (kernels/attention.py _fused_band, precision.fused_band): unbanded calls, causal ones with N_k <=
    N_q and windows whose left side reaches key 0 from every row and whose right one the last key run; a left edge
    inside the problem, keys no row sees (top-left causal with N_k > N_q) or a mask are refused, and so is the rotated
    order under a band (the kernel's is descending there)."""
    for (nq, nk), kws in [((8, 40), (dict(causal=True), dict(window=(None, 3)))),
                          ((40, 24), (dict(window=(6, None)), dict(causal=True, window=(2, 0)),
                                      dict(mask=np.ones((1, 2, 40, 24), dtype=bool)),
                                      dict(causal=True, rotated=True)))]:
        q, k, v, do = _problem(nq=nq, nk=nk)
        o, lse = fa2_forward(q, k, v, dtype="bfloat16", dot="bf16")
        for kw in kws:
            with pytest.raises(ValueError, match="dq_accumulation|rotated"):
                fa2_backward(q, k, v, o, lse, do, dtype="bfloat16", dot="bf16", dq_accumulation="blocked", **kw)
    for kw in (dict(causal=True), dict(causal="bottom_right"), dict(window=(39, None)), dict(window=(None, 3))):
        fa2_backward(q, k, v, o, lse, do, dtype="bfloat16", dot="bf16", dq_accumulation="blocked", **kw)
    with pytest.raises(ValueError, match="dq_accumulation"):
        fa2_backward(q, k, v, o, lse, do, dtype="bfloat16", dot="bf16", dq_accumulation="tree")
    with pytest.raises(ValueError, match="mma"):
        fa2_backward(q, k, v, o, lse, do, dtype="bfloat16", dot="bf16", mma="a100")


def _tiny_gradient_case(ftz: bool):
    """bf16, dO ~ 2^-122 (tile partials around fp32's smallest normal), N_k = 1024 (T = 8): the inputs and the
    emulated fused dQ's error against the float64 reference, its adds flushing subnormals (ftz) or not."""
    rng = np.random.default_rng(0)
    q, k, v = (round_to(rng.standard_normal(s), "bfloat16") for s in ((1, 1, 16, D), (1, 1, 1024, D), (1, 1, 1024, D)))
    do = round_to(rng.standard_normal((1, 1, 16, D)) * 2.0**-122, "bfloat16")
    o, lse = fa2_forward(q, k, v, dtype="bfloat16", dot="bf16", mma="h100")
    dq = fa2_backward(q, k, v, o, lse, do, dtype="bfloat16", dot="bf16", dq_accumulation="blocked", block_k_dq=TILE,
                      mma="h100", dq_ftz=ftz)[0]
    O, L = attention(q, k, v)
    return (q, k, v, do), np.abs(dq - attention_backward(q, k, v, O, L, do)[0])


def test_the_measured_tma_add_is_round_to_nearest_without_flush():
    """The committed record (bench/probe_tma_add.py on the GPU: proofs/measurements/h100_tma_add.json) makes h100()'s
    tma_add "nearest", and the rule asks for a GPU record whose every addition was round to nearest: no record, no
    device, no runs, or one mismatch give "unknown"."""
    from flashcheck.proofs import hardware as hw

    assert hw.h100().tma_add == "nearest"
    good = hw.load_report(hw.H100_TMA_ADD_JSON)
    assert hw.tma_add_from(good) == "nearest" and all(r["pairs"] >= 4096 for r in good["runs"])
    bad_run = {**good["runs"][0], "mismatches": {**good["runs"][0]["mismatches"], "nearest": 1}}
    for bad in (None, {}, {**good, "device": ""}, {**good, "runs": []}, {**good, "runs": good["runs"] + [bad_run]}):
        assert hw.tma_add_from(bad) == "unknown", bad
    with pytest.raises(ValueError, match="HardwareConstants.tma_add"):
        dataclasses.replace(hw.h100(), tma_add="ftz")


def test_a_flushing_tile_sum_needs_the_flush_charge_where_the_add_is_not_measured(monkeypatch):
    """Where the TMA add is not measured (HardwareConstants.tma_add "unknown") the bound charges a flush of every
    operand and result, 3 T 2^-126 |scale| per dQ entry (precision._dq_tile_add_flush), as PTX documents for its fp32
    reduction adds. It is needed: on gradients near fp32's normal range the emulated sum with flushing adds
    (fused_over_keys' ftz) exceeds the bound without that charge (1.07 worst case, 1.16 probabilistic when written)
    and stays within it with the charge (0.14). The measured add ("nearest": no flush) gets no charge, and the
    emulated sum without flushes is within that bound."""
    from flashcheck.proofs import hardware as hw
    from flashcheck.proofs.bounds import backward as backward_module

    xs, err = _tiny_gradient_case(ftz=True)
    measured = _precision("bfloat16")
    assert measured.hardware.tma_add == "nearest"
    unknown = dataclasses.replace(measured, hardware=dataclasses.replace(hw.h100(), tma_add="unknown"))
    charged = {kind: backward_bound(*xs, precision=unknown, kind=kind).dq for kind in KINDS}
    _, err_rn = _tiny_gradient_case(ftz=False)
    for kind in KINDS:
        within = worst_ratio(err_rn, backward_bound(*xs, precision=measured, kind=kind).dq)
        assert within <= 1.0, f"{kind}: the sum without flushes is {within:.3f} of the measured add's bound"
    monkeypatch.setattr(backward_module, "_dq_tile_add_flush", lambda precision, nk: 0.0)
    for kind in KINDS:
        within = worst_ratio(err, charged[kind])
        assert within <= 1.0, f"{kind}: the flushing sum's worst error is {within:.3f} of the bound"
        without = worst_ratio(err, backward_bound(*xs, precision=unknown, kind=kind).dq)
        assert without > 1.0, f"{kind}: the bound without the flush charge holds too ({without:.3f}): no evidence"


def _inputs(family: str, dtype: str, nq: int, nk: int, hq: int, hkv: int, seed: int):
    """q, k, v, do rounded to dtype: "random" (N(0, 1)), "large_logits" (q scaled by 8: logits with std ~8, as
    proofs/tightness.py), or a family of flashcheck/structured.py."""
    rng = np.random.default_rng(seed)
    shapes = ((1, hq, nq, D), (1, hkv, nk, D), (1, hkv, nk, D), (1, hq, nq, D))
    if family in ("random", "large_logits"):
        xs = [rng.standard_normal(s) for s in shapes]
        if family == "large_logits":
            xs[0] = 8.0 * xs[0]
    else:
        u = structured_inputs(family, 1, hq, hkv, nq, nk, D, rng)
        xs = [u.q, u.k, u.v, u.do]
    return tuple(round_to(x, dtype) for x in xs)


# name: (family, N_q, N_k, query heads, kv heads); N_k 1000 and 1100 leave a ragged last tile (104, 76 keys)
CASES = {
    "random": ("random", 32, 1000, 1, 1),
    "uniform_rows": ("uniform_rows", 32, 640, 1, 1),
    "constant_v": ("constant_v", 32, 512, 1, 1),  # dP - Delta = 0: the exact dQ is 0, the emulation's too
    "near_constant_v": ("near_constant_v", 32, 640, 1, 1),
    "rising_logits": ("rising_logits", 32, 1000, 1, 1),
    "large_logits": ("large_logits", 48, 768, 1, 1),
}
GQA_CASE = ("random", 32, 1100, 2, 1)


def _precision(dtype: str) -> Precision:
    """The emulation's arithmetic (libm exp: torch's exp2; the H100's tensor-core step model) with every unbanded call
    fused."""
    return Precision(dtype, DOT[dtype], exp="libm", fused_dq=FUSED)


@functools.lru_cache(maxsize=None)
def _case(family: str, nq: int, nk: int, hq: int, hkv: int, dtype: str, seed: int = 1):
    """(inputs, the emulated forward's (O, LSE), the emulation's fused dQ, the float64 reference's dQ, {kind: the
    bound on dQ}) of one case."""
    xs = _inputs(family, dtype, nq, nk, hq, hkv, seed)
    q, k, v, do = xs
    o, lse = fa2_forward(q, k, v, dtype=dtype, dot=DOT[dtype], mma="h100")
    dq = fa2_backward(q, k, v, o, lse, do, dtype=dtype, dot=DOT[dtype], dq_accumulation="blocked", block_k_dq=TILE,
                      mma="h100")[0]
    O, L = attention(q, k, v)
    exact = attention_backward(q, k, v, O, L, do)[0]
    bounds = {kind: backward_bound(*xs, precision=_precision(dtype), kind=kind).dq for kind in KINDS}
    return xs, (o, lse), dq, exact, bounds


def _ratios(dq, exact, bounds) -> dict:
    return {kind: worst_ratio(np.abs(dq - exact), b) for kind, b in bounds.items()}


@pytest.mark.parametrize("dtype,case", [(t, c) for t in ("bfloat16", "float16") for c in CASES]
                         + [("bfloat16", "gqa2")])
def test_the_emulated_fused_dq_is_within_both_bounds(dtype, case):
    """The emulated fused dQ (128-key tiles, MMA chains from zero in the H100's step model, descending fp32 adds) stays
    within the worst-case and the probabilistic dQ bound of the fused precision, against the float64 reference of the
    same rounded inputs, on random and structured inputs (N_k ragged at 1000 and 1100; GQA 2 once, bf16)."""
    spec = GQA_CASE if case == "gqa2" else CASES[case]
    _, _, dq, exact, bounds = _case(*spec, dtype)
    r = _ratios(dq, exact, bounds)
    assert all(x <= 1.0 for x in r.values()), (
        f"{dtype} {case} (N_q, N_k = {spec[1]}, {spec[2]}): the fused dQ's error exceeds its bound: error / bound "
        + ", ".join(f"{kind} {x:.3g}" for kind, x in r.items()))


def test_the_emulated_blocked_dq_on_cuda_cores_is_within_both_bounds():
    """The same sum on CUDA cores (fp32 ieee: each tile's partial one fp32 FMA chain from zero, k_step 1) within the
    bounds of the fused precision, whose round-to-nearest steps are charged worst case (test above), on random and
    uniform rows (N_k 1000, ragged)."""
    for family in ("random", "uniform_rows"):
        xs = _inputs(family, "float32", 32, 1000, 1, 1, seed=2)
        q, k, v, do = xs
        o, lse = fa2_forward(q, k, v, dtype="float32", dot="ieee")
        dq = fa2_backward(q, k, v, o, lse, do, dtype="float32", dot="ieee", dq_accumulation="blocked",
                          block_k_dq=TILE)[0]
        O, L = attention(q, k, v)
        exact = attention_backward(q, k, v, O, L, do)[0]
        pr = Precision("float32", "ieee", exp="libm", fused_dq=FUSED)
        r = _ratios(dq, exact, {kind: backward_bound(*xs, precision=pr, kind=kind).dq for kind in KINDS})
        assert all(x <= 1.0 for x in r.values()), (
            f"fp32 ieee {family}: the blocked dQ's error exceeds its bound: worst error / bound "
            + ", ".join(f"{kind} {x:.3g}" for kind, x in r.items()))


# ---- planted bugs: the property can fail -------------------------------------------------------------------------

def _buggy_sum(bug: str):
    """fused_over_keys with one planted bug: "dropped" (the second tile added, key tiles 1..., loses its partial),
    "twice" (that partial added twice), "scale_twice" (the sum scaled here too: fa2_backward scales it again),
    "bf16_partials" (each partial rounded to bfloat16 before its add: staged through a bf16 buffer)."""
    def fused(S, K, block, k_step=1, mma=None, ftz=False, rotated_rows=None, band_rows=None,
              visible=None):  # unbanded, descending here: ftz, rotated_rows, band_rows, visible unused
        n = S.shape[-1]
        acc = torch.zeros(S.shape[:-1] + (K.shape[-1],), dtype=S.dtype)
        for i, j0 in enumerate(reversed(range(0, n, block))):
            t = emulation._dot_acc(S[..., j0:j0 + block], K[..., j0:j0 + block, :], torch.zeros_like(acc),
                                   "recursive", k_step, mma)
            if bug == "bf16_partials":
                t = t.to(torch.bfloat16).to(S.dtype)
            if not (bug == "dropped" and i == 1):
                acc = acc + t
            if bug == "twice" and i == 1:
                acc = acc + t
        return acc * torch.tensor(1 / math.sqrt(D), dtype=S.dtype) if bug == "scale_twice" else acc
    return fused


@pytest.mark.parametrize("bug", ["dropped", "twice", "scale_twice", "bf16_partials"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_planted_bug_in_the_fused_sum_exceeds_the_bound(dtype, bug, monkeypatch):
    """The property above can fail: the same inputs (uniform rows, N_k 640: 5 tiles) through a fused sum with one
    planted bug exceed the probabilistic dQ bound, a key tile's partial dropped or added twice and the scale applied
    twice by orders of magnitude, the partials staged in bf16 (a realistic slip: the reduce-add from a bf16 buffer)
    within a factor of a few; the correct sum stays within (test above)."""
    spec = CASES["uniform_rows"]
    xs, (o, lse), _, exact, bounds = _case(*spec, dtype)
    q, k, v, do = xs
    monkeypatch.setattr(emulation, "fused_over_keys", _buggy_sum(bug))
    dq = fa2_backward(q, k, v, o, lse, do, dtype=dtype, dot=DOT[dtype], dq_accumulation="blocked", block_k_dq=TILE,
                      mma="h100")[0]
    r = _ratios(dq, exact, bounds)
    assert r["probabilistic"] > 1.0, (
        f"{dtype} planted bug {bug!r} went unnoticed: worst error / bound "
        + ", ".join(f"{kind} {x:.3g}" for kind, x in r.items()))


# ---- the rotated order (kernels/gluon_bwd_fused.py where a head's key tiles all fit on the GPU) -------------------

@pytest.mark.parametrize("family", ["random", "large_logits"])
def test_the_emulated_rotated_backward_is_within_both_bounds(family):
    """The fused backward in its rotated order (each 128-key block's full query tiles from its rank on, dQ's partials
    added by (step, rank): fa2_backward(rotated=True)) within the worst-case and probabilistic bounds of the precision
    that states it (Precision.dkdv_rotated via FusedDq.rotate_keys: the dK/dV chains in that order), dQ, dK and dV,
    bf16, N_q = 300 (two full query tiles and a ragged one), N_k = 600 (five key blocks)."""
    import dataclasses

    xs = _inputs(family, "bfloat16", 300, 600, 1, 1, 3)
    q, k, v, do = xs
    o, lse = fa2_forward(q, k, v, dtype="bfloat16", dot="bf16", mma="h100")
    got = fa2_backward(q, k, v, o, lse, do, dtype="bfloat16", dot="bf16", dq_accumulation="blocked", block_k_dq=TILE,
                       block_q=TILE, block_k_dkdv=TILE, block_q_dq=TILE, mma="h100", rotated=True)
    plain = fa2_backward(q, k, v, o, lse, do, dtype="bfloat16", dot="bf16", dq_accumulation="blocked",
                         block_k_dq=TILE, block_q=TILE, block_k_dkdv=TILE, block_q_dq=TILE, mma="h100")
    assert not all(np.array_equal(a, b) for a, b in zip(got[1:], plain[1:])), (
        "the rotation changed no dK or dV bit: the case does not exercise it")
    O, L = attention(q, k, v)
    exact = attention_backward(q, k, v, O, L, do)
    pr = Precision("bfloat16", "bf16", exp="libm", block_q=TILE, block_k_dkdv=TILE, block_q_dq=TILE,
                   fused_dq=dataclasses.replace(FUSED, rotate_keys=600))
    assert pr.for_call(False, None, 600, 300).dkdv_rotated
    for kind in KINDS:
        b = backward_bound(*xs, precision=pr, kind=kind)
        for name, x, want, bound in zip(("dQ", "dK", "dV"), got, exact, (b.dq, b.dk, b.dv)):
            r = worst_ratio(np.abs(x - want), bound)
            assert r <= 1.0, f"{family} {kind}: rotated {name}'s error / bound {r:.3g}"


# ---- banded calls (causal: a band without a left edge; kernels/gluon_bwd_fused.py in the descending order) --------

@pytest.mark.parametrize("causal", [True, "bottom_right"])
def test_the_emulated_banded_fused_backward_is_within_both_bounds(causal):
    """The fused backward under a causal band (each query tile of 128 rows takes the partials of the key tiles that see
    it, from the last down, the first stored; dK, dV in the dK/dV kernel's order: fa2_backward with the band) within
    the worst-case and probabilistic bounds of the precision that states it (FusedDq.band_keys), dQ, dK and dV, bf16,
    large logits, N_q = 400 (a ragged query tile), N_k = 300 (bottom-right: the first 100 rows see no key, their
    query tile none of the key tiles: dQ exactly 0 there)."""
    import dataclasses

    xs = _inputs("large_logits", "bfloat16", 400, 300, 1, 1, 4)
    q, k, v, do = xs
    o, lse = fa2_forward(q, k, v, dtype="bfloat16", dot="bf16", mma="h100", causal=causal)
    got = fa2_backward(q, k, v, o, lse, do, dtype="bfloat16", dot="bf16", dq_accumulation="blocked", block_k_dq=TILE,
                       block_q=TILE, block_k_dkdv=TILE, block_q_dq=TILE, mma="h100", causal=causal)
    two = fa2_backward(q, k, v, o, lse, do, dtype="bfloat16", dot="bf16", block_k_dq=TILE, block_q=TILE,
                       block_k_dkdv=TILE, block_q_dq=TILE, mma="h100", causal=causal)
    assert all(np.array_equal(a, b) for a, b in zip(got[1:], two[1:])), "dK, dV are not the dK/dV kernel's"
    if causal == "bottom_right":
        assert not np.any(got[0][..., :100, :]), "rows that see no key: dQ not 0"
    O, L = attention(q, k, v, causal=causal)
    exact = attention_backward(q, k, v, O, L, do, causal=causal)
    pr = Precision("bfloat16", "bf16", exp="libm", block_q=TILE, block_k_dkdv=TILE, block_q_dq=TILE,
                   fused_dq=dataclasses.replace(FUSED, band_keys=1))
    assert pr.for_call(causal, None, 300, 400).dq_accumulation == "blocked"
    for kind in KINDS:
        b = backward_bound(*xs, precision=pr, kind=kind, causal=causal)
        for name, x, want, bound in zip(("dQ", "dK", "dV"), got, exact, (b.dq, b.dk, b.dv)):
            r = worst_ratio(np.abs(x - want), bound)
            assert r <= 1.0, f"{causal} {kind}: banded fused {name}'s error / bound {r:.3g}"


def test_the_emulated_banded_fused_sum_adds_only_the_key_tiles_that_see_a_query_tile():
    """fused_over_keys under a band takes a query tile's partials from the key tiles with a visible entry in it only
    (the kernel's key tiles visit no other query tile): entries of S where `visible` says no key tile sees the query
    tile leave no trace, a query tile none sees keeps its zeros. Query tiles of 2 rows, key tiles of 2 keys (4 x 4),
    S all ones (the caller's dS is zero where invisible; ones here show what is read), K = 1, 2, 4, 8."""
    S = torch.ones((1, 1, 4, 4))
    K = torch.tensor([1.0, 2.0, 4.0, 8.0]).reshape(1, 1, 4, 1)
    causal = torch.tril(torch.ones(4, 4, dtype=torch.bool))  # query tile 0 sees key tile 0; tile 1 both
    got = emulation.fused_over_keys(S, K, 2, band_rows=2, visible=causal)[..., 0]
    assert got.tolist() == [[[3.0, 3.0, 15.0, 15.0]]], got
    none = torch.zeros(4, 4, dtype=torch.bool)
    assert not emulation.fused_over_keys(S, K, 2, band_rows=2, visible=none).any()
    assert emulation.fused_over_keys(S, K, 2)[..., 0].tolist() == [[[15.0] * 4]]  # unbanded: every tile

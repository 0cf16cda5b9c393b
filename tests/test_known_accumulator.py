"""The forward's accumulator as a known number (proofs/bounds/forward.py _known_accumulator, bounds.md sec. 8 "Delta from
the known accumulator"): with every P~ and alpha known (Precision.ex2_known), the kernel's fp32 acc at the end of the
key loop is evaluated exactly (the rescale's mul.f32, then one ascending FMA chain per tile); the emulated kernel's fp32
O is RN(acc / l32) for one fp32 l32 of l's interval on every column of a row, a chain that skips the
rescale's rounding does not (the check can fail), and Delta's bound built on it holds and sharpens dK (dQ keeps the
modelled Delta: its accumulation model needs that slack against coherent residues)."""
from __future__ import annotations

from unittest import mock

import numpy as np
import pytest

from tests.test_bwd_p_known import PR, _case, assert_gradient_bounds_hold


def _unmatched(q, k, v, o32):
    """Claimed rows where no single fp32 l32 of l's interval gives the emulated fp32 O = RN32(acc / l32) on every
    column (the emulation's division rounds correctly; the kernel's div.full is within eps_div of it)."""
    from flashcheck.proofs.bounds import Precision
    from flashcheck.proofs.bounds.forward import _forward

    F = _forward(q, k, v, None, False, None, None, None, Precision("float32", "ieee", **PR), "probabilistic", eta=1e-3)
    acc, l_lo, l_hi, ok = F.parts.acc_known
    l32 = np.where(ok, l_lo, 1.0).astype(np.float32)
    top = np.where(ok, l_hi, 1.0).astype(np.float32)
    matched = np.zeros(ok.shape, dtype=bool)
    for _ in range(64):
        o = (acc / l32.astype(np.float64)[..., None]).astype(np.float32).astype(np.float64)
        matched |= (o == o32).all(-1)
        if not (l32 < top).any():
            break
        l32 = np.where(l32 < top, np.nextafter(l32, np.float32(np.inf)), l32)
    return ok, ok & ~matched


@pytest.mark.parametrize("family", ["random", "rising_logits", "near_constant_v", "v_large_mean"])
def test_emulated_o_is_the_known_accumulator_over_l(family):
    q, k, v, _, _, _, o32 = _case(family)
    ok, bad = _unmatched(q, k, v, o32)
    assert ok.mean() > 0.9, f"{family}: only {ok.mean():.2f} of the rows claimed"
    assert not bad.any(), f"{family}: {bad.sum()} rows of O unmatched, first {np.argwhere(bad)[0].tolist()}"


def test_accumulator_without_the_rescale_rounding_is_caught():
    """The same check with acc * alpha kept unrounded (a chain model one rounding short) fails on some rows."""
    from flashcheck.proofs.bounds import forward as fwd

    q, k, v, _, _, _, o32 = _case("random", Nk=1000)  # the running max moves in the first tiles: alpha != 1

    def unrounded(ka, order, vf):
        from flashcheck.proofs import ex2_model

        p, vo, alpha = ka.px, fwd._keys_in_order(vf, order), ex2_model.ex2(ka.a)
        acc = np.zeros(p.shape[:-1] + (vo.shape[-1],))
        for t, (j0, w) in enumerate(zip(order.starts, order.sizes)):
            acc = _chain_unrounded(p[..., j0:j0 + w], vo[..., j0:j0 + w, :], acc * alpha[..., t, None])
        return acc, np.ones(p.shape[:-1], dtype=bool)

    with mock.patch.object(fwd, "_known_accumulator", unrounded):
        _, bad = _unmatched(q, k, v, o32)
    assert bad.sum() > 0, "the accumulator without the rescale's rounding went unnoticed"


def _chain_unrounded(p, v, acc):
    """The FMA chain from an accumulator that is not an fp32 number (acc * alpha unrounded): each step rounds."""
    from flashcheck.proofs.fma_chain import fma_step

    for j in range(p.shape[-1]):
        acc = fma_step(acc, p[..., j, None] * v[..., j, None, :])
    return acc


@pytest.mark.parametrize("family", ["random", "uniform_rows", "repeated_keys", "v_large_mean", "rising_logits",
                                    "constant_v"])
def test_gradient_bounds_with_delta_from_the_accumulator_hold(family):
    """dQ, dK, dV hold against the emulation; on random rows dK's bound is sharper than with Delta's error modelled
    (the accumulator not read; dQ keeps the modelled Delta, test_dq_keeps_the_modelled_delta_against_coherent_residues)."""
    from flashcheck.proofs.bounds import Precision, backward_bound
    from flashcheck.proofs.bounds import backward as bw

    q, k, v, do, bb = assert_gradient_bounds_hold(family)
    if family == "random":
        with mock.patch.object(bw, "_delta_from_accumulator",
                               lambda F, M, dof, vf, ak, fmt: (np.full(ak[3].shape, np.inf),) * 4):
            before = backward_bound(q, k, v, do, precision=Precision("float32", "ieee", **PR))
        ratio = np.median(bb.dk / before.dk)
        assert ratio < 0.9, f"dK bound ratio with/without {ratio:.3f}"


@pytest.mark.parametrize("cancel", [False, True])
def test_dq_with_the_accumulators_delta_holds_against_coherent_residues(cancel):
    """bench/adversaries/constant_residue_dq.py with every claim on (the emulation of our fp32 ieee kernel): dQ's
    grouped round-to-nearest accumulation model over the keys was exceeded 7x by coherent residues once Delta's bound
    was the accumulator's (bench/NOTES.md "The backward's P and Delta known"); the chain is now evaluated on the data
    (backward._rn_chain_on_data, per candidate of the stored LSE): 0.99 of the bound, with the accumulator's Delta."""
    import os
    import sys

    from flashcheck.proofs.bounds import Precision, backward_bound
    from flashcheck.proofs.emulation import fa2_backward, fa2_forward
    from flashcheck.reference.attention import attention
    from flashcheck.reference.backward import attention_backward

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench", "adversaries"))
    from constant_residue_dq import build

    q, k, v, do = build(4096, 16, 5000, cancel)
    o, lse, o32 = fa2_forward(q, k, v, dtype="float32", dot="ieee", l_accumulate="float64", ieee_fma_chain=True,
                              rowsum="tree", block_k=64, ex2="h100", lg2="h100", return_fp32_o=True)
    got = fa2_backward(q, k, v, o, lse, do, dtype="float32", dot="ieee", delta_o=o32, ieee_fma_chain=True,
                       block_k_dq=64, ex2="h100")[0]
    O, L = attention(q, k, v)
    dq = attention_backward(q, k, v, O, L, do)[0]
    b = backward_bound(q, k, v, do, precision=Precision("float32", "ieee", **PR)).dq
    err = np.abs(got - dq)
    assert np.all(err <= b), f"dQ over its bound, max error/bound {np.max(err / b):.3g} at {np.argmax(err / b)}"

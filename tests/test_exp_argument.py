"""The exponent arguments known (issue 8, Precision.exp_argument "fma", bounds.md sec. 6b):

- the claim is gated: validated in Precision, only together with ieee_fma_chain;
- the emulation computes the compiled forms: x = fl32(qk c - m) in ONE rounding on full tiles (checked against an
  exact rational reference), fl32(s2 - m) on the masked tile;
- the bound's known arguments (forward._known_arguments) are bit for bit the emulation's: every x_j, every running
  max m2_t, every rescale argument a_t, on random and structured inputs with a ragged tile, whole tiles and one
  narrow tile; planted errors (the masked tile's argument computed as if fused, the rescale argument's rounding
  dropped) make them differ;
- the bound that uses them holds against the emulation (random, structured families, the cancelling and lost-terms
  logits; forward and backward), is sharper than without the claim on random inputs, and a planted error in the
  signed exponent error (half the signs flipped) makes it exceeded;
- every set-up but the claim's probabilistic unmasked rows is bit for bit unchanged (bench/bounds_fingerprint.py).
"""
from __future__ import annotations

import math
from fractions import Fraction
from unittest import mock

import numpy as np
import pytest

from flashcheck.proofs.bounds import Precision, backward_bound, forward_bound
from flashcheck.proofs.bounds import forward as fwd
from flashcheck.proofs.bounds.precision import _model
from flashcheck.proofs.emulation import _fused_argument, fa2_backward, fa2_forward, round_to
from flashcheck.reference.attention import attention
from flashcheck.reference.backward import attention_backward
from flashcheck.structured import FAMILIES, structured_inputs
from tests.test_fma_logits import _cancelling, _lost_terms, _rn32

BLOCK = 16


def _precision(claim=True, block_k=BLOCK, **kw):
    return Precision("float32", "ieee", exp="libm", l_accumulate="float64", delta_from="fp32", block_k=block_k,
                     ieee_fma_chain=True, exp_argument="fma" if claim else "unknown", **kw)


def _inputs(family, seed, Nq=8, Nk=40, d=16):
    rng = np.random.default_rng(seed)
    if family == "random":
        xs = [rng.standard_normal(s) for s in ((1, 2, Nq, d), (1, 2, Nk, d), (1, 2, Nk, d), (1, 2, Nq, d))]
    else:
        x = structured_inputs(family, 1, 2, 2, Nq, Nk, d, rng)
        xs = [x.q, x.k, x.v, x.do]
    return [round_to(a, "float32") for a in xs]


def _rising(seed, Nq=4, Nk=64, d=16):
    """Logits rising from ~0.01 to ~40 across the keys (whole tiles: no ragged tile visited first): the running max
    moves across binades at every tile, so the rescale arguments m2_{t-1} - m2_t round in fp32."""
    rng = np.random.default_rng(seed)
    q = np.abs(rng.standard_normal((1, 1, Nq, d))) + 0.5
    k = np.geomspace(0.002, 8.0, Nk)[None, None, :, None] * (1 + 0.1 * rng.standard_normal((1, 1, Nk, d)))
    v, do = rng.standard_normal((1, 1, Nk, d)), rng.standard_normal((1, 1, Nq, d))
    return [round_to(x, "float32") for x in (q, k, v, do)]


# ---- the gate --------------------------------------------------------------------------------------

def test_precision_validates_exp_argument():
    assert _precision().exp_argument == "fma"
    with pytest.raises(ValueError, match="ieee_fma_chain"):
        Precision("float32", "ieee", exp_argument="fma")
    with pytest.raises(ValueError, match="exp_argument"):
        Precision("float32", "ieee", ieee_fma_chain=True, exp_argument="fused")
    assert Precision("float16", "fp16").exp_argument == "unknown"


# ---- the emulation's fused argument ------------------------------------------------------------------

def test_fused_argument_rounds_once():
    """fl32(qk c - m) against the exact rational value rounded once, on random values and on near-ties (qk c - m
    within a few float64 ulps of an fp32 midpoint, where a rounded product then a rounded subtraction differ)."""
    import torch

    rng = np.random.default_rng(0)
    c = float(np.float32(0.125 * 1.4426950408889634))
    qk = np.float32(rng.standard_normal((4, 64)) * 8).astype(np.float64)
    m = np.float32(rng.standard_normal(4) * 8).astype(np.float64)
    got = _fused_argument(torch.tensor(qk, dtype=torch.float32), torch.tensor(c, dtype=torch.float32),
                          torch.tensor(m, dtype=torch.float32)).double().numpy()
    bad = [(i, j) for i in range(4) for j in range(64)
           if got[i, j] != _rn32(Fraction(qk[i, j]) * Fraction(c) - Fraction(m[i]))]
    assert not bad, f"{len(bad)} of 256 fused arguments differ from one rounding, first at {bad[0]}"
    two = [(i, j) for i in range(4) for j in range(64)
           if _rn32(Fraction(_rn32(Fraction(qk[i, j]) * Fraction(c))) - Fraction(m[i])) != got[i, j]]
    assert two, "no input where the two forms differ: the test cannot tell them apart"


# ---- the bound's known arguments against the emulation -----------------------------------------------

def _mismatches(xs, block_k=BLOCK, known=None):
    """(x, m2, a) entries where forward._known_arguments differs from what the emulation computed, and the count of
    rescale arguments that rounded (a_t != m2_{t-1} - m2_t)."""
    q, k, v, _ = xs
    trace = []
    fa2_forward(q, k, v, dtype="float32", dot="ieee", l_accumulate="float64", ieee_fma_chain=True, block_k=block_k,
                trace=trace)
    Nk, d = k.shape[-2], k.shape[-1]
    pr = _precision(block_k=block_k)
    order = fwd._tile_order(Nk, min(block_k, Nk), pr.tile_order)
    sc = 1.0 / math.sqrt(d)
    s = sc * (q @ np.swapaxes(k, -1, -2))
    ka = (known or fwd._known_arguments)(q, k, s, sc, order, (Nk // block_k) * block_k, _model(pr))
    assert ka.ok.all(), "the known arguments must cover these rows"
    x = np.concatenate([t[2] for t in trace], axis=-1)
    m2 = np.stack([t[4] for t in trace], axis=-1)
    a = np.stack([t[3] for t in trace], axis=-1)[..., 1:]
    rounded = int((ka.a[..., 1:] != ka.m2[..., :-1] - ka.m2[..., 1:]).sum())
    return {"x": int((ka.x != x).sum()), "m2": int((ka.m2 != m2).sum()), "a": int((ka.a[..., 1:] != a).sum())}, rounded


CASES = [("random", 0, 40), ("random", 1, 64), ("random", 2, 9)] + [(f, 0, 40) for f in FAMILIES]


@pytest.mark.parametrize("family,seed,Nk", CASES)
def test_known_arguments_are_the_emulated_ones(family, seed, Nk):
    diff, _ = _mismatches(_inputs(family, seed, Nk=Nk))
    assert not any(diff.values()), f"{family} seed {seed} N_k {Nk}: known arguments differ from the emulation: {diff}"


def test_known_arguments_on_rounded_rescales():
    diff, rounded = _mismatches(_rising(0))
    assert rounded > 0, "no rescale argument rounded: the input does not test a_t's rounding"
    assert not any(diff.values()), f"rising logits: known arguments differ from the emulation: {diff}"


def _fused_masked_tile(orig):
    def f(qf, kf, s, sc, order, ragged_from, M):
        return orig(qf, kf, s, sc, order, s.shape[-1], M)  # no masked tile: its arguments as if fused
    return f


def _unrounded_alpha(m2):
    return np.concatenate([np.zeros_like(m2[..., :1]), m2[..., :-1] - m2[..., 1:]], axis=-1)


def test_planted_fused_masked_tile_is_caught():
    diffs = [_mismatches(_inputs("random", s, Nk=40), known=_fused_masked_tile(fwd._known_arguments))[0]["x"]
             for s in (0, 1)]
    assert sum(diffs) > 0, f"the masked tile computed as if fused went unnoticed: {diffs}"


def test_planted_unrounded_rescale_argument_is_caught():
    with mock.patch.object(fwd, "_alpha_arguments", _unrounded_alpha):
        diff, rounded = _mismatches(_rising(0))
    assert diff["a"] > 0, f"the rescale argument's rounding dropped went unnoticed ({rounded} rounded): {diff}"


# ---- the bound with the claim ------------------------------------------------------------------------

def _overs(xs, claim=True, backward=False, block_k=BLOCK):
    q, k, v, do = xs
    o, lse, o32 = fa2_forward(q, k, v, dtype="float32", dot="ieee", l_accumulate="float64", return_fp32_o=True,
                              ieee_fma_chain=True, block_k=block_k)
    O, L = attention(q, k, v)
    got, exact = [o, lse], [O, L]
    pr = _precision(claim, block_k=block_k)
    fb = forward_bound(q, k, v, precision=pr)
    bounds = [fb.o, fb.lse]
    if backward:
        got += list(fa2_backward(q, k, v, o, lse, do, dtype="float32", dot="ieee", delta_o=o32, ieee_fma_chain=True,
                                 block_k_dq=block_k))  # the dQ key tiles pr states (block_k_dq None: block_k)
        exact += list(attention_backward(q, k, v, O, L, do))
        bb = backward_bound(q, k, v, do, precision=pr)
        bounds += [bb.dq, bb.dk, bb.dv]
    names = ("O", "LSE", "dQ", "dK", "dV")
    err = [np.abs(g - e) for g, e in zip(got, exact)]
    over = {n: int((e > b).sum()) for n, e, b in zip(names, err, bounds)}
    ratio = {n: float(np.min(np.where(e > 0, b / np.where(e > 0, e, 1.0), np.inf))) for n, e, b in zip(names, err, bounds)}
    return over, ratio


@pytest.mark.parametrize("family", ["random"] + list(FAMILIES))
@pytest.mark.parametrize("seed", [0, 1])
def test_bound_holds_with_known_arguments(family, seed):
    over, ratio = _overs(_inputs(family, seed, Nk=100))
    assert not any(over.values()), f"{family} seed {seed}: over the bound {over} (min bound/observed {ratio})"


@pytest.mark.parametrize("make", [_cancelling, _lost_terms, _rising])
def test_bound_holds_on_adversarial_logits(make):
    over, ratio = _overs(make(0), backward=True)
    assert not any(over.values()), f"{make.__name__}: over the bound {over} (min bound/observed {ratio})"


def test_known_arguments_sharpen_o_on_random_inputs():
    q, k, v, _ = _inputs("random", 0, Nq=16, Nk=512, d=64)
    b = [forward_bound(q, k, v, precision=_precision(c, block_k=64)).o for c in (False, True)]
    assert np.all(b[1] > 0) and np.median(b[1] / b[0]) < 0.7, f"median ratio {np.median(b[1] / b[0]):.3f}"


def test_nothing_claimed_under_a_dense_mask_a_band_or_a_window():
    """With a dense mask (even all True), a band or a window the kernel may put any tile through tl.where (per query
    block): the claim's bound is bit for bit the one without it."""
    q, k, v, _ = _inputs("random", 0, Nq=4, Nk=40)
    for kw in (dict(mask=np.ones((1, 2, 4, 40), dtype=bool)), dict(causal=True), dict(window=(40, 40))):
        b = [forward_bound(q, k, v, precision=_precision(c), **kw) for c in (False, True)]
        for name in ("o", "lse"):
            assert np.array_equal(getattr(b[0], name), getattr(b[1], name)), f"{kw}: {name} differs with the claim"


def test_planted_sign_error_in_the_known_exponent_error_is_caught():
    orig = fwd._known_arguments

    def half_signs(*args):
        ka = orig(*args)
        flip = np.where(np.arange(ka.e.shape[-1]) % 2 == 0, 1.0, -1.0)
        return fwd.dataclasses.replace(ka, e=ka.e * flip)

    with mock.patch.object(fwd, "_known_arguments", half_signs):
        over, ratio = _overs(_cancelling(0))
    assert over["O"] > 0, f"half the exponent errors' signs flipped went unnoticed: {over}, {ratio}"

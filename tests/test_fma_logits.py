"""The known fp32 FMA-chain logits (issue 8, Precision.ieee_fma_chain):

- flashcheck.proofs.fma_chain emulates an fp32 FMA chain bit for bit: checked against an exact rational reference
  (fractions) on random operands over wide exponents, sums that land on fp32 midpoints, and the double-rounding
  trap (float64 rounds the exact sum onto a midpoint that fp32 then breaks the wrong way);
- the claim is gated: validated in Precision, never made for the interpreter, made for our kernel on the GPU only
  where proofs/hardware.py records the probe's measurement;
- the bound that uses it holds against the emulation of the arithmetic it states, including an input whose dot
  roundings are all one-signed (the random model of the dot fails there), and planted bugs in the known error
  (dropped, the wrong order, half the signs flipped) make it exceeded.
"""
from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from unittest import mock

import numpy as np
import pytest

from flashcheck.proofs import hardware as hw
from flashcheck.proofs.bounds import Precision, backward_bound, forward_bound
from flashcheck.proofs.bounds import logits as lgmod
from flashcheck.proofs.emulation import fa2_backward, fa2_forward, round_to
from flashcheck.proofs.fma_chain import fma_chain_dot, fma_step, kernel_qk_scale2, round_fp32
from flashcheck.reference.attention import attention
from flashcheck.reference.backward import attention_backward


# ---- the emulation against an exact reference ----------------------------------------------------

def _rn32(x: Fraction) -> float:
    """x rounded to the nearest fp32 (ties to even), exactly; gradual underflow, no overflow handling."""
    if x == 0:
        return 0.0
    sign, a = (-1, -x) if x < 0 else (1, x)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    quantum = Fraction(2) ** (max(e, -126) - 23)
    n = a / quantum
    f = n.numerator // n.denominator
    r = n - f
    if r > Fraction(1, 2) or (r == Fraction(1, 2) and f % 2 == 1):
        f += 1
    return sign * float(f * quantum)


def _chain_exact(a, b) -> float:
    acc = 0.0
    for x, y in zip(a, b):
        acc = _rn32(Fraction(acc) + Fraction(float(x)) * Fraction(float(y)))
    return acc


def _f32(x):
    return np.asarray(x, dtype=np.float32).astype(np.float64)


def test_rn32_reference_is_numpy_rounding_on_float64_values():
    x = np.random.default_rng(0).standard_normal(2000) * np.exp2(np.random.default_rng(1).integers(-140, 60, 2000))
    assert all(_rn32(Fraction(float(v))) == float(np.float32(v)) for v in x)


def test_chain_matches_exact_reference_random():
    rng = np.random.default_rng(0)
    for trial in range(200):
        K = int(rng.integers(1, 40))
        if trial % 2:  # wide exponents: partial sums absorb and cancel
            a = rng.standard_normal(K) * np.exp2(rng.integers(-30, 30, K))
            b = rng.standard_normal(K) * np.exp2(rng.integers(-30, 30, K))
        else:  # short significands: exact sums and midpoints
            a = rng.integers(-64, 64, K) * np.exp2(rng.integers(-12, 12, K))
            b = rng.integers(-64, 64, K) * np.exp2(rng.integers(-12, 12, K))
        a, b = _f32(a), _f32(b)
        assert fma_chain_dot(a[None, :], b[:, None])[0, 0] == _chain_exact(a, b), trial


def test_chain_breaks_ties_after_double_rounding():
    """acc + p whose exact value lies just off an fp32 midpoint by less than float64's half ulp: float64 rounds it
    ONTO the midpoint, and a plain float32() would then round to even, the wrong way in half the cases."""
    u = 2.0**-23
    cases = []
    for acc in (1.0, 1.0 + u, -(1.0 + u), 3.0 + 2 * u):
        for tiny in (2.0**-60, -(2.0**-60)):
            # p = (half ulp of acc) + tiny as one exact product of two fp32 values: x * y with y = 1 + 2^-23 k
            half = math.copysign(np.spacing(np.float32(abs(acc))) / 2.0, acc)
            y = 1.0 + 2.0**-23
            x = float(np.float32((half + tiny) / y))
            cases.append((acc, x, y))
    wrong = 0
    for acc, x, y in cases:
        exact = _rn32(Fraction(acc) + Fraction(x) * Fraction(y))
        assert fma_step(np.array([acc]), np.array([x * y]))[0] == exact
        assert fma_chain_dot(np.array([[1.0, x]]), np.array([[acc], [y]]))[0, 0] == exact
        wrong += float(np.float32(acc + x * y)) != exact
    # and a case built directly on the midpoint: 1 + 2^-24 (a tie) plus or minus 2^-70
    for sgn in (1.0, -1.0):
        s, err = 1.0 + 2.0**-24, sgn * 2.0**-70
        assert round_fp32(np.array([s]), np.array([err]))[0] == (1.0 + u if sgn > 0 else 1.0)
    assert wrong > 0  # the trap is real: naive double rounding gets some of them wrong


def test_chain_normal_mask_and_qk_scale2():
    a = np.array([[1.0, 2.0**-130], [1.0, 1.0]])
    b = np.array([[1.0], [1.0]])
    _, normal = fma_chain_dot(a, b, return_normal=True)
    assert normal.tolist() == [[False], [True]]
    _, normal = fma_chain_dot(np.array([[2.0**-70, 2.0**-70]]), np.array([[2.0**-70], [1.0]]), return_normal=True)
    assert not normal[0, 0]  # a step value 2^-140 is below fp32's normal range
    for d in (16, 64, 80, 128):
        sc = 1.0 / math.sqrt(d)
        assert kernel_qk_scale2(sc) == float(np.float32(np.float32(sc) * np.float32(1.4426950408889634)))
    with pytest.raises(ValueError, match="fp32 values"):
        fma_chain_dot(np.array([[0.1]]), np.array([[1.0]]))


# ---- the gate ---------------------------------------------------------------------------------------

def test_precision_validates_the_claim():
    assert Precision("float32", "ieee").ieee_fma_chain is False
    Precision("float32", "ieee", ieee_fma_chain=True)
    for args in (("float16", "fp16"), ("float32", "tf32"), ("bfloat16", "ieee")):
        with pytest.raises(ValueError, match="ieee_fma_chain"):
            Precision(*args, ieee_fma_chain=True)
    with pytest.raises(ValueError, match="bool"):
        Precision("float32", "ieee", ieee_fma_chain=1)


def test_claim_only_on_the_gpu_where_measured(monkeypatch):
    from flashcheck.adapters import ours_precision

    assert hw.interpreter().ieee_dot == "unknown"
    for interpret in (True, False):  # no measurement recorded (or not a passing one): no claim anywhere
        if hw.h100().ieee_dot != "fma_chain":
            assert not ours_precision("float32", "ieee", head_dim=64, interpret=interpret).ieee_fma_chain
    measured = dataclasses.replace(hw.h100(), ieee_dot="fma_chain", ieee_dot_k=(16, 64, 128, 256))
    monkeypatch.setattr(hw, "h100", lambda: measured)
    assert ours_precision("float32", "ieee", head_dim=64, interpret=False).ieee_fma_chain
    assert ours_precision("float32", "ieee", head_dim=80, interpret=False).ieee_fma_chain  # padded to 128
    assert not ours_precision("float32", "ieee", head_dim=32, interpret=False).ieee_fma_chain  # K = 32 not probed
    assert not ours_precision("float32", "ieee", head_dim=64, interpret=True).ieee_fma_chain
    assert not ours_precision("float32", "tf32", head_dim=64, interpret=False).ieee_fma_chain
    assert not ours_precision("float16", None, head_dim=64, interpret=False).ieee_fma_chain
    # the chain is llvm.fmuladd contracted into fma.rn.f32: no claim where fusion is forced off, nor without this
    # Triton's compiled-code record showing the contraction (Triton 3.10 turns fusion off by default)
    for name, value in (("TRITON_FORCE_DISABLE_FP_FUSION", "1"), ("TRITON_DEFAULT_FP_FUSION", "0")):
        monkeypatch.setenv(name, value)
        p = ours_precision("float32", "ieee", head_dim=64, interpret=False)
        assert not p.ieee_fma_chain and p.exp_argument == "unknown", name
        monkeypatch.delenv(name)
    import flashcheck.adapters as adapters

    monkeypatch.setattr(adapters, "_compiled_record", lambda *a, **k: None)
    p = ours_precision("float32", "ieee", head_dim=64, interpret=False)
    assert not p.ieee_fma_chain and p.exp_argument == "unknown" and p.rowsum_depth is None


def test_ieee_dot_from_probe_reports():
    case = dict(mismatches=0)
    good = dict(versions=dict(interpreter=False, device_arg="cuda"), quick=False, all_bit_exact=True,
                qk_scale2_as_stated=True, cases=[case] * 3)
    assert hw.ieee_dot_from(good) == "fma_chain"
    assert hw.ieee_dot_k_from(dict(good, cases=[dict(case, block_d=b) for b in (16, 128, 128)])) == (16, 128)
    assert hw.ieee_dot_from(None) == "unknown" and hw.ieee_dot_k_from(None) == ()
    for bad in (dict(good, versions=dict(interpreter=True, device_arg="cpu")), dict(good, quick=True),
                dict(good, all_bit_exact=False), dict(good, qk_scale2_as_stated=False),
                dict(good, cases=[case, dict(mismatches=1)]), dict(good, cases=[])):
        assert hw.ieee_dot_from(bad) == "unknown"
    with pytest.raises(ValueError, match="ieee_dot"):
        dataclasses.replace(hw.h100(), ieee_dot="yes")


# ---- the bound on the arithmetic it states ----------------------------------------------------------

def _lost_terms(seed):
    """bench/adversaries/lost_terms_logits.py's input (its `build`): one-signed logit-dot roundings."""
    from tests.test_bounds import _adversary

    return _adversary("lost_terms_logits").build(seed)


def _cancelling(seed, Nq=8, Nk=64, d=32):
    """q.k = sum of +-64^2 (1 + 2^-12 noise): large partial sums, small logits; the known error ~ 1e-4 dominates O's
    error and sits right below the bound (O: ~1.02x)."""
    rng = np.random.default_rng(seed)
    sgn = np.where(np.arange(d) % 2 == 0, 1.0, -1.0)
    q = 64.0 * (1 + 2.0**-12 * rng.standard_normal((1, 1, Nq, d)))
    k = 64.0 * sgn * (1 + 2.0**-12 * rng.standard_normal((1, 1, Nk, d)))
    v, do = rng.standard_normal((1, 1, Nk, d)), rng.standard_normal((1, 1, Nq, d))
    return [round_to(x, "float32") for x in (q, k, v, do)]


def _random(seed, Nq=8, Nk=40, d=16):
    rng = np.random.default_rng(seed)
    return [round_to(rng.standard_normal(s), "float32") for s in ((1, 2, Nq, d), (1, 2, Nk, d), (1, 2, Nk, d), (1, 2, Nq, d))]


def _overs(xs, claim=True, causal=False):
    q, k, v, do = xs
    o, lse, o32 = fa2_forward(q, k, v, dtype="float32", dot="ieee", l_accumulate="float64", return_fp32_o=True,
                              ieee_fma_chain=True, causal=causal, block_k=16)
    g = fa2_backward(q, k, v, o, lse, do, dtype="float32", dot="ieee", delta_o=o32, ieee_fma_chain=True, causal=causal,
                     block_k_dq=16)  # the dQ key tiles the precision below states (block_k_dq None: block_k)
    O, L = attention(q, k, v, causal=causal)
    exact = (O, L, *attention_backward(q, k, v, O, L, do, causal=causal))
    pr = Precision("float32", "ieee", exp="libm", l_accumulate="float64", delta_from="fp32", block_k=16,
                   ieee_fma_chain=claim)
    out = {}
    for kind in ("probabilistic", "worst_case"):
        fb = forward_bound(q, k, v, precision=pr, kind=kind, causal=causal)
        bb = backward_bound(q, k, v, do, precision=pr, kind=kind, causal=causal)
        for name, got, e, b in zip(("O", "LSE", "dQ", "dK", "dV"), (o, lse, *g), exact, (fb.o, fb.lse, bb.dq, bb.dk, bb.dv)):
            out[kind, name] = int((np.abs(got - e) > b).sum())
    return out


@pytest.mark.parametrize("seed", [0, 1])
def test_known_logits_bound_holds(seed):
    for xs, causal in ((_random(seed), False), (_random(seed), True), (_lost_terms(seed), False),
                       (_cancelling(seed), False)):
        over = _overs(xs, causal=causal)
        assert not any(over.values()), over


def test_known_logits_sharper_on_random_inputs():
    q, k, v, _ = _random(0, Nk=256, d=64)
    b = [forward_bound(q, k, v, precision=Precision("float32", "ieee", exp="libm", ieee_fma_chain=c)) for c in (False, True)]
    assert np.median(b[1].o / b[0].o) < 0.8  # the dot's random model (the largest logit term) is gone
    wc = [forward_bound(q, k, v, precision=Precision("float32", "ieee", exp="libm", ieee_fma_chain=c), kind="worst_case")
          for c in (False, True)]
    # the worst case: unchanged but for c's two extra roundings (2 u |s| more per logit)
    assert np.all(wc[1].o >= wc[0].o) and np.all(wc[1].o <= 1.02 * wc[0].o)


def _dropped(orig):
    def f(qf, kf, scale, absqk):
        e, floor, known, *chain = orig(qf, kf, scale, absqk)  # (the chain's values pass through unplanted)
        return 0.0 * e, floor, known, *chain
    return f


def _descending(orig):
    def f(qf, kf, scale, absqk):
        e, floor, known, *chain = orig(qf, kf, scale, absqk)
        x = fma_chain_dot(qf, np.swapaxes(kf, -1, -2), order="descending")
        e2 = math.log(2.0) * x * kernel_qk_scale2(scale) - scale * (qf @ np.swapaxes(kf, -1, -2))
        return np.where(known, e2, 0.0), floor, known, *chain
    return f


def _half_signs(orig):
    def f(qf, kf, scale, absqk):
        e, floor, known, *chain = orig(qf, kf, scale, absqk)
        return e * np.where(np.arange(e.shape[-1]) % 2 == 0, 1.0, -1.0), floor, known, *chain
    return f


@pytest.mark.parametrize("bug", [_dropped, _descending, _half_signs])
@pytest.mark.parametrize("inputs", [_lost_terms, _cancelling])
def test_planted_bug_in_the_known_error_is_caught(bug, inputs):
    xs = inputs(0)
    with mock.patch.object(lgmod, "_fma_logit_error", bug(lgmod._fma_logit_error)):
        over = _overs(xs)
    assert over["probabilistic", "O"] > 0 and over["probabilistic", "LSE"] > 0, over
    assert not any(v for (kind, _), v in over.items() if kind == "worst_case")  # the worst case does not use it

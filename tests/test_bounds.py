"""proofs/bounds: the derived tolerances hold for a kernel that rounds like ours, and they can fail.

Observed errors come from proofs/emulation.py (the FA2 kernel's rounding on the CPU) and from torch
SDPA math; the float64 references are checked against the mpmath oracle with `reference_bound`.
tf32 operands are TRUNCATED, as Triton's mma .tf32 does on the GPU (flashcheck.proofs.emulation truncates;
`truncating_tf32` pins that in the tests that depend on it).
"""
from __future__ import annotations

import contextlib
import dataclasses

import numpy as np
import pytest
from hypothesis import given, note, strategies as st

from flashcheck.proofs.bounds import (
    BackwardBound,
    ForwardBound,
    LAMBDA,
    Precision,
    backward_bound,
    forward_bound,
    gamma,
    lse_gradient_bound,
    reference_bound,
)
from flashcheck.proofs.emulation import fa2_backward, fa2_forward, round_to
from flashcheck.proofs.tightness import DISTRIBUTIONS, make_inputs, worst_ratio

CASES = [("float16", "fp16"), ("bfloat16", "bf16"), ("float32", "tf32"), ("float32", "ieee")]
KINDS = ["probabilistic", "worst_case"]
SHAPE = (1, 2, 80, 32)  # N not a multiple of block_k = 64


def _tf32_truncate(x):
    """fp32 -> tf32 by TRUNCATION (the low 13 significand bits dropped, |x| never grows): what the
    tensor core does with the raw fp32 bits Triton hands to mma/wgmma .tf32 (triton-lang/triton#4574)."""
    import torch

    b = x.float().contiguous().view(torch.int32)
    return (b & ~0x1FFF).view(torch.float32)


@contextlib.contextmanager
def truncating_tf32():
    """flashcheck.proofs.emulation with tf32 operands truncated instead of rounded to nearest."""
    import flashcheck.proofs.emulation as em

    saved = em._tf32
    em._tf32 = _tf32_truncate
    try:
        yield
    finally:
        em._tf32 = saved


def _case(dtype, dot, dist, seed=0, causal=True, shape=SHAPE, exp="libm"):
    from flashcheck.reference import attention, standard_attention_backward

    q, k, v, do = make_inputs(dist, shape, dtype, seed)
    ref = attention(q, k, v, causal=causal)
    gref = standard_attention_backward(q, k, v, do, causal=causal)
    with truncating_tf32():
        o, lse = fa2_forward(q, k, v, dtype=dtype, dot=dot, causal=causal)
        g = fa2_backward(q, k, v, o, lse, do, dtype=dtype, dot=dot, causal=causal)
    pr = Precision(input=dtype, dot=dot, exp=exp)
    return (q, k, v, do), ref, gref, (o, lse), g, pr


def _pairs(ref, gref, out, g, fb, bb):
    return {
        "O": (out[0], ref[0], fb.o),
        "LSE": (out[1], ref[1], fb.lse),
        "dQ": (g[0], gref[0], bb.dq),
        "dK": (g[1], gref[1], bb.dk),
        "dV": (g[2], gref[2], bb.dv),
    }


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dist", DISTRIBUTIONS)
@pytest.mark.parametrize("dtype,dot", CASES)
def test_emulated_kernel_is_within_every_bound(dtype, dot, dist, kind):
    (q, k, v, do), ref, gref, out, g, pr = _case(dtype, dot, dist)
    fb = forward_bound(q, k, v, causal=True, precision=pr, kind=kind)
    bb = backward_bound(q, k, v, do, causal=True, precision=pr, kind=kind)
    for name, (x, y, b) in _pairs(ref, gref, out, g, fb, bb).items():
        fin = np.isfinite(y)
        np.testing.assert_array_equal(x[~fin], y[~fin])
        r = worst_ratio(np.abs(x[fin] - y[fin]), b[fin])
        assert r <= 1.0, f"{name} ({dtype}/{dot}, {dist}, {kind}): error is {r:.3g} x the bound"


@pytest.mark.parametrize("dtype,dot", CASES)
def test_perturbing_by_a_few_bounds_is_caught(dtype, dot):
    """A test using the bound must fail when the result is off by 3 bounds in a single entry."""
    (q, k, v, do), ref, gref, out, g, pr = _case(dtype, dot, "normal")
    fb = forward_bound(q, k, v, causal=True, precision=pr)
    bb = backward_bound(q, k, v, do, causal=True, precision=pr)
    for name, (x, y, b) in _pairs(ref, gref, out, g, fb, bb).items():
        i = np.unravel_index(np.argmax(np.where(np.isfinite(b), b, 0)), b.shape)
        x = x.copy()
        x[i] = y[i] + 3.0 * b[i]
        assert np.abs(x - y)[i] > b[i], name


@pytest.mark.parametrize("dtype,dot,rel", [("float16", "fp16", 2.0**-8), ("float32", "ieee", 2.0**-17),
                                           ("float32", "tf32", 2.0**-8)])
def test_a_slightly_wrong_softmax_scale_is_caught(dtype, dot, rel):
    """A plausible bug far below the input precision's eps^(1/2): the logit scale off by `rel`."""
    from flashcheck.reference import attention

    q, k, v, _ = make_inputs("normal", SHAPE, dtype, 1)
    o_ref, lse_ref = attention(q, k, v)
    d = q.shape[-1]
    with truncating_tf32():
        o, lse = fa2_forward(q, k, v, dtype=dtype, dot=dot, scale=(1 + rel) / np.sqrt(d))
    fb = forward_bound(q, k, v, precision=Precision(input=dtype, dot=dot, exp="libm"))
    assert worst_ratio(np.abs(o - o_ref), fb.o) > 1.0 or worst_ratio(np.abs(lse - lse_ref), fb.lse) > 1.0


def test_gqa_window_bias_and_masked_rows():
    """GQA (Hq = 2 Hkv), a sliding window that leaves some rows empty, and a bias: bounds hold, and
    a fully masked row gets bound 0 (O = 0 and LSE = -inf are compared exactly)."""
    from flashcheck.reference import attention, standard_attention_backward

    rng = np.random.default_rng(3)
    B, Hq, Hkv, N, d = 1, 2, 1, 40, 16
    q = round_to(rng.standard_normal((B, Hq, N, d)), "float16")
    k, v = (round_to(rng.standard_normal((B, Hkv, N, d)), "float16") for _ in range(2))
    do = round_to(rng.standard_normal((B, Hq, N, d)), "float16")
    mask = np.ones((N, N), dtype=bool)
    mask[5] = False
    pr = Precision(input="float16", dot="fp16", exp="libm")
    fb = forward_bound(q, k, v, mask=mask, window=(8, 0), precision=pr)
    bb = backward_bound(q, k, v, do, mask=mask, window=(8, 0), precision=pr)
    assert fb.o.shape == (B, Hq, N, d) and fb.lse.shape == (B, Hq, N)
    assert bb.dq.shape == q.shape and bb.dk.shape == k.shape and bb.dv.shape == v.shape
    assert np.all(fb.o[:, :, 5] == 0) and np.all(fb.lse[:, :, 5] == 0) and np.all(bb.dq[:, :, 5] == 0)
    o_ref, lse_ref = attention(q, k, v, mask=mask, window=(8, 0))
    o, lse = fa2_forward(q, k, v, mask=mask, window=(8, 0))
    assert worst_ratio(np.abs(o - o_ref), fb.o) <= 1
    g = fa2_backward(q, k, v, o, lse, do, mask=mask, window=(8, 0))
    gref = standard_attention_backward(q, k, v, do, mask=mask, window=(8, 0))
    for x, y, b in zip(g, gref, (bb.dq, bb.dk, bb.dv)):
        assert worst_ratio(np.abs(x - y), b) <= 1


def test_torch_sdpa_math_is_within_the_bound():
    import torch

    from flashcheck.reference import attention

    for dtype, dot, tdt in (("float32", "ieee", torch.float32), ("float16", "fp16", torch.float16)):
        q, k, v, _ = make_inputs("outliers", SHAPE, dtype, 2)
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
            o = torch.nn.functional.scaled_dot_product_attention(
                *(torch.as_tensor(x).to(tdt) for x in (q, k, v)), is_causal=True)
        b = forward_bound(q, k, v, causal=True, precision=Precision(input=dtype, dot=dot, exp="libm", block_k=1))
        assert worst_ratio(np.abs(o.double().numpy() - attention(q, k, v, causal=True)[0]), b.o) <= 1


@given(seed=st.integers(0, 2**31 - 1), scale=st.sampled_from([0.1, 1.0, 4.0]),
       causal=st.sampled_from([False, True, "bottom_right"]))
def test_references_are_within_reference_bound_of_mpmath(seed, scale, causal):
    from flashcheck.reference import attention, standard_attention_backward
    from flashcheck.reference.exact import exact_attention, exact_attention_backward

    rng = np.random.default_rng(seed)
    q = rng.standard_normal((1, 1, 5, 4)) * scale
    k, v = (rng.standard_normal((1, 1, 7, 4)) for _ in range(2))
    do = rng.standard_normal((1, 1, 5, 4))
    o, lse = attention(q, k, v, causal=causal)
    o_x, lse_x = exact_attention(q, k, v, causal=causal)
    fb = reference_bound(q, k, v, causal=causal)
    note(f"seed={seed} scale={scale} causal={causal} o err/bound={worst_ratio(np.abs(o - o_x), fb.o):.3g}")
    assert worst_ratio(np.abs(o - o_x), fb.o) <= 1
    fin = np.isfinite(lse_x)
    assert worst_ratio(np.abs(lse - lse_x)[fin], fb.lse[fin]) <= 1
    g = standard_attention_backward(q, k, v, do, causal=causal)
    gx = exact_attention_backward(q, k, v, do, causal=causal)
    bb = reference_bound(q, k, v, do, causal=causal)
    assert isinstance(bb, BackwardBound)
    for x, y, b in zip(g, gx, (bb.dq, bb.dk, bb.dv)):
        assert worst_ratio(np.abs(x - y), b) <= 1


def test_worst_case_is_never_below_probabilistic_and_bounds_scale_with_u():
    q, k, v, _ = make_inputs("normal", (1, 1, 64, 16), "float16", 4)
    b16 = [forward_bound(q, k, v, precision=Precision(input="float16", dot="fp16"), kind=kd) for kd in KINDS]
    assert np.all(b16[0].o <= b16[1].o) and np.all(b16[0].lse <= b16[1].lse)
    b32 = forward_bound(q, k, v, precision=Precision(input="float32", dot="ieee"))
    assert np.all(b32.o < b16[0].o)
    assert isinstance(b16[0], ForwardBound) and LAMBDA > 6


def test_gamma_and_bad_arguments():
    assert gamma(10, 2.0**-24) == pytest.approx(10 * 2.0**-24 / (1 - 10 * 2.0**-24))
    assert np.isinf(gamma(2**24, 2.0**-24))
    with pytest.raises(ValueError, match="Precision.dot"):
        Precision(input="float16", dot="fp8")
    with pytest.raises(ValueError, match="Precision.input"):
        Precision(input="half", dot="fp16")
    with pytest.raises(ValueError, match="block_k"):
        Precision(input="float16", dot="fp16", block_k=0)
    q = np.zeros((1, 1, 4, 8))
    with pytest.raises(ValueError, match="kind"):
        forward_bound(q, q, q, precision=Precision(input="float16", dot="fp16"), kind="typical")
    with pytest.raises(TypeError, match="precision"):
        forward_bound(q, q, q, precision="fp16")
    with pytest.raises(ValueError, match="do"):
        backward_bound(q, q, q, np.zeros((1, 1, 3, 8)), precision=Precision(input="float16", dot="fp16"))


# logit scales up to each input dtype's limit: fp16 q, k entries stay below 65504 up to ~1e8
LOGIT_SCALES = {"float16": [10.0**e for e in range(0, 9)],
                "bfloat16": [10.0**e for e in range(0, 31, 3)],
                "float32": [10.0**e for e in range(0, 31, 3)]}


@pytest.mark.parametrize("dtype,dot", CASES)
def test_bounds_are_never_nan_at_any_logit_scale(dtype, dot):
    """A bound is a finite number or +inf (vacuous), never NaN, and computing it raises no floating-point
    warning, from logit std 1 up to 1e30 (fp32/bf16) or the fp16 range. exp of a logit error > 709 used
    to make 0 * inf = NaN where A_ij underflowed; those entries now contribute exactly 0."""
    import warnings

    rng = np.random.default_rng(5)
    shape = (1, 2, 24, 8)
    q0, k0, v0, do0 = (rng.standard_normal(shape) for _ in range(4))
    pr = Precision(input=dtype, dot=dot)
    for L in LOGIT_SCALES[dtype]:
        c = np.sqrt(L * np.sqrt(shape[-1]))  # scale = 1/sqrt(d): logit std ~ L
        q, k = round_to(q0 * c, dtype), round_to(k0 * c, dtype)
        v, do = round_to(v0, dtype), round_to(do0, dtype)
        for kind in KINDS:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                fb = forward_bound(q, k, v, causal=True, precision=pr, kind=kind)
                bb = backward_bound(q, k, v, do, causal=True, precision=pr, kind=kind)
            for name, b in (("o", fb.o), ("lse", fb.lse), ("dq", bb.dq), ("dk", bb.dk), ("dv", bb.dv)):
                assert not np.isnan(b).any(), f"{name} NaN at logit scale {L:g} ({dtype}/{dot}, {kind})"
                assert np.all(b >= 0), name
                if L == 1.0:
                    assert np.isfinite(b).all(), f"{name} not finite at logit scale 1"


def test_underflowed_weights_contribute_zero_not_nan():
    """One key dominates by ~1e9 and the logit errors exceed 709: the other keys' A_ij = 0 and
    exp(s_ij - m_i - log l_i + e_ij) underflows too, so their products A_ij b_ij are exactly 0."""
    from flashcheck.proofs.bounds import _weighted_exp_err

    A = np.array([[1.0, 0.0, 0.0, 0.5]])
    vis = np.array([[True, True, False, True]])
    e = np.array([[1.0, 800.0, 800.0, 800.0]])
    log_a = lambda: np.array([[0.0, -1e9, -np.inf, np.log(0.5)]])  # noqa: E731
    with np.errstate(over="ignore"):
        b = np.where(vis, np.exp(e) * (1 + 2.0**-22) - 1, 0.0)
    Ab, Ab1, bad = _weighted_exp_err(A, b, e, 2.0**-22, vis, log_a)
    assert bad.tolist() == [[False, True, False, True]]
    assert Ab[0, 0] == A[0, 0] * b[0, 0] and Ab1[0, 0] == A[0, 0] * (1 + b[0, 0])  # finite: plain products
    assert Ab[0, 1] == 0 and Ab1[0, 1] == 0  # underflowed weight: provably no contribution
    assert Ab[0, 2] == 0 and Ab1[0, 2] == 0  # invisible
    assert np.isinf(Ab[0, 3]) and np.isinf(Ab1[0, 3])  # a real weight with a vacuous factor: +inf


@pytest.mark.parametrize("lead", [(), (2, 3)])
def test_weighted_dev_fast_path_matches_the_direct_formula(lead):
    """_weighted_dev (chunked, stacked einsum, in-place |v - o|) equals sum_j W_ij |v_jc - o_ic| and
    sum_j W_ij (v_jc - o_ic)^2 formed with the full (Nq, Nk, dv) array, on several chunks."""
    from flashcheck.proofs.bounds import _weighted_dev

    rng = np.random.default_rng(7)
    Nq, Nk, dv = 40, 128, 128  # 2^18 / (Nk dv) = 16 rows per chunk: 3 chunks
    Ws = [rng.random((*lead, Nq, Nk)) for _ in range(3)]
    v, o = rng.standard_normal((*lead, Nk, dv)), rng.standard_normal((*lead, Nq, dv))
    (a0, a1), (s0,) = _weighted_dev(Ws[:2], Ws[2:], v, o)
    D = v[..., None, :, :] - o[..., :, None, :]
    for got, W, f in ((a0, Ws[0], np.abs(D)), (a1, Ws[1], np.abs(D)), (s0, Ws[2], D * D)):
        want = (W[..., None] * f).sum(axis=-2)
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=0)


@pytest.mark.parametrize("dtype,dot", CASES + [("float64", "fp64")])
def test_row_blocks_give_the_same_bounds(dtype, dot, monkeypatch):
    """The forward and backward analyses run over blocks of query rows (dK, dV add up the blocks'
    products). Tiny blocks (1-3 rows) give the bounds of one block holding every row, to 1e-12."""
    import flashcheck.proofs.bounds as pb
    from flashcheck.reference import attention

    rng = np.random.default_rng(11)
    q, k, v, do = (round_to(rng.standard_normal((1, 2, n, 16)), dtype) for n in (37, 45, 45, 37))
    mask = rng.random((37, 45)) > 0.2
    pr = Precision(input=dtype, dot=dot) if dtype != "float64" else pb.REFERENCE_PRECISION
    for kind in KINDS:
        one = [forward_bound(q, k, v, mask=mask, precision=pr, kind=kind),
               backward_bound(q, k, v, do, mask=mask, precision=pr, kind=kind)]
        with monkeypatch.context() as mp:
            mp.setattr(pb.forward, "ROW_BLOCK_ENTRIES", 100)  # 100 // 45 = 2 rows per block
            many = [forward_bound(q, k, v, mask=mask, precision=pr, kind=kind),
                    backward_bound(q, k, v, do, mask=mask, precision=pr, kind=kind)]
        for name in ("o", "lse", "dq", "dk", "dv"):
            a = getattr(one[name in ("dq", "dk", "dv")], name)
            b = getattr(many[name in ("dq", "dk", "dv")], name)
            np.testing.assert_allclose(b, a, rtol=1e-12, atol=0, err_msg=f"{name} {kind}")
    assert attention(q, k, v, mask=mask)[0].shape == one[0].o.shape


def test_keys_far_below_the_max_do_not_make_the_bounds_vacuous():
    """One key per row at logit ~0 and 15 keys 2^40 / sqrt(d) below it: their logit errors are far
    beyond 709, but their weights (and the perturbed ones) underflow, so they contribute exactly 0 and
    every bound is finite (it was NaN); the emulated fp32 kernel is within them."""
    import warnings

    from flashcheck.reference import attention, standard_attention_backward

    rng = np.random.default_rng(1)
    d, Nk = 8, 16
    q = np.zeros((1, 1, 4, d))
    q[..., 0], q[..., 1] = 1.0, rng.standard_normal(4)
    k = np.zeros((1, 1, Nk, d))
    k[..., 1:, 0], k[..., 2] = -(2.0**40), rng.standard_normal(Nk)
    q, k = round_to(q, "float32"), round_to(k, "float32")
    v, do = (np.round(rng.standard_normal(s) * 64) / 64 for s in ((1, 1, Nk, d), (1, 1, 4, d)))
    pr = Precision(input="float32", dot="ieee", exp="libm")
    ref, gref = attention(q, k, v), standard_attention_backward(q, k, v, do)
    out = fa2_forward(q, k, v, dtype="float32", dot="ieee")
    g = fa2_backward(q, k, v, *out, do, dtype="float32", dot="ieee")
    for kind in KINDS:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            fb = forward_bound(q, k, v, precision=pr, kind=kind)
            bb = backward_bound(q, k, v, do, precision=pr, kind=kind)
        for name, (x, y, b) in _pairs(ref, gref, out, g, fb, bb).items():
            assert np.isfinite(b).all(), f"{name} ({kind}): {np.size(b) - np.isfinite(b).sum()} entries not finite"
            r = worst_ratio(np.abs(x - y), b)
            assert r <= 1.0, f"{name} ({kind}): error is {r:.3g} x the bound"


# ----------------------------------------------------------------------------------------------
# tf32: operands are truncated (Triton on NVIDIA), not rounded to nearest
# ----------------------------------------------------------------------------------------------

# the GPU finding (H100, triton 3.6): tests/test_kernel_gpu.py::test_gpu_tf32_dot_precision had 66 LSE
# entries outside the bound of the round-to-nearest tf32 model
GPU_TF32_CASE = dict(shape=(1, 2, 2, 128, 128, 64), seed=9)


def _gpu_tf32_case():
    import torch

    from flashcheck.adapters import ours_precision
    from flashcheck.strategies import Case, Shape, materialize

    inp = materialize(Case(Shape(*GPU_TF32_CASE["shape"]), seed=GPU_TF32_CASE["seed"]), "float32")
    # the GPU kernel's blocking (block_k = 32 at d = 64), with libm exp: the CPU emulation's exp
    pr = dataclasses.replace(ours_precision(torch.float32, "tf32", head_dim=64, interpret=False), exp="libm")
    return inp, pr


def test_truncation_model_is_deterministic_and_one_ulp():
    """tf32 conversions: |delta| < 2^-10 (one ulp of an 11-bit significand), one-sided, never random;
    fp16/bf16 conversions keep round to nearest (u = 2^-11 / 2^-8, random)."""
    import flashcheck.proofs.bounds as pb

    m = pb._model(Precision(input="float32", dot="tf32"))
    assert m.trunc and m.u_in == m.u_p == 2.0**-10
    assert pb._conv(m) == ((0.0, 0.0), (2.0**-10, 2.0**-10))
    for dtype, dot, u in (("float16", "fp16", 2.0**-11), ("bfloat16", "bf16", 2.0**-8), ("float32", "ieee", 0.0)):
        m = pb._model(Precision(input=dtype, dot=dot))
        assert not m.trunc and m.u_p == u and pb._conv(m)[1] == (0.0, 0.0)
    # the truncating emulation really truncates: never larger in magnitude, error < 2^-10 relative
    import torch

    x = torch.as_tensor(np.random.default_rng(0).standard_normal(10_000) * 1e3, dtype=torch.float32)
    t = _tf32_truncate(x)
    rel = ((t - x) / x).double().numpy()
    assert np.all(np.abs(t.numpy()) <= np.abs(x.numpy())) and np.all(rel <= 0) and np.all(rel > -(2.0**-10))
    assert rel.mean() < -(2.0**-13)  # biased: the reason it cannot be treated as mean-zero


@pytest.mark.parametrize("kind", KINDS)
def test_gpu_tf32_finding_is_within_the_truncation_bound(kind):
    """(a) The case that failed on the GPU, with the emulation truncating tf32 operands: O, LSE, dQ, dK,
    dV within the bounds of the truncation model."""
    from flashcheck.reference import attention, standard_attention_backward

    inp, pr = _gpu_tf32_case()
    kw = dict(scale=inp.scale, precision=pr, kind=kind)
    ref = attention(inp.q, inp.k, inp.v, scale=inp.scale)
    gref = standard_attention_backward(inp.q, inp.k, inp.v, inp.do, scale=inp.scale)
    with truncating_tf32():
        out = fa2_forward(inp.q, inp.k, inp.v, dtype="float32", dot="tf32", scale=inp.scale, block_k=pr.block_k)
        g = fa2_backward(inp.q, inp.k, inp.v, *out, inp.do, dtype="float32", dot="tf32", scale=inp.scale)
    fb = forward_bound(inp.q, inp.k, inp.v, **kw)
    bb = backward_bound(inp.q, inp.k, inp.v, inp.do, **kw)
    for name, (x, y, b) in _pairs(ref, gref, out, g, fb, bb).items():
        r = worst_ratio(np.abs(x - y), b)
        assert r <= 1.0, f"{name} ({kind}): error is {r:.3g} x the bound"


def test_no_logit_rounding_is_modelled_as_random(monkeypatch):
    """(b) The earlier derivation modelled the logit's round-to-nearest errors as random (sqrt(d) u |q||k| for a
    CUDA-core dot, sqrt(2) u_in for the operands' conversions, the argument's roundings): truncated tf32 operands
    exceeded that model on the GPU, and so do lost products in an fp32 FMA chain (one-signed, each just under half
    an ulp of a large first product: bench/adversaries/lost_terms_logits.py). No logit rounding is random now (the
    bounds carry no random logit part), and the probabilistic LSE bound (unclaimed fp32 ieee, the logits a torch
    fp32 matmul) holds on that adversary, which the random model fails: its bound is at most the bound with the
    dot's first-order charge taken out of det plus lam sqrt(sum_g (sum_{j in g} A_j sigma_j)^2) (groups of
    identical keys, sigma_j = sqrt(d) u |q||k|_j), and the error exceeds even that."""
    import math

    import flashcheck.proofs.bounds.forward as fwd
    import flashcheck.proofs.bounds.logits as lgm
    from flashcheck.proofs.bounds import hoeffding_lambda
    from flashcheck.proofs.bounds.precision import _model, _within_dot
    from flashcheck.reference import attention
    from tests.test_fma_logits import _lost_terms

    q, k, v, _ = _lost_terms(0)
    pr = Precision("float32", "ieee", exp="libm", l_accumulate="float64", block_k=16)
    ref_lse = attention(q, k, v)[1]
    _, lse = fa2_forward(q, k, v, dtype="float32", dot="ieee", l_accumulate="float64", block_k=16)
    err = np.abs(lse - ref_lse)
    assert not hasattr(lgm._Logits, "sigma")
    assert worst_ratio(err, forward_bound(q, k, v, precision=pr).lse) <= 1.0
    real = lgm._logit_errors

    def without_dot_charge(*a, **kw):  # the earlier derivation's det: the dot's roundings left it (random)
        out = real(*a, **kw)
        qf, kf, s, shift, vis, scale, model, d = a[:8]
        absqk = scale * (np.abs(qf) @ np.swapaxes(np.abs(kf), -1, -2))
        return dataclasses.replace(out, det=out.det - np.where(vis, _within_dot(model, d) * model.u_w * absqk, 0.0))

    monkeypatch.setattr(fwd, "_logit_errors", without_dot_charge)
    reduced = forward_bound(q, k, v, precision=pr).lse
    assert q.shape[:2] == k.shape[:2] == (1, 1)
    s = 0.125 * q @ np.swapaxes(k, -1, -2)
    A = np.exp(s - s.max(-1, keepdims=True))
    A /= A.sum(-1, keepdims=True)
    sig = math.sqrt(q.shape[-1]) * _model(pr).u_w * 0.125 * (np.abs(q) @ np.swapaxes(np.abs(k), -1, -2))
    groups = fwd._identical_keys(k)
    g = np.arange(k.shape[-2]) if groups is None else groups.reshape(-1)
    var = (fwd._group_sums((A * sig)[0, 0][..., None], g)[..., 0] ** 2).sum(-1)
    old = reduced + hoeffding_lambda(1.0) * np.sqrt(var)  # >= the random model's bound (min(x + y, w) <= min(x, w) + y)
    assert worst_ratio(err, old) > 1.0, f"LSE: the random model holds ({worst_ratio(err, old):.3g})"


@pytest.mark.parametrize("dtype,dot", [c for c in CASES if c[1] != "tf32"] + [("float64", "fp64")])
def test_rounding_dots_do_not_depend_on_the_truncation_model(dtype, dot, monkeypatch):
    """(c) fp16/bf16/ieee/fp64 bounds are bitwise those of a model without any truncating dot."""
    import flashcheck.proofs.bounds as pb

    q, k, v, do = make_inputs("outliers", (1, 2, 40, 16), dtype, 6)
    pr = Precision(input=dtype, dot=dot)
    for kind in KINDS:
        a = [forward_bound(q, k, v, causal=True, precision=pr, kind=kind),
             backward_bound(q, k, v, do, causal=True, precision=pr, kind=kind)]
        with monkeypatch.context() as mp:
            mp.setattr(pb.precision, "TRUNCATING_DOTS", ())
            b = [forward_bound(q, k, v, causal=True, precision=pr, kind=kind),
                 backward_bound(q, k, v, do, causal=True, precision=pr, kind=kind)]
        for name in ("o", "lse", "dq", "dk", "dv"):
            i = name in ("dq", "dk", "dv")
            np.testing.assert_array_equal(getattr(a[i], name), getattr(b[i], name), err_msg=f"{name} {kind}")


# ----------------------------------------------------------------------------------------------
# lse_gradient_bound: d(sum_i w_i LSE_i)/dq with dO = 0 (proofs/bounds.md, sec. 8a)
# ----------------------------------------------------------------------------------------------


def _softmax_gradient(q, k, w, causal, scale_factor=1.0):
    """The exact (float64) d(sum_i w_i LSE_i)/dq = scale w_i softmax(S)_i K, scale = scale_factor / sqrt(d)."""
    sc = scale_factor / np.sqrt(q.shape[-1])
    s = q @ np.swapaxes(k, -1, -2) * sc
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
    a = np.exp(s - s.max(-1, keepdims=True))
    return w[..., None] * ((a / a.sum(-1, keepdims=True)) @ k) * sc


def _emulated_lse_gradient(q, k, v, w, dtype, dot, causal):
    """What the dQ kernel computes for dO = 0, upstream LSE gradient w: P from its own stored LSE,
    dS = P w_i in fp32, converted to the operand dtype, fp32 product with K, scale at the end."""
    import torch

    import flashcheck.proofs.emulation as em

    with truncating_tf32():
        _, lse = fa2_forward(q, k, v, dtype=dtype, dot=dot, causal=causal)
        tdt = em._TORCH[dtype]
        qt, kt = (em._operand(torch.as_tensor(x).to(tdt), dot, tdt).float() for x in (q, k))
        sc = 1.0 / np.sqrt(q.shape[-1])
        s = (qt @ kt.transpose(-1, -2)) * torch.tensor(sc * em.LOG2E, dtype=torch.float32)
        lse2 = torch.as_tensor(lse).float() * torch.tensor(em.LOG2E, dtype=torch.float32)
        vis = em._visibility(*q.shape[:3], k.shape[2], causal, None, None)
        p = torch.where(vis, torch.exp2(torch.clamp(s - lse2[..., None], max=0.0)), torch.zeros_like(s))
        ds = em._operand(p * torch.as_tensor(w).float()[..., None], dot, tdt).float()
        dq = (ds @ kt) * torch.tensor(sc, dtype=torch.float32)
    return dq.to(tdt).double().numpy()


def _lse_case(dtype, dot, dist, weights):
    q, k, v, _ = make_inputs(dist, SHAPE, dtype, 0)
    rng = np.random.default_rng(5)
    w = np.ones(SHAPE[:3]) if weights == "ones" else round_to(rng.standard_normal(SHAPE[:3]), "float16")
    return q, k, v, w, Precision(input=dtype, dot=dot, exp="libm")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dist,weights", [("normal", "ones"), ("normal", "random"),
                                          ("outliers", "ones"), ("large_logits", "random")])
@pytest.mark.parametrize("dtype,dot", CASES)
def test_emulated_lse_gradient_is_within_its_bound(dtype, dot, dist, weights, kind):
    q, k, v, w, pr = _lse_case(dtype, dot, dist, weights)
    got = _emulated_lse_gradient(q, k, v, w, dtype, dot, causal=True)
    b = lse_gradient_bound(q, k, causal=True, dlse=None if weights == "ones" else w, precision=pr, kind=kind)
    assert b.shape == q.shape and not np.isnan(b).any()
    r = worst_ratio(np.abs(got - _softmax_gradient(q, k, w, True)), b)
    assert r <= 1.0, f"{dtype}/{dot} {dist} {weights} {kind}: error is {r:.3g} x the bound"


@pytest.mark.parametrize("dtype,dot", CASES)
def test_lse_gradient_bound_catches_planted_errors(dtype, dot):
    """A missing scale, a wrong-signed dLSE term and (fp16, fp32 ieee: 2^-8 well above their rounding)
    P off by a relative 2^-8 all exceed the bound; the correct reference does not."""
    q, k, v, w, pr = _lse_case(dtype, dot, "normal", "ones")
    b = lse_gradient_bound(q, k, causal=True, precision=pr)
    exact = _softmax_gradient(q, k, w, True)
    assert worst_ratio(np.zeros_like(exact), b) == 0.0
    sc = 1.0 / np.sqrt(q.shape[-1])
    planted = {"missing scale": exact / sc, "wrong sign": -exact}
    if dot in ("fp16", "ieee"):  # bf16's own unit roundoff is 2^-8; tf32 truncates q, k, dS by up to 2^-10 each
        planted["P off by 2^-8"] = exact * (1 + 2.0**-8)
    for name, bad in planted.items():
        r = worst_ratio(np.abs(bad - exact), b)
        assert r > 1.0, f"{name} not caught ({dtype}/{dot}): {r:.3g} x the bound"


def test_lse_gradient_bound_agrees_with_backward_bound_machinery():
    """Shape checks, masked rows get 0, dlse of the wrong shape is refused, and the bound scales with |w|."""
    q, k, v, w, pr = _lse_case("float16", "fp16", "normal", "ones")
    mask = np.ones((SHAPE[2], SHAPE[2]), dtype=bool)
    mask[5] = False
    b = lse_gradient_bound(q, k, mask=mask, precision=pr)
    assert b.shape == q.shape and np.all(b[:, :, 5] == 0) and np.all(b[:, :, :5] > 0)
    b2 = lse_gradient_bound(q, k, mask=mask, dlse=2 * w, precision=pr)
    np.testing.assert_allclose(b2[:, :, :5], 2 * b[:, :, :5], rtol=0.01)
    with pytest.raises(ValueError):
        lse_gradient_bound(q, k, dlse=w[..., :3], precision=pr)


@pytest.mark.parametrize("dtype,dot", [("float16", "fp16"), ("bfloat16", "bf16")])
def test_gqa_reduced_after_rounding_is_within_its_bound(dtype, dot):
    """torch SDPA's fused backends form a GQA group's dK, dV per query head, store each in the output
    dtype and sum afterwards (gqa_reduction="rounded_heads", bounds.md sec. 7c). Emulated exactly so
    (per-head FA2 backward, each head rounded, fp32 sum, one rounding), the result is within that bound,
    which is never below the in-kernel one's per-head part."""
    import torch

    from flashcheck.proofs.bounds import Precision, backward_bound
    from flashcheck.proofs.emulation import fa2_backward, fa2_forward, round_to
    from flashcheck.reference.attention import attention
    from flashcheck.reference.backward import attention_backward

    group = 4
    rng = np.random.default_rng(11)
    q, do = (round_to(rng.standard_normal((1, 8, 48, 32)), dtype) for _ in range(2))
    k, v = (round_to(rng.standard_normal((1, 2, 96, 32)), dtype) for _ in range(2))
    O, L = attention(q, k, v)
    _, dk, dv = attention_backward(q, k, v, O, L, do)
    ke, ve = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    o, lse = fa2_forward(q, ke, ve, dtype=dtype, dot=dot)
    _, dk_h, dv_h = fa2_backward(q, ke, ve, o, lse, do, dtype=dtype, dot=dot)
    tdt = getattr(torch, dtype)

    def reduce(x_h):  # stored per head in the dtype, summed in fp32, rounded once
        x = torch.as_tensor(round_to(x_h, dtype)).float().reshape(1, 2, group, *x_h.shape[2:]).sum(2)
        return x.to(tdt).double().numpy()

    pr = Precision(dtype, dot, exp="libm", gqa_reduction="rounded_heads")
    for kind in ("worst_case", "probabilistic"):
        bb = backward_bound(q, k, v, do, precision=pr, kind=kind)
        for name, got, exact, bound in (("dK", reduce(dk_h), dk, bb.dk), ("dV", reduce(dv_h), dv, bb.dv)):
            err = np.abs(got - exact)
            assert np.all(err <= bound), (f"{name} {kind}: max error/bound {np.max(err / bound):.3g} at "
                                          f"{np.unravel_index(np.argmax(err / bound), err.shape)}")


def test_mma_step_bound_holds_on_the_h100_tensor_core_outputs():
    """The data-driven tensor-core step bound (flashcheck.proofs.bounds.logits._mma_steps_error, bounds.md sec. 2a)
    against every recorded H100 mma/wgmma output (proofs/measurements/h100_mma_raw.npz: random,
    cancelling and crafted A.B + C, fp16/bf16/tf32, K = 16..64): |D - exact| <= first order + the
    second-order term the logit bound adds; and it is sharper than delta (|acc| + sum |p|) per step."""
    import math

    from flashcheck.proofs.bounds import HARDWARE
    from flashcheck.proofs.bounds.logits import _mma_steps_error
    from flashcheck.proofs.hardware import MEASUREMENTS

    raw = np.load(MEASUREMENTS / "h100_mma_raw.npz")
    configs = sorted({key.split("__")[0] for key in raw.files if not key.startswith("ieee")})
    assert configs
    for name in configs:
        mma = HARDWARE.mma_for(name.split("_")[0])
        c, a, b, D = (raw[f"{name}__{x}"] for x in "cabd")
        P = a * b
        exact = np.array([math.fsum([ci, *pi]) for ci, pi in zip(c, P)])
        K = P.shape[1]
        ends = np.arange(mma.k_step - 1, K, mma.k_step)
        assert ends[-1] == K - 1
        S = np.abs(c) + np.abs(P).sum(1)
        n = len(ends)
        second = n * (mma.step_error + 2.0 ** (-22 - mma.extra_bits)) * gamma(n, mma.step_error) * S
        bound = _mma_steps_error(P, ends, mma, acc0=c) + second
        err = np.abs(D - exact)
        assert np.all(err <= bound), f"{name}: {(err > bound).sum()} outputs over, worst x{(err / bound).max():.3g}"
        old = n * mma.step_error * S
        hit = err > 0
        assert np.median(old[hit] / bound[hit]) > 2.0, name
        # by sign: computed - exact in [-neg, pos] (+ the same second order)
        signed = D - exact
        _, neg, pos = _mma_steps_error(P, ends, mma, acc0=c, slack=gamma(n, mma.step_error) * S)
        assert np.all(signed <= pos + second) and np.all(-signed <= neg + second), name
        assert np.mean(np.minimum(neg, pos) < 0.5 * (neg + pos)) > 0.5, name  # the sign is informative


def test_exact_tf32_conversion_is_used_only_where_measured_and_can_fail(monkeypatch):
    """The tf32 truncation of q, k, V is a known function on the H100 (proofs/hardware.py: tf32_operand
    "truncate", measured), so the probabilistic forward bound states it exactly (bounds.md sec. 6a); with
    hardware that rounds (or does not convert: the interpreter) the one-sided model stays. A kernel that
    converted differently is then caught."""
    import dataclasses as dc

    import flashcheck.proofs.emulation as em
    from flashcheck.proofs.bounds import HARDWARE, _model
    from flashcheck.reference.attention import attention

    pr = Precision(input="float32", dot="tf32", exp="libm")
    pr_round = dc.replace(pr, hardware=dc.replace(HARDWARE, tf32_operand="round"))
    assert _model(pr).conv_exact and not _model(pr_round).conv_exact
    rng = np.random.default_rng(3)
    q, k, v = (round_to(rng.standard_normal(s), "float32") for s in ((1, 2, 32, 32), (1, 2, 256, 32), (1, 2, 256, 32)))
    O, L = attention(q, k, v)
    fb, fb_round = (forward_bound(q, k, v, precision=p) for p in (pr, pr_round))
    o, lse = fa2_forward(q, k, v, dtype="float32", dot="tf32")  # truncating, as the H100
    assert np.all(np.abs(o - O) <= fb.o) and np.all(np.abs(lse - L) <= fb.lse)
    assert np.median(fb.o) < np.median(fb_round.o) / 3
    # a kernel whose conversion is not the measured one (one more bit dropped) is caught
    monkeypatch.setattr(em, "_tf32", _tf32_drop_14_bits)
    o2, lse2 = fa2_forward(q, k, v, dtype="float32", dot="tf32")
    assert np.any(np.abs(lse2 - L) > fb.lse) and np.any(np.abs(o2 - O) > fb.o)


def _tf32_drop_14_bits(x):
    """fp32 -> a 9-bit significand by truncation: not what the H100 does (13 bits dropped)."""
    import torch

    b = x.float().contiguous().view(torch.int32)
    return (b & ~0x3FFF).view(torch.float32)


def test_identical_keys_are_one_random_variable():
    """Bit-identical keys make identical errors (same operands, same operations): the probabilistic bound's
    random sums run over groups of identical keys (sum_g (sum_{j in g} W_j |v_j - O|)^2), which is the
    per-key sum when every key is distinct, and the plain worst case of one variable when all are equal."""
    from flashcheck.proofs.bounds.common import _weighted_dev
    from flashcheck.proofs.bounds.forward import _grouped_dev, _identical_keys

    rng = np.random.default_rng(0)
    W, v, o = rng.random((1, 2, 5, 7)), rng.standard_normal((1, 2, 7, 3)), rng.standard_normal((1, 2, 5, 3))
    distinct = rng.standard_normal((1, 2, 7, 4))
    assert _identical_keys(distinct) is None
    single = np.tile(np.arange(7), (1, 2, 1))
    assert np.allclose(_grouped_dev(W, single, v, o), _weighted_dev([], [W * W], v, o)[1][0])
    same = np.repeat(distinct[:, :, :1], 7, axis=2)
    groups = _identical_keys(same)
    assert groups is not None and np.all(groups == 0)
    coherent = np.einsum("...ij,...ijc->...ic", W, np.abs(v[..., None, :, :] - o[..., :, None, :])) ** 2
    assert np.allclose(_grouped_dev(W, groups, v, o), coherent)


@pytest.mark.parametrize("kind", ["probabilistic", "worst_case"])
def test_a_tile_wider_than_the_problem_is_the_whole_row(kind):
    """A kernel that takes the whole sequence as one tile (block 2^20, e.g. the math backend's model) has the
    bounds of tiles exactly as wide as the problem, computed without padding to 2^20 columns; the bound
    reports the precision it was given."""
    rng = np.random.default_rng(3)
    q, k, v, do = (rng.standard_normal(s) for s in ((1, 2, 5, 8), (1, 2, 7, 8), (1, 2, 7, 8), (1, 2, 5, 8)))
    wide = Precision("float32", "ieee", block_k=1 << 20, block_q=1 << 20)
    exact = dataclasses.replace(wide, block_k=7, block_q=5)
    fw, fe = forward_bound(q, k, v, precision=wide, kind=kind), forward_bound(q, k, v, precision=exact, kind=kind)
    bw, be = (backward_bound(q, k, v, do, precision=p, kind=kind) for p in (wide, exact))
    for a, b in ((fw.o, fe.o), (fw.lse, fe.lse), (bw.dq, be.dq), (bw.dk, be.dk), (bw.dv, be.dv)):
        np.testing.assert_array_equal(a, b)
    assert fw.precision is wide and bw.precision is wide


@pytest.mark.parametrize("blocked", [False, True])
@pytest.mark.parametrize("sizes,k_step,products", [((64, 64, 64, 13), 1, 1), ((16, 16, 7), 8, 2), ((5,), 1, 1)])
def test_partial_sums_follow_the_accumulation_steps(blocked, sizes, k_step, products):
    """sum_s |X_s| of the forward's P.V accumulation (sec. 6, X_s the exact partial sum step s rounds) equals a
    step-by-step walk of the kernel's chain: recursive (tl.dot(p, v, acc)): every step rounds the running
    partial sum; blocked (acc * alpha + tl.dot(p, v)): a product step rounds the tile's own chain, and each
    tile end rounds the whole partial sum twice (the addition into acc and the rescale)."""
    from flashcheck.proofs.bounds.forward import _partial_abs_sums, _step_ends

    rng = np.random.default_rng(len(sizes) + k_step)
    nk, dv = sum(sizes), 3
    A = rng.random((2, nk))
    A /= A.sum(-1, keepdims=True)
    v = rng.standard_normal((nk, dv))
    ends, tile_ends = _step_ends(sizes, k_step)
    x_abs = _partial_abs_sums(A, v, ends, tile_ends, products, blocked=blocked)

    want = np.zeros((2, dv))
    start = 0
    for w in sizes:
        for e in range(start, start + w):
            if e in ends:  # a product step: the chain's partial sum
                first = start if blocked else 0
                want += products * np.abs((A[:, first:e + 1, None] * v[first:e + 1]).sum(-2))
        end = start + w  # tile end: the whole partial sum, once (recursive: the rescale) or twice (blocked)
        want += (2 if blocked else 1) * np.abs((A[:, :end, None] * v[:end]).sum(-2))
        start = end
    np.testing.assert_allclose(x_abs, want, rtol=1e-12, atol=1e-15)


def _walk_accumulation(x, sizes, blocked, delta):
    """The forward's P.V chain walked step by step in float64 with the given rounding errors (delta(X): the
    relative error of the step whose exact value is X): the computed sum and the first-order part
    sum_r delta_r X_r over the exact values X_r. recursive: every product step rounds the running sum, each
    tile end the rescale; blocked: a product step rounds the tile's own chain, each tile end the rescale of
    the accumulator and the addition (the last tile's rescale, which the model counts, as well)."""
    acc = chain = first = 0.0
    S = np.cumsum(x, axis=0)
    start = 0
    for w in sizes:
        for e in range(start, start + w):
            X = S[e] - (S[start - 1] if blocked and start else 0.0)
            d = delta(X)
            if blocked:
                chain = (chain + x[e]) * (1 + d)
            else:
                acc = (acc + x[e]) * (1 + d)
            first = first + d * X
        end = start + w
        if blocked:  # acc * alpha (acc = the sum of the earlier tiles), then + the chain
            X0 = S[start - 1] if start else 0.0 * S[0]
            d = delta(X0)
            acc, first = acc * (1 + d), first + d * X0
            d = delta(S[end - 1])
            acc, first, chain = (acc + chain) * (1 + d), first + d * S[end - 1], 0.0
        else:  # the rescale at the next tile (after the last one as well)
            d = delta(S[end - 1])
            acc, first = acc * (1 + d), first + d * S[end - 1]
        start = end
    if blocked:  # the rescale after the last tile
        d = delta(S[-1])
        acc, first = acc * (1 + d), first + d * S[-1]
    return acc, first


@pytest.mark.parametrize("blocked", [False, True])
@pytest.mark.parametrize("values", ["constant", "random"])
def test_accumulation_remainder_bounds_the_second_order(blocked, values):
    """The P.V accumulation's second-order remainder evaluated on the data (bounds.md sec. 6, "Second-order
    terms"): the computed sum minus the exact one minus its first-order part sum_r delta_r X_r, walked with a
    large unit roundoff (u = 2^-14, N u ~ 0.064 over 1040-1056 roundings), stays below _accumulation_remainder; with
    every delta = +u on constant V (all partial sums positive, the errors of the errors all adding up) it is
    within 10% of it, so the remainder is needed at long N and a smaller one (e.g. without the errors'
    own growth, or half of it) fails."""
    from flashcheck.proofs.bounds.forward import _accumulation_remainder, _keys_in_order, _step_ends, _tile_order
    from flashcheck.proofs.bounds.precision import _model

    u = 2.0**-14
    M = dataclasses.replace(_model(Precision("float32", "ieee")), u_w=u, u_dacc=u)
    nk, dv = 1024, 2
    rng = np.random.default_rng(7)
    A = rng.random((1, nk)) + 1.0
    A /= A.sum(-1, keepdims=True)
    v = np.full((nk, dv), 0.7) if values == "constant" else rng.standard_normal((nk, dv))
    order = _tile_order(nk, 64, "ascending")
    ends, tile_ends = _step_ends(order.sizes, 1)
    A_absv = A @ np.abs(v)
    bound = _accumulation_remainder(order.apply(A), _keys_in_order(v, order), ends, tile_ends, blocked, M, A_absv,
                                    A_absv)[0]
    x = A[0, :, None] * v
    exact = x.sum(0)
    if values == "constant":
        runs = [lambda X: u * np.sign(X)]  # every rounding up in magnitude: the worst case
    else:
        signs = np.random.default_rng(11)
        runs = [lambda X: u * np.sign(X)] + [lambda X: u * signs.choice([-1.0, 1.0], size=X.shape) for _ in range(5)]
    for delta in runs:
        acc, first = _walk_accumulation(x, order.sizes, blocked, delta)
        rem = np.abs(acc - exact - first)
        assert np.all(rem <= bound), (rem, bound)
    if values == "constant":
        assert np.all(rem >= 0.9 * bound), (rem, bound)


def _emulated_gradient_errors(q, k, v, do, dtype, dot):
    """(|dQ|, |dK|, |dV| errors of the emulated kernel against the float64 reference, the kernel's Precision): our
    kernel's arithmetic (l in fp64, Delta from the fp32 O), libm exp on the CPU."""
    from flashcheck.reference import attention, attention_backward

    o, lse, o32 = fa2_forward(q, k, v, dtype=dtype, dot=dot, l_accumulate="float64", return_fp32_o=True)
    got = fa2_backward(q, k, v, o, lse, do, dtype=dtype, dot=dot, delta_o=o32)
    O, L = attention(q, k, v)
    exact = attention_backward(q, k, v, O, L, do)
    pr = Precision(dtype, dot, exp="libm", l_accumulate="float64", delta_from="fp32")
    return [np.abs(g - e) for g, e in zip(got, exact)], pr


def _adversary(name: str):
    """The module bench/adversaries/NAME.py (its `build` makes the adversarial input; bench/ is not a package)."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / "bench" / "adversaries" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("l_accumulate", ["float32", "float64"])
def test_l_sum_charges_its_merges_in_the_format_of_l(l_accumulate):
    """Uniform rows (q = 0: every P_j = exp2(0) = 1, the max never moves, so no rescale rounds), T tiles of b
    keys: l's first-order error on the data (forward._l_sum_error) is u sum over the tiles of the partial sums
    2..b of the tile's rowsum, plus u_l sum_{t >= 2} L_t for the merges l + rowsum, plus (an fp64 l) the one
    conversion of l into fp32 (bounds.md sec. 3, "l's format")."""
    from flashcheck.proofs.bounds.forward import _forward

    N, b, u = 256, 64, 2.0**-24
    T = N // b
    rng = np.random.default_rng(0)
    q, k, v = np.zeros((1, 1, 2, 16)), rng.standard_normal((1, 1, N, 16)), rng.standard_normal((1, 1, N, 16))
    pr = Precision("float32", "ieee", exp="libm", block_k=b, l_accumulate=l_accumulate)
    F = _forward(q, k, v, None, False, None, None, None, pr, "probabilistic")
    u_l, conv = (u, 0.0) if l_accumulate == "float32" else (2.0**-53, u)
    within = T * sum(range(2, b + 1)) / N
    merges = sum(t * b / N for t in range(2, T + 1))
    np.testing.assert_allclose(F.parts.l_sum_det, u * within + u_l * merges + conv, rtol=1e-12)


@pytest.mark.parametrize("family", ["rising_logits", "uniform_rows"])
def test_emulation_with_l_in_fp64_is_within_the_lse_bound_of_an_fp64_l(family):
    """The emulation of our kernel's l (fp32 rowsums into an fp64 l) against the bound that charges its merges at
    2^-53 (the fp32-l emulation's LSE errs up to ~u T / 2 relative more: its bound is the fp32 one)."""
    from flashcheck.reference import attention
    from flashcheck.structured import structured_inputs

    rng = np.random.default_rng(3)
    x = structured_inputs(family, 1, 1, 1, 8, 2048, 16, rng)
    q, k, v = (round_to(a, "float16") for a in (x.q, x.k, x.v))
    o, lse = fa2_forward(q, k, v, dtype="float16", dot="fp16", l_accumulate="float64")
    O, L = attention(q, k, v)
    for kind in ("worst_case", "probabilistic"):
        fb = forward_bound(q, k, v, precision=Precision("float16", "fp16", exp="libm", l_accumulate="float64"),
                           kind=kind)
        assert worst_ratio(np.abs(lse - L), fb.lse) <= 1.0, kind
        assert worst_ratio(np.abs(o - O), fb.o) <= 1.0, kind


def test_step_sign_with_a_masked_key_is_within_the_probabilistic_o_bound():
    """bench/adversaries/step_sign_o.py with one key masked (fp32 ieee): uniform rows, V = +a then -a(1 + eps), so the
    P.V chain's partial sums climb and come back with one rounding residue per binade each way: the fluctuation
    around O is systematic. A masked row takes the order-free branch of the bound, whose random model of that
    fluctuation this exceeded (min bound/observed 0.50 at N_k = 16384, d = 64; bounds.md sec. 6)."""
    from flashcheck.reference import attention

    mod = _adversary("step_sign_o")
    q, k, v = (round_to(x, "float32") for x in mod.build(16384, 16, 1e-3, nq=2))
    mask = np.ones((1, 1, 2, 16384), dtype=bool)
    mask[..., 1] = False
    o, _ = fa2_forward(q, k, v, dtype="float32", dot="ieee", mask=mask, l_accumulate="float64")
    O, _ = attention(q, k, v, mask=mask)
    fb = forward_bound(q, k, v, mask=mask, precision=Precision("float32", "ieee", exp="libm", l_accumulate="float64"))
    assert worst_ratio(np.abs(o - O), fb.o) <= 1.0


@pytest.mark.parametrize("dtype,dot", [("float16", "fp16"), ("bfloat16", "bf16")])
def test_p_rounding_set_by_the_logits_is_within_the_probabilistic_o_bound(dtype, dot):
    """bench/adversaries/p_residue_o.py: the logits choose each P~'s residue modulo the operand's ulp, so the keys of
    V = +1 round up and those of V = -1 down: P's rounding errors add coherently, which their former random model
    (0.68 of the bound at N_k = 4096, fp16) did not cover; they are now charged worst case (bounds.md sec. 6)."""
    from flashcheck.reference import attention

    mod = _adversary("p_residue_o")
    q, k, v = mod.build(4096, 16, dtype)
    o, _ = fa2_forward(q, k, v, dtype=dtype, dot=dot, l_accumulate="float64")
    O, _ = attention(q, k, v)
    fb = forward_bound(q, k, v, precision=Precision(dtype, dot, exp="libm", l_accumulate="float64"))
    assert worst_ratio(np.abs(o - O), fb.o) <= 1.0


@pytest.mark.parametrize("dtype,dot", [("float16", "fp16"), ("bfloat16", "bf16")])
def test_p_rounding_set_by_the_logits_is_within_the_probabilistic_dv_bound(dtype, dot):
    """bench/adversaries/p_residue_dv.py, the backward's twin: rows whose q sets the residue of the recomputed P so
    that it rounds up where dO = +1 and down where dO = -1 (0.54 of the former random model's dV bound at
    N_q = 4096, fp16); P's and dS's roundings into the operand format are now charged worst case."""
    mod = _adversary("p_residue_dv")
    q, k, v, do = mod.build(4096, 16, dtype)
    err, pr = _emulated_gradient_errors(q, k, v, do, dtype, dot)
    assert worst_ratio(err[2], backward_bound(q, k, v, do, precision=pr).dv) <= 1.0


@pytest.mark.parametrize("fmt", ["float16", "bfloat16", "tf32"])
def test_rounding_on_data_uses_the_kernels_conversion_bit_for_bit(fmt):
    """common._round_nearest is the conversion the kernel performs (torch's fp16/bf16 round to nearest even, the
    H100's tf32 truncation), subnormals and binade edges included: the roundings evaluated on the data
    (bounds.md sec. 6) are only as good as this."""
    import torch

    from flashcheck.proofs.bounds.common import _round_nearest
    from flashcheck.proofs.bounds.logits import tf32_truncated

    rng = np.random.default_rng(3)
    low = -30 if fmt == "float16" else -125
    x = np.concatenate([np.exp2(rng.uniform(low, 3, 20000)), np.exp2(np.arange(low, 3.0)),
                        np.exp2(np.arange(low, 3.0)) * (1 + 2.0**-11)])
    x = x.astype(np.float32).astype(np.float64)
    x = x[x >= 2.0**-126]  # below fp32's normal range the kernel may flush (ftz); the bound calls it unknown
    if fmt == "tf32":
        want = tf32_truncated(x)
    else:
        want = torch.as_tensor(x, dtype=torch.float32).to(getattr(torch, fmt)).double().numpy()
    got = _round_nearest(x, fmt, truncate=fmt == "tf32")
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, f"{fmt}: {bad.size} of {x.size} differ, first x = {x[bad[0]]!r}: {got[bad[0]]!r} vs {want[bad[0]]!r}"


@pytest.mark.parametrize("fmt,truncate", [("float16", False), ("bfloat16", False), ("tf32", True)])
def test_rounding_on_data_interval_holds_every_value_of_the_range(fmt, truncate):
    """For x anywhere in [lo, hi] the rounding's relative error RN(x)/x - 1 lies in centre +- half-width, known or
    not; narrow ranges are mostly known, ranges across a rounding boundary are not."""
    from flashcheck.proofs.bounds.common import _E_MIN, _round_nearest, _rounding_on_data
    from flashcheck.proofs.bounds.precision import TRUNCATION_ERROR, UNIT_ROUNDOFF

    rng = np.random.default_rng(4)
    lo = np.exp2(rng.uniform(-20, 0, 4000))
    hi = lo * (1 + np.exp2(rng.uniform(-24, -6, lo.size)))
    u = TRUNCATION_ERROR[fmt] if truncate else UNIT_ROUNDOFF[fmt]
    c, h, known = _rounding_on_data(lo, hi, fmt, u, truncate)
    # unknown values below the format's normal range are charged the subnormal floor apart (not u): not checked
    normal = 2.0 ** (_E_MIN[fmt] - 1)  # the format's smallest normal number
    for t in (0.0, 0.37, 1.0):
        x = lo + t * (hi - lo)
        rho = _round_nearest(x, fmt, truncate) / x - 1.0
        off = np.where(known | (lo >= normal), np.abs(rho - c) - h, 0.0)
        assert np.all(off <= 0), f"{fmt}: rho off its interval by {off.max():.3g} at t = {t}"
    narrow = hi - lo < lo * 2.0**-16
    assert known[narrow].mean() > 0.95 and known[~narrow].mean() < known[narrow].mean()


def test_a_planted_error_in_the_rounding_on_data_is_caught(monkeypatch):
    """The on-data term is what keeps the O bound above p_residue_o's coherent roundings (min bound/observed 1.13
    at N_k = 4096, fp16): with the known roundings' values dropped (centre 0, only their uncertainty kept) the
    bound must fail on that input, or the regression test above could not fail."""
    from flashcheck.proofs.bounds import common, forward
    from flashcheck.reference import attention

    mod = _adversary("p_residue_o")
    q, k, v = mod.build(4096, 16, "float16")
    o, _ = fa2_forward(q, k, v, dtype="float16", dot="fp16", l_accumulate="float64")
    O, _ = attention(q, k, v)
    pr = Precision("float16", "fp16", exp="libm", l_accumulate="float64")
    assert worst_ratio(np.abs(o - O), forward_bound(q, k, v, precision=pr).o) <= 1.0

    def dropped(*args, **kwargs):
        c, h, known = common._rounding_on_data(*args, **kwargs)
        return np.where(known, 0.0, c), h, known

    monkeypatch.setattr(forward, "_rounding_on_data", dropped)
    assert worst_ratio(np.abs(o - O), forward_bound(q, k, v, precision=pr).o) > 1.0


def test_fma_step_residue_interval_holds_the_true_rounding_error():
    """forward._rn_residue, exhaustively over the residue classes at a resolution of g / 128 (several grid steps
    either side of 0, intervals of half-width 0, g / 1000 and g / 7, accumulators with both last-bit parities):
    where it says `known`, the true error RN(acc + x) - (acc + x) of an np.float32 addition lies in ce +- he for
    every x of the interval (its ends and interior points); narrow intervals are mostly known."""
    from flashcheck.proofs.bounds.forward import _rn_residue

    g = 2.0**-23  # the grid of the binade [1, 2)
    x = np.arange(-4 * 128, 4 * 128 + 1) * (g / 128)
    seen = 0
    for w in (0.0, g / 1024, 9 * g / 64):
        known, ce, he = _rn_residue(x, np.full_like(x, w), np.full_like(x, g / 2))
        assert known.mean() > (0.9 if w < g / 100 else 0.5), (w, known.mean())
        for acc in (1.5, 1.5 + g, 1.25 + 3 * g, 1.75 + 2 * g):  # fp32 values on the grid, even and odd last bit
            for t in (0.0, 0.125, 0.5, 0.8125, 1.0):
                xs = x - w + 2 * t * w  # exact in float64: dyadic, multiples of 2^-40
                exact = acc + xs  # exact: |acc + xs| < 2, multiples of 2^-40
                err = np.float32(exact).astype(np.float64) - exact
                off = np.abs(err - ce) - he
                assert np.all(off[known] <= 0), f"acc={acc} w={w} t={t}: off by {off[known].max():.3g}"
                seen += known.sum()
    assert seen > 0


def _exact_fp32_fma_chain(p, v):
    """acc_j = RN32(acc_{j-1} + p_j v_j) exactly (p = 1 and fp32 v, or p, v with <= 12 significant bits: the
    products and the sums are exact in float64, one rounding to fp32), per row and column; returns the per-step relative
    errors delta (rows, Nk, dv) and the computed sums."""
    rows, n = p.shape
    acc = np.zeros((rows, v.shape[-1]))
    delta = np.zeros((rows, n, v.shape[-1]))
    for j in range(n):
        t = acc + p[:, j, None] * v[None, j, :]
        acc = t.astype(np.float32).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            delta[:, j] = np.where(t != 0, (acc - t) / t, 0.0)
    return delta, acc


@pytest.mark.parametrize("family", ["constant", "step_sign", "random", "positive", "constant_wide_frame",
                                    "positive_off_centre"])
def test_fma_chain_on_data_bounds_the_exact_chains_first_order_error(family):
    """forward._fma_chain_on_data on exactly known summands (P~ = p, one frame F = l, no weight error): the
    first-order error sum_j delta_j X_j of an exact fp32 FMA chain (np.float32, ties to even) never exceeds it,
    a frame known to a factor 1.5 only leaves every step at its worst case, and where most steps are known
    (constant V, step_sign) the bound exceeds it by < 2% of the worst case
    u sum_j |X_j| it replaces: a wrong sign of the known steps' errors would show."""
    from flashcheck.proofs.bounds.forward import _fma_chain_on_data, _partial_abs_sums

    rng = np.random.default_rng(7)
    rows, n, dv = 3, 2048, 4
    u = 2.0**-24

    def bits12(x):  # <= 12 significant bits: products exact, sums of 24-bit values exact in float64
        e = np.floor(np.log2(np.abs(x)))
        return np.round(x * 2.0 ** (11 - e)) * 2.0 ** (e - 11)

    if family in ("constant", "step_sign", "constant_wide_frame"):
        p = np.ones((rows, n))
        a = (0.5 + rng.random(dv)).astype(np.float32).astype(np.float64)  # p = 1: any fp32 v is exact here
        v = np.tile(a, (n, 1))
        if family == "step_sign":
            v[n // 2:] = -(a * (1 + 2.0**-10)).astype(np.float32).astype(np.float64)
    else:
        p = bits12(np.exp(rng.standard_normal((rows, n)) - 3.0))
        v = bits12(rng.standard_normal((n, dv)) + (0.0 if family == "random" else 2.0))
    l = p.sum(-1)
    A = p / l[:, None]
    delta, acc = _exact_fp32_fma_chain(p, v)
    X = np.cumsum(A[:, :, None] * v[None], axis=1)
    first = np.abs((delta * X).sum(1))
    sizes = (64,) * (n // 64)
    T = len(sizes)
    F = np.broadcast_to(l[:, None], (rows, T))
    F_lo, F_hi, p_lo, p_hi = F, F, p, p
    if family == "constant_wide_frame":  # frame and P~ known to a factor 1.5 only: no binade, no residue known
        F_lo, F_hi, p_lo, p_hi = F / 1.5, F * 1.5, p / 1.5, p * 1.5
    if family == "positive_off_centre":  # P~ and the frame anywhere in intervals of ~2^-20, not at their centres
        r = rng.random((4,) + p.shape)
        p_lo, p_hi = p * (1 - r[0] * 2.0**-20), p * (1 + r[1] * 2.0**-20)
        F_lo, F_hi = F * (1 - r[2, :, :T] * 2.0**-20), F * (1 + r[3, :, :T] * 2.0**-20)
    bound, sums = _fma_chain_on_data(A, v, p_lo, p_hi, np.zeros_like(p), F_lo, F_hi, np.zeros((rows, T), dtype=bool),
                                     sizes, u, np.full(rows, 1.0 + 2.0 * (n + T) * u))
    ends = np.arange(n)
    np.testing.assert_allclose(sums, _partial_abs_sums(A, v, ends, ends[63::64], 1), rtol=1e-12)
    assert np.all(first <= bound), (first / bound).max()
    worst = u * np.abs(X).sum(1)
    if family == "constant_wide_frame":  # every step charged its worst case (constant V: the error is a good part of it)
        assert np.all(bound >= worst) and (first / worst).max() > 0.3
    assert np.all(bound <= worst * (1 + 2.0**-20))  # never above the worst case it replaces
    if family in ("constant", "step_sign"):  # almost every step known: the bound is the error, up to 2% of the worst case
        assert np.all(bound - first <= 0.02 * u * np.abs(X).sum(1)), ((bound - first) / (u * np.abs(X).sum(1))).max()


def test_a_planted_error_in_the_fma_chain_on_data_is_caught(monkeypatch):
    """step_sign_o (uniform rows, V = +a then -a (1 + 2^-10), fp32 ieee, emulation, N_k = 4096): the O bound holds
    with the FMA chain's known roundings entering signed (min bound/observed ~1.01), and fails with their
    centres dropped (only their uncertainty kept): the on-data chain is what holds it."""
    from flashcheck.proofs.bounds import forward
    from flashcheck.reference import attention

    mod = _adversary("step_sign_o")
    q, k, v = mod.build(4096, 16, 1e-3)
    o, _ = fa2_forward(q, k, v, dtype="float32", dot="ieee", l_accumulate="float64")
    O, _ = attention(q, k, v)
    pr = Precision("float32", "ieee", exp="libm", l_accumulate="float64")
    assert worst_ratio(np.abs(o - O), forward_bound(q, k, v, precision=pr).o) <= 1.0

    residue = forward._rn_residue

    def dropped(*args):
        known, ce, he = residue(*args)
        return known, 0.0 * ce, he

    monkeypatch.setattr(forward, "_rn_residue", dropped)
    assert worst_ratio(np.abs(o - O), forward_bound(q, k, v, precision=pr).o) > 1.0

@pytest.mark.parametrize("fmt,truncate", [("float16", False), ("bfloat16", False), ("tf32", True)])
def test_dS_rounding_on_data_holds_the_kernels_dS(fmt, truncate):
    """backward._dS_rounding_on_data: for every fp32 P~ in [p_lo, p_hi] and dP^ - Delta^ in [g_lo, g_hi], the kernel's
    dS = round_fmt(fl32(P~ fl32(dP^ - Delta^))) has the sign of the range and a magnitude in [R_lo, R_hi] wherever the
    entry is `bounded` (fp16 subnormals included: dS ~ 1/N_k at long rows). dQ's bound takes such an entry's whole
    error from that range (bounds.md sec. 6, "the whole error of a known entry"), so it is only as good as this."""
    from flashcheck.proofs.bounds.backward import _dS_rounding_on_data
    from flashcheck.proofs.bounds.common import _round_nearest
    from flashcheck.proofs.bounds.precision import _model

    dot = {"float16": "fp16", "bfloat16": "bf16", "tf32": "tf32"}[fmt]
    M = _model(Precision("float32" if fmt == "tf32" else fmt, dot))
    rng = np.random.default_rng(5)
    n = 20000
    p_lo = np.exp2(rng.uniform(-20, 0, n))
    p_hi = p_lo * (1 + np.exp2(rng.uniform(-22, -8, n)))
    g_lo = rng.choice([-1.0, 1.0], n) * np.exp2(rng.uniform(-6, 4, n))
    g_hi = g_lo + np.abs(g_lo) * np.exp2(rng.uniform(-22, -8, n))
    g_lo[:200], g_hi[:200] = -np.abs(g_lo[:200]), np.abs(g_lo[:200])  # ranges that hold 0: never bounded
    vis = np.ones(n, dtype=bool)
    _, _, known, R_lo, R_hi, bounded = _dS_rounding_on_data(M, fmt, vis, p_lo, p_hi, g_lo, g_hi, truncate=truncate)
    assert not bounded[:200].any() and bounded.mean() > 0.9 and known.mean() > 0.3
    assert np.all(R_lo <= R_hi) and np.all(known <= bounded)
    for t_p, t_g in ((0.0, 0.0), (1.0, 1.0), (0.3, 0.8), (0.9, 0.1)):
        p = (p_lo + t_p * (p_hi - p_lo)).astype(np.float32)
        p = np.clip(p, np.float32(p_lo), np.float32(p_hi))  # fp32 values of the range (ends rounded inward)
        p = np.where(p < p_lo, np.nextafter(p, np.float32(np.inf)), p)
        p = np.where(p > p_hi, np.nextafter(p, np.float32(0)), p).astype(np.float64)
        g = g_lo + t_g * (g_hi - g_lo)
        x = np.float32(p) * np.float32(g)  # fl32(P~ fl32(g)), the kernel's working value
        ok = bounded & (p >= p_lo) & (p <= p_hi)
        R = _round_nearest(np.abs(x.astype(np.float64)), fmt, truncate)
        assert np.all(np.sign(x[ok]) == np.sign(g_lo[ok]))
        off = np.where(ok, np.maximum(R_lo - R, R - R_hi), 0.0)
        assert off.max() <= 0, f"{fmt}: |dS| off [R_lo, R_hi] by {off.max():.3g}"


@pytest.mark.parametrize("dtype,dot", [("float16", "fp16"), ("bfloat16", "bf16")])
def test_dq_bound_fails_when_the_known_dS_errors_forget_the_rounding(dtype, dot, monkeypatch):
    """dQ's bound takes a dS entry whose rounded value is known on the data (its working value's range maps to one
    value, or to two neighbours) out of every other dS term and charges its whole error R - dS, signed (bounds.md
    sec. 6, "the whole error of a known entry"). That must be the rounding's own error too: with the range's ends
    left unrounded (the planted bug), the bound is exceeded on random inputs, the rounding being most of dQ's error."""
    from flashcheck.proofs.bounds import backward

    rng = np.random.default_rng(0)
    q, k, v, do = (round_to(rng.standard_normal(s), dtype) for s in ((1, 1, 64, 64), (1, 1, 4096, 64),
                                                                     (1, 1, 4096, 64), (1, 1, 64, 64)))
    err, pr = _emulated_gradient_errors(q, k, v, do, dtype, dot)
    assert worst_ratio(err[0], backward_bound(q, k, v, do, precision=pr).dq) <= 1.0
    monkeypatch.setattr(backward, "_round_nearest", lambda x, fmt, truncate=False: np.asarray(x, dtype=np.float64))
    assert worst_ratio(err[0], backward_bound(q, k, v, do, precision=pr).dq) > 1.0

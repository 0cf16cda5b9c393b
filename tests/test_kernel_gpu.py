"""GPU-only kernel tests (`pytest -m gpu` on the device machine): bf16 beside fp16/fp32, every head
dim 16..256 (80, 96, 111, 192 padded), the full shape set of flashcheck/strategies.py, long sequences
(N = 16k), logits at each dtype's overflow edge, and torch.compile through inductor.

Long sequences are checked on a slice of query rows: row i's O, LSE and dQ depend only on q_i, dO_i
and all of K, V, so the last R rows of an (Nq = Nk = N) problem are the (R, N) problem — with
causal=True becoming causal="bottom_right" — and forward_bound/backward_bound of that sub-problem
apply (dK, dV need every row and are covered at small N)."""
import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from flashcheck.strategies import LOGIT_EDGE, Case, Shape, cases, materialize, round_to
from tests.test_kernel_support import (CUDA, assert_within, kernel_precision, poisoned, record,
                                       reference_forward, run_kernel, to_numpy, to_torch)

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (run on the device machine)")]

ALL_DTYPES = ("float32", "float16", "bfloat16")


def _bounds_check(case, dtype, dot_precision=None, backward=True):
    from flashcheck.proofs.bounds import backward_bound, forward_bound
    from flashcheck.reference import attention_backward

    inp = materialize(case, dtype)
    out = run_kernel(inp, case, dtype, backward=backward, dot_precision=dot_precision)
    ref_o, ref_lse = reference_forward(inp, case)
    prec = kernel_precision(dtype, case.shape.d, dot_precision)
    kw = dict(scale=inp.scale, causal=case.causal, window=case.window, mask=inp.mask, precision=prec)
    fb = forward_bound(inp.q, inp.k, inp.v, **kw)
    r = [assert_within("O", out[0], ref_o, fb.o), assert_within("LSE", out[1], ref_lse, fb.lse)]
    if backward:
        ref = attention_backward(inp.q, inp.k, inp.v, ref_o, ref_lse, inp.do, scale=inp.scale,
                                 causal=case.causal, window=case.window, mask=inp.mask)
        bb = backward_bound(inp.q, inp.k, inp.v, inp.do, **kw)
        r += [assert_within(n, g, w, b) for n, g, w, b in
              zip(("dQ", "dK", "dV"), out[2:], ref, (bb.dq, bb.dk, bb.dv))]
    record(f"{case} {dtype} {dot_precision}: worst |err|/bound {[round(x, 3) for x in r]}")


@settings(deadline=None, max_examples=10)  # each new shape compiles 4 kernels (~10 s)
@given(case=cases(max_d=None), dtype=st.sampled_from(ALL_DTYPES))
@example(case=Case(Shape(1, 4, 2, 65, 130, 192), causal="bottom_right", seed=1), dtype="bfloat16")
@example(case=Case(Shape(2, 4, 2, 63, 65, 96), window=(31, 4), mask="random", seed=2), dtype="float16")
def test_gpu_forward_backward_within_bound(case, dtype):
    _bounds_check(case, dtype)


@pytest.mark.parametrize("dtype,d", [("bfloat16", d) for d in (16, 80, 96, 111, 192, 256)]
                         + [("float32", 256), ("float16", 80), ("float32", 111)])
def test_gpu_every_head_dim(dtype, d):
    _bounds_check(Case(Shape(1, 2, 1, 70, 129, d), causal=True, seed=d), dtype)


def test_gpu_tf32_dot_precision():
    _bounds_check(Case(Shape(1, 2, 2, 128, 128, 64), seed=9), "float32", "tf32")


@pytest.mark.slow  # 16k keys: minutes of host time for the bounds beside the rest of the suite (H100: 214 s)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_long_sequence_rows_within_bound(dtype, causal):
    """N = 16k, d = 128: O, LSE, dQ of the last 128 query rows against the bounds of that slice."""
    from flashcheck.proofs.bounds import backward_bound, forward_bound
    from flashcheck.reference import attention as ref_attention
    from flashcheck.reference import attention_backward
    from flashcheck.kernels import attention

    N, R, d = 16384, 128, 128
    rng = np.random.default_rng(16)
    q, k, v, do = (round_to(rng.standard_normal((1, 2, N, d)), dtype) for _ in range(4))
    tq, tk, tv = (to_torch(x, dtype, True) for x in (q, k, v))
    with poisoned():
        o, lse = attention(tq, tk, tv, causal=causal, return_lse=True)
        (dq,) = torch.autograd.grad(o, (tq,), to_torch(do, dtype))
    sub = dict(causal="bottom_right" if causal else False)
    qs, dos = q[:, :, -R:], do[:, :, -R:]
    ref_o, ref_lse = ref_attention(qs, k, v, **sub)
    prec = kernel_precision(dtype, d)
    fb = forward_bound(qs, k, v, precision=prec, **sub)
    assert_within("O", to_numpy(o[:, :, -R:]), ref_o, fb.o)
    assert_within("LSE", to_numpy(lse[:, :, -R:]), ref_lse, fb.lse)
    rdq, _, _ = attention_backward(qs, k, v, ref_o, ref_lse, dos, **sub)
    bb = backward_bound(qs, k, v, dos, precision=prec, **sub)
    assert_within("dQ", to_numpy(dq[:, :, -R:]), rdq, bb.dq)
    assert torch.isfinite(o).all() and torch.isfinite(dq).all()


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("causal", [False, "bottom_right"])
def test_gpu_no_nan_at_the_logit_overflow_edge(dtype, causal):
    """Logit standard deviation at the dtype's edge (flashcheck.strategies.LOGIT_EDGE): exp2 of the
    shifted logits must never see inf − inf; everything finite and within the bounds."""
    d = 64
    c = np.sqrt(LOGIT_EDGE[dtype])  # q·k/sqrt(d) has std c² for unit-variance directions
    rng = np.random.default_rng(5)
    case = Case(Shape(1, 2, 1, 200, 333, d), causal=causal, seed=5)
    inp = materialize(case, dtype)
    q = round_to(rng.standard_normal(inp.q.shape) * c, dtype)
    k = round_to(rng.standard_normal(inp.k.shape) * c, dtype)
    inp = type(inp)(q=q, k=k, v=inp.v, do=inp.do, mask=None, scale=inp.scale)
    o, lse, dq, dk, dv = run_kernel(inp, case, dtype, backward=True)
    for name, x in (("O", o), ("LSE", lse), ("dQ", dq), ("dK", dk), ("dV", dv)):
        assert np.isfinite(x).all(), f"{name} has non-finite entries at logit std {c * c:.3g}"
    from flashcheck.proofs.bounds import forward_bound

    ref_o, ref_lse = reference_forward(inp, case)
    fb = forward_bound(q, k, inp.v, scale=inp.scale, causal=causal,
                       precision=kernel_precision(dtype, d))
    assert_within("O", o, ref_o, fb.o)
    assert_within("LSE", lse, ref_lse, fb.lse)


def test_gpu_torch_compile_inductor_fullgraph():
    from flashcheck.kernels import attention

    torch._dynamo.reset()

    def f(q, k, v):
        return attention(q, k, v, causal=True).float().square().sum()

    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(2, 4, 300, 64, device="cuda", dtype=torch.bfloat16, generator=g)
               .requires_grad_() for _ in range(3))
    ge = torch.autograd.grad(f(q, k, v), (q, k, v))
    cf = torch.compile(f, fullgraph=True)
    gc = torch.autograd.grad(cf(q, k, v), (q, k, v))
    for a, b in zip(ge, gc):
        assert torch.equal(a, b)

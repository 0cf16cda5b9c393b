"""The Triton backward (dQ, dK, dV through autograd) agrees with flashcheck.reference.attention_backward within
flashcheck.proofs.bounds.backward_bound; masked rows give exactly zero gradients; LSE is differentiable too.

CPU: TRITON_INTERPRET=1, float32 and float16; outputs poisoned before each run.
"""
import dataclasses

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from flashcheck.strategies import Case, Shape, cases, materialize
from tests.test_kernel_forward import DTYPES, KERNEL_HEAD_DIMS, KERNEL_SHAPES
from tests.test_kernel_support import (assert_within, kernel_precision, needs_kernel, record,
                                       reference_backward, reference_forward, run_kernel)


def check_backward(case: Case, dtype: str):
    from flashcheck.proofs.bounds import backward_bound

    inp = materialize(case, dtype)
    _, _, dq, dk, dv = run_kernel(inp, case, dtype, backward=True)
    ref_o, ref_lse = reference_forward(inp, case)
    rdq, rdk, rdv = reference_backward(inp, case, ref_o, ref_lse)
    prec = kernel_precision(dtype, case.shape.d)
    b = backward_bound(inp.q, inp.k, inp.v, inp.do, scale=inp.scale, causal=case.causal,
                       window=case.window, mask=inp.mask, precision=prec)
    r = [assert_within(n, g, w, bd) for n, g, w, bd in
         (("dQ", dq, rdq, b.dq), ("dK", dk, rdk, b.dk), ("dV", dv, rdv, b.dv))]
    record(f"{case} {dtype}: worst |err|/bound dQ {r[0]:.3f} dK {r[1]:.3f} dV {r[2]:.3f}")


@needs_kernel
@settings(deadline=None)
@given(case=cases(head_dims=KERNEL_HEAD_DIMS, base=KERNEL_SHAPES), dtype=st.sampled_from(DTYPES))
@example(case=Case(Shape(2, 4, 2, 33, 47, 32), causal="bottom_right", window=(7, 0), seed=1),
         dtype="float32")
@example(case=Case(Shape(1, 4, 1, 40, 23, 16), mask="fully_masked_rows", seed=2), dtype="float16")
@example(case=Case(Shape(1, 2, 2, 17, 17, 111), causal=True, values="outliers", seed=3), dtype="float32")
def test_backward_matches_reference_within_bound(case, dtype):
    check_backward(case, dtype)


@needs_kernel
def test_fully_masked_rows_have_zero_gradients_and_no_nan():
    """Rows with nothing visible: O = 0, LSE = −inf, dQ row = 0, and no contribution to dK, dV."""
    import torch

    from flashcheck.kernels import attention
    from tests.test_kernel_support import DEVICE

    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, n, 16, generator=g).to(DEVICE).requires_grad_() for n in (20, 35, 35))
    mask = torch.ones(1, 1, 20, 35, dtype=torch.bool)
    mask[..., 3, :] = False
    mask[..., 17:, :] = False
    o, lse = attention(q, k, v, mask=mask.to(DEVICE), return_lse=True)
    assert torch.all(o[:, :, 3] == 0) and torch.all(o[:, :, 17:] == 0)
    assert torch.all(lse[:, :, 3] == float("-inf")) and torch.all(lse[:, :, 17:] == float("-inf"))
    do = torch.randn_like(o)
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), do)
    assert all(torch.isfinite(t).all() for t in (o, dq, dk, dv))
    assert torch.all(dq[:, :, 3] == 0) and torch.all(dq[:, :, 17:] == 0)
    # dK, dV equal those of the problem without the masked rows
    keep = [i for i in range(20) if i != 3 and i < 17]
    q2 = q.detach()[:, :, keep].requires_grad_()
    k2, v2 = (t.detach().requires_grad_() for t in (k, v))
    o2 = attention(q2, k2, v2)
    _, dk2, dv2 = torch.autograd.grad(o2, (q2, k2, v2), do[:, :, keep])
    torch.testing.assert_close(dk, dk2, rtol=0, atol=1e-5)
    torch.testing.assert_close(dv, dv2, rtol=0, atol=1e-5)


@needs_kernel
def test_lse_gradient_is_softmax():
    """∂(Σ LSE)/∂s = softmax(S), so d(Σ LSE)/dq = scale · softmax(S) K: the kernel's dq (dO = 0, the
    dLSE term alone: dS = P ∘ dLSE), float32 and float16, against that float64 product computed in
    numpy, within flashcheck.proofs.bounds.lse_gradient_bound (a missing or wrong-signed dLSE term, or a
    missing scale, is an O(|K|) error)."""
    import torch

    from flashcheck.kernels import attention
    from flashcheck.proofs.bounds import lse_gradient_bound
    from tests.test_kernel_support import DEVICE, TORCH_DTYPES

    for dtype in ("float32", "float16"):
        g = torch.Generator().manual_seed(2)
        tdt = TORCH_DTYPES[dtype]
        q, k, v = (torch.randn(1, 1, n, 16, generator=g).to(tdt) for n in (18, 33, 33))
        qf, kf = (t.double().numpy() for t in (q, k))  # exactly the values the kernel gets
        s = qf @ kf.swapaxes(-1, -2) / 4.0
        a = np.exp(s - s.max(-1, keepdims=True))
        gq_ref = (a / a.sum(-1, keepdims=True)) @ kf / 4.0
        qk = q.to(DEVICE).requires_grad_()
        _, lse = attention(qk, k.to(DEVICE), v.to(DEVICE), return_lse=True)
        (gq,) = torch.autograd.grad(lse.sum(), qk)
        bound = lse_gradient_bound(qf, kf, precision=kernel_precision(dtype, 16))
        assert_within(f"d(Σ LSE)/dq ({dtype})", gq.double().cpu().numpy(), gq_ref, bound)


@needs_kernel
def test_backward_is_finite_at_logits_near_3e8():
    """Regression (found by `make audit`): fp32, logit std ~3e8 gave NaN in dK/dV.

    At |s| ~ 1e8 the rounding of s·log2(e) and LSE·log2(e) (ulp ~ 16) pushed the recomputed exponent
    s2 − lse2 tens above 0, so P = exp2(·) reached ~1e19 and dK overflowed to inf − inf. P ≤ 1 holds
    exactly, and the kernels now clamp the exponent at 0 (which only moves P towards the truth)."""
    case = Case(Shape(1, 1, 1, 64, 64, 64), seed=0)
    inp = materialize(case, "float32")
    c = 2.0**14  # a power of two keeps the fp32 values exact; logit std = 8 · 2^28 / 8 ≈ 2.7e8
    inp = dataclasses.replace(inp, q=inp.q * c, k=inp.k * c)
    o, lse, dq, dk, dv = run_kernel(inp, case, "float32", backward=True)
    for name, t in (("O", o), ("LSE", lse), ("dQ", dq), ("dK", dk), ("dV", dv)):
        assert np.isfinite(t).all(), f"{name}: {np.size(t) - np.isfinite(t).sum()} non-finite entries"


@needs_kernel
def test_backward_within_bound_at_logits_near_3e8():
    """The input of the test above, now against the bounds: every bound is a number or +inf, never
    NaN (exp of a logit error > 709 used to give 0 * inf), and O, LSE, dQ, dK, dV are within them.

    At |s| ~ 1e9 the fp32 logits carry errors of thousands (ulp 64, d = 64 products), so most of
    these bounds are honestly vacuous (+inf); the test pins that they are never NaN and that the
    finite ones hold."""
    import warnings

    from flashcheck.proofs.bounds import backward_bound, forward_bound

    case = Case(Shape(1, 1, 1, 64, 64, 64), seed=0)
    inp = materialize(case, "float32")
    c = 2.0**14  # exact in fp32; logit std ≈ 2.7e8
    inp = dataclasses.replace(inp, q=inp.q * c, k=inp.k * c)
    o, lse, dq, dk, dv = run_kernel(inp, case, "float32", backward=True)
    ref_o, ref_lse = reference_forward(inp, case)
    rdq, rdk, rdv = reference_backward(inp, case, ref_o, ref_lse)
    prec = kernel_precision("float32", case.shape.d)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow / invalid-value warnings from the bounds either
        fb = forward_bound(inp.q, inp.k, inp.v, scale=inp.scale, precision=prec)
        bb = backward_bound(inp.q, inp.k, inp.v, inp.do, scale=inp.scale, precision=prec)
    pairs = (("O", o, ref_o, fb.o), ("LSE", lse, ref_lse, fb.lse), ("dQ", dq, rdq, bb.dq),
             ("dK", dk, rdk, bb.dk), ("dV", dv, rdv, bb.dv))
    for name, got, want, bound in pairs:
        assert not np.isnan(bound).any(), f"{name}: NaN bound"
        assert np.all(bound >= 0), name
        assert_within(name, got, want, bound)

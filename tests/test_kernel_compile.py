"""torch.compile traces flashcheck.kernels.attention as one custom op (flashcheck::attention_fwd/_bwd):
fullgraph=True (a graph break raises), same values as eager, gradients through the compiled graph.

CPU: the aot_eager backend (tracing, fake tensors, autograd; no C++ toolchain needed);
GPU: inductor (test_kernel_gpu.py)."""
import importlib

import pytest
import torch

from tests.test_kernel_support import DEVICE, needs_kernel


def _fn(q, k, v, mask):
    from flashcheck.kernels import attention

    o, lse = attention(q, k, v, causal="bottom_right", window=(5, None), mask=mask, return_lse=True)
    return (o * 2).sum() + lse.clamp_min(-1e4).sum(), o


@needs_kernel
def test_custom_op_passes_opcheck():
    """torch.library.opcheck: schema, fake (meta) implementation and autograd registration agree."""
    from flashcheck.kernels.attention import KernelConfig, TileConfig  # importing registers the ops

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, n, 16, generator=g).to(DEVICE).requires_grad_() for n in (12, 20, 20))
    tiles = KernelConfig(*[TileConfig(16, 16, 1, 1)] * 3).flat()  # the tile choice as the op carries it
    # (…, dot, p_split, save_res, tiles): with and without the rounding residual O_res as output
    for modes in ((False, False, []), (True, True, tiles)):
        args = (q, k, v, None, [], 0.25, True, -3, 4, 0, 0, "ieee", *modes)
        torch.library.opcheck(torch.ops.flashcheck.attention_fwd.default, args,
                              test_utils=("test_schema", "test_faketensor",
                                          "test_autograd_registration"))


@needs_kernel
@pytest.mark.parametrize("backend", ["aot_eager"])
def test_compiled_matches_eager_without_graph_breaks(backend):
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 4, n, 16, generator=g).to(DEVICE).requires_grad_() for n in (21, 30, 30))
    k2, v2 = (t.detach()[:, :2].requires_grad_() for t in (k, v))  # GQA 4:2
    mask = (torch.rand(1, 1, 21, 30, generator=g) < 0.8).to(DEVICE)
    loss_e, o_e = _fn(q, k2, v2, mask)
    grads_e = torch.autograd.grad(loss_e, (q, k2, v2))
    compiled = torch.compile(_fn, backend=backend, fullgraph=True)
    loss_c, o_c = compiled(q, k2, v2, mask)
    grads_c = torch.autograd.grad(loss_c, (q, k2, v2))
    # Same kernels, same launches, same inputs: bitwise equal.
    assert torch.equal(o_c, o_e)
    for a, b in zip(grads_c, grads_e):
        assert torch.equal(a, b)


@needs_kernel
@pytest.mark.parametrize("masking", ["none", "band_and_mask", "block_sparse"])
def test_eager_calls_are_the_custom_op_bit_for_bit(masking):
    """Eager calls go through a plain autograd.Function (_EagerAttention: the custom op's dispatch cost more host
    time than a short kernel runs); torch.compile traces the custom op. Both launch the same kernels: O, LSE and
    the gradients through O and LSE are the same bits."""
    from flashcheck.kernels import attention, build_block_mask

    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, n, 16, generator=g).to(DEVICE).requires_grad_() for n in (21, 30, 30))
    do, w = torch.randn(1, 2, 21, 16, generator=g).to(DEVICE), torch.randn(1, 2, 21, generator=g).to(DEVICE)
    kw = {"none": {},
          "band_and_mask": dict(causal="bottom_right", window=(5, None),
                                mask=(torch.rand(1, 1, 21, 30, generator=g) > 0.3).to(DEVICE)),
          "block_sparse": dict(mask=build_block_mask(21, 30, block_q=16, block_k=16, causal="bottom_right",
                                                     device=DEVICE))}[masking]
    outs = []
    for compiling in (False, True):
        # the custom op's path, as attention() takes it under torch.compile
        orig = torch.compiler.is_compiling
        torch.compiler.is_compiling = (lambda: True) if compiling else orig
        try:
            o, lse = attention(q, k, v, return_lse=True, **kw)
        finally:
            torch.compiler.is_compiling = orig
        name = type(o.grad_fn).__name__
        assert ("Eager" in name) != compiling, name
        loss = (o * do).sum() + (torch.where(torch.isinf(lse), 0.0, lse) * w).sum()
        outs.append((o, lse, *torch.autograd.grad(loss, (q, k, v))))
    for name, a, b in zip(("O", "LSE", "dQ", "dK", "dV"), *outs):
        assert torch.equal(a, b), f"{name}: eager and custom op differ by {(a - b).abs().max()}"


# leading (pointer, sm_scale) arguments each kernel takes before its launch record's ints (kernels/attention.py)
_LEADING = {"attn_fwd_kernel": 12, "attn_bwd_preprocess_kernel": 4, "attn_bwd_dkdv_kernel": 14,
            "attn_bwd_dq_kernel": 13}


@pytest.mark.parametrize("kw", [{}, dict(causal="bottom_right", window=(5, None), mask_shape=(1, 21, 30)),
                                dict(dot_precision="tf32")])
def test_launch_records_list_every_kernel_argument_in_order(kw):
    """A launch seen before goes straight to its binary's launcher (`_direct`), which takes every kernel parameter
    positionally: the leading pointers, the record's ints, then its constexprs. The records must list exactly the
    kernels' parameters in their order (a parameter added to a kernel and not to its record fails here)."""
    mod = importlib.import_module("flashcheck.kernels.attention")  # the module (the package exports the function)
    dtype = "float32" if "dot_precision" in kw else "bfloat16"
    q, k = mod.Layout.dense(dtype, (1, 2, 21, 16)), mod.Layout.dense(dtype, (1, 2, 30, 16))
    records = mod.launches(q, k, k, grad=True, interpret=False, **kw)
    assert [r.kernel for r in records] == list(_LEADING)
    for r in records:
        kernel = getattr(mod, r.kernel)
        assert mod._arguments_in_order(kernel, r, _LEADING[r.kernel]), (
            f"{r.kernel}: parameters {list(kernel.arg_names)} are not {_LEADING[r.kernel]} leading arguments, the "
            f"record's {len(r.ints)} ints and its constexprs {[n for n, _ in r.constexprs]}")


@needs_kernel
@pytest.mark.skipif(DEVICE != "cuda", reason="direct launches are a GPU path (the interpreter always goes through "
                                              "the JIT)")
@pytest.mark.parametrize("masking", ["none", "band_and_mask"])
def test_direct_launches_are_the_jit_launches_bit_for_bit(masking):
    """The second call with one layout launches the binaries the first call's JIT lookup found, directly: the same
    O, LSE and gradients, bit for bit, and all four kernels (forward, Δ, dK/dV, dQ) taken that way."""
    from flashcheck.kernels import attention

    mod = importlib.import_module("flashcheck.kernels.attention")
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 4, n, 64, generator=g).to(DEVICE, torch.bfloat16).requires_grad_()
               for n in (200, 333, 333))
    do = torch.randn(2, 4, 200, 64, generator=g).to(DEVICE, torch.bfloat16)
    kw = {"none": {}, "band_and_mask": dict(causal="bottom_right", window=(50, None),
                                            mask=(torch.rand(1, 1, 200, 333, generator=g) > 0.3).to(DEVICE))}[masking]
    mod._BINARIES.clear()
    outs, taken = [], []
    for _ in range(2):
        before = len(mod._BINARIES)
        o, lse = attention(q, k, v, return_lse=True, **kw)
        outs.append((o, lse, *torch.autograd.grad(o, (q, k, v), do)))
        taken.append(len(mod._BINARIES) - before)
    assert taken == [4, 0], f"binaries recorded by the first and second call: {taken} (want 4, then none new)"
    for name, a, b in zip(("O", "LSE", "dQ", "dK", "dV"), *outs):
        assert torch.equal(a, b), f"{name}: the direct launch and the JIT launch differ by {(a - b).abs().max()}"

"""torch.compile traces flashcheck.kernels.attention as one custom op (flashcheck::attention_fwd/_bwd):
fullgraph=True (a graph break raises), same values as eager, gradients through the compiled graph.

CPU: the aot_eager backend (tracing, fake tensors, autograd; no C++ toolchain needed);
GPU: inductor (test_kernel_gpu.py)."""
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

"""A declared domain bounds what is generated: `adapt` moves every drawn case inside it, and a causal
case gets the kernel's declared alignment (the kernel itself receives causal=True)."""
import pytest
from hypothesis import given, settings

from flashcheck.adapters import CAPABILITIES, Domain, KernelUnderTest, domain_from, resolve
from flashcheck.strategies import Case, Shape, adapt, cases


def kernel(supports=CAPABILITIES, **domain):
    return KernelUnderTest(name="k", supports=frozenset(supports), fn=None, domain=Domain(**domain))


DOMAINS = [dict(seq_multiple=128), dict(head_dims=frozenset({64, 128})), dict(min_n=2, max_n=64),
           dict(square_only=True), dict(gqa_ratios=frozenset({1, 4})), dict(causal_alignment="bottom_right")]


@pytest.mark.parametrize("domain", DOMAINS)
@settings(max_examples=40, derandomize=True)
@given(case=cases())
def test_adapted_cases_lie_inside_the_declared_domain(domain, case):
    k = kernel(**domain)
    s = adapt(case, k).shape
    d = k.domain
    for n in (s.Nq, s.Nk):
        assert n % d.seq_multiple == 0 and n >= d.min_n and (d.max_n is None or n <= d.max_n)
    assert d.head_dims is None or s.d in d.head_dims
    assert not d.square_only or s.Nq == s.Nk
    assert d.gqa_ratios is None or s.Hq // s.Hkv in d.gqa_ratios
    c = adapt(case, k).causal
    assert c is False or c == (True if d.causal_alignment == "top_left" else "bottom_right")


def test_undeclared_capabilities_are_dropped():
    drawn = Case(Shape(1, 4, 2, 65, 130, 32), causal="bottom_right", window=(7, 0), mask="random", scale=0.5)
    case = adapt(drawn, kernel(supports=()))
    assert case.scale == 1.0 and case.causal is False and case.mask is None and case.window is None and case.shape.Hkv == case.shape.Hq


def test_function_attributes_then_options():
    def fn(q, k, v):
        return q

    fn.head_dims, fn.seq_multiple, fn.causal_alignment = (64, 128), 16, "bottom-right"
    d = domain_from(fn, seq_multiple=32)
    assert d == Domain(head_dims=frozenset({64, 128}), seq_multiple=32, causal_alignment="bottom_right")
    with pytest.raises(ValueError, match="causal_alignment"):
        domain_from(fn, causal_alignment="diagonal")
    with pytest.raises(ValueError, match="built in"):
        resolve("torch-sdpa-math", causal_alignment="bottom-right")


def test_builtins_follow_the_device_they_run_on_not_the_machine():
    """On a GPU machine `--device cpu` still validates torch's CPU kernels: the CPU flash backend's
    backward is deterministic and its exp is libm, whatever torch.cuda.is_available() says."""
    import torch

    cpu, cuda = resolve("torch-sdpa-flash", device="cpu"), resolve("torch-sdpa-flash", device="cuda")
    assert "deterministic" in cpu.supports and "deterministic" not in cuda.supports
    assert cpu.precision(torch.float16).exp == "libm" and cuda.precision(torch.float16).exp == "ex2.approx"
    assert "backward" not in resolve("flex", device="cpu").supports
    assert "backward" in resolve("flex", device="cuda").supports


@pytest.mark.parametrize("shape, causal, window, masked", [
    ((1, 2, 1, 1, 17, 16), False, None, False),
    ((2, 4, 2, 63, 65, 80), True, None, True),
    ((1, 6, 3, 31, 1, 111), False, (2, None), False),
    ((1, 1, 1, 129, 63, 48), True, (7, 0), True),
])
def test_flex_padding_to_its_compiled_shapes_is_exact(shape, causal, window, masked):
    """Flex on CUDA runs on inputs padded to a few compiled shapes (flex_padded_shape) with the scale in a
    score_mod; the same code path, run eagerly on the CPU in float64, equals the float64 reference."""
    import numpy as np
    import torch

    from flashcheck import reference
    from flashcheck.adapters import _flex

    B, Hq, Hkv, Nq, Nk, d = shape
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, h, n, d, generator=g, dtype=torch.float64) for h, n in ((Hq, Nq), (Hkv, Nk), (Hkv, Nk)))
    mask = torch.rand(B, Hq, Nq, Nk, generator=g) < 0.7 if masked else None
    o, lse = _flex(on_cuda=True, compile=False).fn(q, k, v, causal=causal, scale=0.3, window=window, mask=mask)
    want_o, want_lse = reference.attention(q.numpy(), k.numpy(), v.numpy(), scale=0.3, causal=causal, window=window,
                                           mask=None if mask is None else mask.numpy())
    assert o.shape == (B, Hq, Nq, d)
    np.testing.assert_allclose(o.numpy(), want_o, rtol=0, atol=1e-12)
    np.testing.assert_allclose(lse.numpy(), want_lse, rtol=0, atol=1e-12)


@pytest.mark.slow
def test_compiled_flex_compiles_once_per_padded_shape(monkeypatch):
    """torch.compile'd Flex (the CUDA path, here on the CPU, forward only: CPU inductor Flex has no LSE)
    compiles once per `flex_padded_shape`, not per N, scale, mask or causal flag of the examples."""
    import torch
    import torch.nn.attention.flex_attention as fa
    from torch._dynamo.utils import counters

    from flashcheck.adapters import _flex, flex_padded_shape

    flex = fa.flex_attention

    def without_lse(q, k, v, *, return_lse=False, **kw):
        o = flex(q, k, v, **kw)
        return o, o.new_zeros(o.shape[:-1])

    monkeypatch.setattr(fa, "flex_attention", without_lse)
    torch._dynamo.reset()
    counters.clear()
    kernel = _flex(on_cuda=True, compile=True)
    padded = set()
    for i, (B, Hq, Hkv, Nq, Nk, d) in enumerate([(1, 2, 1, 33, 129, 64), (1, 4, 2, 65, 130, 48), (1, 2, 1, 1, 17, 64),
                                                 (1, 2, 2, 17, 17, 32), (1, 2, 2, 128, 128, 32), (1, 2, 1, 7, 127, 16)]):
        q, k, v = torch.randn(B, Hq, Nq, d), torch.randn(B, Hkv, Nk, d), torch.randn(B, Hkv, Nk, d)
        mask = torch.rand(B, Hq, Nq, Nk) < 0.7 if i % 2 else None
        kernel.fn(q, k, v, causal=bool(i % 3), scale=(0.5, 1.0, 1.75)[i % 3] / d ** 0.5, mask=mask)
        padded.add(flex_padded_shape(B, Hq, Hkv, Nq, Nk, d, d))
    assert counters["stats"]["unique_graphs"] == len(padded) == 2


def test_the_warm_up_compiles_flex_once_per_padded_shape():
    """flashcheck.warmup calls compiled Flex once per compile_key (padded shape, dtype, grad): the suite's
    shapes with and without gradients are 2 x (padded shapes <= 9) compiles, not one per distinct call."""
    from flashcheck.adapters import _flex, flex_padded_shape
    from flashcheck.strategies import SUITE_SHAPES
    from flashcheck.warmup import Signature, distinct

    sigs = [Signature(q=(B, Hq, Nq, d), k=(B, Hkv, Nk, d), v=(B, Hkv, Nk, d), dtype="bfloat16", grad=grad,
                      causal=False, window=None, mask=None, scale=True)
            for B, Hq, Hkv, Nq, Nk, d in SUITE_SHAPES for grad in (False, True)]
    padded = {flex_padded_shape(B, Hq, Hkv, Nq, Nk, d, d) for B, Hq, Hkv, Nq, Nk, d in SUITE_SHAPES}
    assert len(padded) <= 9 and len(distinct(_flex(on_cuda=True), sigs)) == 2 * len(padded)
    assert len(distinct(_flex(on_cuda=False), sigs)) == len(sigs)  # eager on the CPU: nothing to share

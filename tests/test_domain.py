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
    from flashcheck.warmup import Schedule, Signature

    def calls(kernel) -> int:  # what one compile process is handed, every signature recorded
        schedule = Schedule(kernel)
        for sig in sigs:
            schedule.add(sig)
        n = 0
        while schedule.next(0) is not None:
            schedule.finished(0)
            n += 1
        return n

    sigs = [Signature(q=(B, Hq, Nq, d), k=(B, Hkv, Nk, d), v=(B, Hkv, Nk, d), dtype="bfloat16", grad=grad,
                      causal=False, window=None, mask=None, scale=True)
            for B, Hq, Hkv, Nq, Nk, d in SUITE_SHAPES for grad in (False, True)]
    padded = {flex_padded_shape(B, Hq, Hkv, Nq, Nk, d, d) for B, Hq, Hkv, Nq, Nk, d in SUITE_SHAPES}
    assert len(padded) <= 9 and calls(_flex(on_cuda=True)) == 2 * len(padded)
    assert calls(_flex(on_cuda=False)) == len(sigs)  # eager on the CPU: nothing to share


# ---- the warm-up's compile keys (flashcheck.warmup, flashcheck.kernels.attention.launches) ------------------------

def sig(q, k, v=None, *, dtype="bfloat16", grad=False, causal=False, window=None, mask=None, strides=None):
    from flashcheck.warmup import Signature

    return Signature(q=q, k=k, v=v or k, dtype=dtype, grad=grad, causal=causal, window=window, mask=mask,
                     scale=True, strides=strides)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_launches_are_those_the_launcher_makes(dtype, monkeypatch):
    """flashcheck.kernels.attention.launches (what the warm-up keys on) predicts, from shapes and flags alone, every
    launch attention() and its backward make: grid, pointers, integer arguments, constexprs, warps,
    stages; on odd strides of size-1 dims too (numpy keeps them; the kernel passes every stride), and
    on K, V slices of longer sequences (their gradients are allocated contiguous)."""
    import importlib

    import torch

    ka = importlib.import_module("flashcheck.kernels.attention")  # the module (flashcheck.kernels.attention is also the function)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    made = []
    monkeypatch.setattr(ka, "_launch", lambda kernel, launch, *leading, fitting=False: made.append(launch))
    t = getattr(torch, dtype)
    calls = [  # q, k shapes, kwargs, odd strides
        ((1, 2, 17, 16), (1, 2, 33, 16), dict(causal="bottom_right")),
        ((2, 4, 1, 80), (2, 2, 64, 80), dict(window=(3, None))),
        ((1, 2, 64, 64), (1, 1, 64, 64), dict(mask_shape=(1, 1, 1, 64))),
        ((2, 1, 16, 32), (2, 1, 16, 32), dict(mask_shape=(1, 16, 16), causal=True, window=(0, 5))),
    ]
    for q_shape, k_shape, kw in calls:
        for grad in (False, True):
            for layout in ("dense", "odd", "gapped"):
                q, k, v = (torch.randn(s, dtype=t) for s in (q_shape, k_shape, k_shape))
                if layout == "odd":  # size-1 dims with strides other than the dense ones (as numpy leaves them)
                    q, k, v = (torch.empty_strided(x.shape, tuple(st * 3 if n == 1 else st for n, st in
                                                                  zip(x.shape, x.stride())), dtype=t).copy_(x)
                               for x in (q, k, v))
                if layout == "gapped":  # k, v: slices of longer sequences (the gradients come out dense)
                    k, v = (torch.randn(x.shape[:2] + (x.shape[2] + 5, x.shape[3]), dtype=t)[:, :, 3:-2]
                            for x in (k, v))
                q, k, v = (x.requires_grad_(grad) for x in (q, k, v))
                mask_shape = kw.get("mask_shape")
                mask = None if mask_shape is None else torch.rand(mask_shape) < 0.5
                args = {a: b for a, b in kw.items() if a != "mask_shape"}
                made.clear()
                o = ka.attention(q, k, v, mask=mask, **args)
                if grad:
                    torch.autograd.grad(o, (q, k, v), torch.randn_like(o))
                want = ka.launches(*(ka.Layout.of(x) for x in (q, k, v)), mask_shape=mask_shape, grad=grad,
                                   **args)
                assert tuple(made) == want, (q_shape, k_shape, kw, grad, layout)
                assert len(want) == (4 if grad else 1)


def test_int_classes_are_tritons():
    """flashcheck.warmup's integer classes partition values as the installed Triton specializes them
    (== 1 a constant; 32/64-bit; divisible by 16)."""
    from triton.backends.compiler import BaseBackend

    from flashcheck.warmup import _int_class

    try:
        from triton._C.libtriton import native_specialize_impl
    except ImportError:  # a Triton whose specialization is still Python's
        pytest.skip("this Triton has no native_specialize_impl")

    values = [0, 1, 2, 15, 16, 17, 32, 48, -1, -16, -17, -129, 2**31 - 16, 2**31, 2**31 + 1, -2**31 - 16]
    triton_key = {x: native_specialize_impl(BaseBackend, x, False, True, True) for x in values}
    for a in values:
        for b in values:
            assert (_int_class(a) == _int_class(b)) == (triton_key[a] == triton_key[b]), (a, b)


def test_ours_compile_key_names_the_binaries_a_call_compiles():
    """A signature's key is the set of Triton binaries its call compiles: the forward, and with a
    gradient the backward's three (bf16: a forward that also writes O's residual); calls differing only
    where Triton does not specialize share them."""
    ours, accurate = resolve("ours", device="cuda"), resolve("ours-accurate", device="cuda")
    key = ours.compile_key
    base = sig((1, 2, 17, 64), (1, 2, 33, 64), causal=True)
    assert len(key(base)) == 1 and len(key(sig((1, 2, 17, 64), (1, 2, 33, 64), causal=True, grad=True))) == 4
    # Nq 17 -> 49, Nk 33 -> 65: every integer argument keeps its class
    assert key(sig((1, 2, 49, 64), (1, 2, 65, 64), causal=True)) == key(base)
    assert key(sig((1, 2, 16, 64), (1, 2, 33, 64), causal=True)) != key(base)  # Nq divisible by 16
    assert key(sig((1, 2, 1, 64), (1, 2, 33, 64), causal=True)) != key(base)  # Nq = 1: a constant
    assert key(sig((1, 2, 17, 80), (1, 2, 33, 80), causal=True)) != key(base)  # head dim: a constexpr
    # bottom-right causal and a window (3, 0) are one band kernel with offsets of one class
    assert key(sig((1, 2, 17, 64), (1, 2, 33, 64), window=(3, 0))) == key(base)
    assert key(sig((1, 2, 17, 64), (1, 2, 33, 64), mask=(1, 1, 17, 33))) != \
        key(sig((1, 2, 17, 64), (1, 2, 33, 64), mask=(1, 2, 17, 33)))  # the mask's broadcast: its strides
    # fp32 stores no residual: the forward of a gradient call is the plain one
    f32 = sig((1, 2, 17, 64), (1, 2, 33, 64), dtype="float32")
    assert key(f32) < key(sig((1, 2, 17, 64), (1, 2, 33, 64), dtype="float32", grad=True))
    assert not key(base) & accurate.compile_key(base)  # P_SPLIT: the accurate forward is its own binary
    odd = sig((1, 1, 16, 16), (1, 1, 16, 16), strides=((272, 272, 16, 1), (257, 256, 16, 1), (256, 256, 16, 1)))
    assert key(odd) != key(sig((1, 1, 16, 16), (1, 1, 16, 16)))  # k's batch stride 257: not divisible by 16
    assert resolve("ours", device="cpu").compile_key is None  # the interpreter compiles nothing


def test_the_warm_up_schedule_compiles_each_binary_once_longest_first():
    """flashcheck.warmup.Schedule: an idle process gets the call adding the most binaries not compiled or
    in flight (backward-carrying first), prefers one sharing nothing with a call in flight, and calls
    whose binaries are all compiled are skipped; once every binary is compiled or in flight the suite
    may start (exhausted)."""
    from flashcheck.warmup import Schedule, Signature

    def s(n):
        return Signature(q=(1, 1, n, 16), k=(1, 1, n, 16), v=(1, 1, n, 16), dtype="float16", grad=False,
                         causal=False, window=None, mask=None, scale=False)

    need = {s(1): {"f1"}, s(2): {"f1", "b1", "b2"}, s(3): {"f2", "b1"}, s(4): {"f3"}, s(5): {"f1", "b2"}}
    kernel = KernelUnderTest(name="k", supports=frozenset(), fn=None,
                             compile_key=lambda sig: frozenset(need[sig]))
    schedule = Schedule(kernel)
    for sig in need:
        schedule.add(sig)
    assert schedule.next(0) == s(2)  # three binaries: first
    assert schedule.next(1) == s(4)  # s(3) shares b1 with the call in flight; s(4) shares nothing
    assert not schedule.exhausted()
    assert schedule.next(2) == s(3)  # only f2 is new: taken rather than idling
    assert schedule.next(3) is None and schedule.exhausted()  # s(1), s(5): every binary in flight
    schedule.finished(0)
    schedule.finished(1)
    schedule.finished(2)
    assert schedule.next(0) is None and schedule.idle()  # s(1), s(5): all their binaries are compiled
    assert schedule.calls == 3 and schedule.binaries() == {"f1", "f2", "f3", "b1", "b2"}


def test_a_compile_process_primes_triton_with_our_smallest_launch():
    """flashcheck.warmup.prime_triton (a compile process's start-up, while the dry run records) launches
    the backward's Δ kernel as flashcheck.kernels.attention.launches describes it, and it runs."""
    import os

    import torch

    from flashcheck.warmup import prime_triton

    interpreting = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
    if not interpreting and not torch.cuda.is_available():
        pytest.skip("the Triton kernel needs CUDA or TRITON_INTERPRET=1")
    prime_triton("cpu" if interpreting else "cuda")

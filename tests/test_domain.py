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

"""How a property judges the kernel under test: run it on the exact inputs of a case, compute the
float64 reference and the derived bound from those same inputs, and compare elementwise
(`abs(kernel - reference) <= bound`, fully masked rows compared exactly).

`check_within` is the suite's one comparison: NaN is never agreement (not even NaN against NaN), and a
non-finite kernel value where a finite one is expected fails whatever the bound. An exception from
the kernel is a refusal of that input: recorded (`record_refusal`) and the input rejected, so hypothesis
draws another; a property whose every input was refused is reported as refused, never as passed.
Inputs a property cannot use are `discard`ed and counted, never passed.

Failures say what differed, where, by how much, against which bound; every comparison is `note()`d
and its worst error / bound recorded for `flashcheck validate`'s table.
"""
from __future__ import annotations

import functools
import hashlib
import random
from dataclasses import dataclass, replace

import numpy as np
import pytest
from hypothesis import example, given, note, reject, seed

from flashcheck.adapters import Refusal
from flashcheck.pytest_plugin import hypothesis_settings, options, record, record_accepted, record_discard, record_refusal
from flashcheck.strategies import (CANONICAL, CANONICAL_SMALL, SMALL_SHAPES, SUITE_SHAPES, Case, Inputs, adapt, cases,
                                   materialize, visible)


# ---- the modules judged against: the float64 references and the derived bounds ----------------------

def reference_fn(name):
    from flashcheck import reference

    return getattr(reference, name)


def bound_fn(name):
    from flashcheck.proofs import bounds

    return getattr(bounds, name)


def bounds_source() -> str:
    return "flashcheck.proofs.bounds"


# ---- the dry run: calls recorded, nothing judged ------------------------------------------------------

def judging() -> bool:
    """False in the warm-up's dry run (`--flashcheck-dry-run`): the kernel is an exact stand-in that only
    records its calls, so the references, bounds and comparisons (most of the suite's host time) are
    skipped. No property's control flow reads their values (they only feed comparisons, which a
    stand-in passes; a failure's hint runs only on failure), so hypothesis draws the same inputs and
    every property makes the same kernel calls as for a correct kernel."""
    return not options().dry_run


@dataclass(frozen=True)
class Unjudged:
    """The placeholder reference / bound of the dry run: zero, broadcasting like the real arrays."""
    o: float = 0.0
    lse: float = 0.0
    dq: float = 0.0
    dk: float = 0.0
    dv: float = 0.0


# ---- the subject: kernel, device, dtype --------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _precision(kernel, dtype, head_dim):
    return kernel.precision(dtype, head_dim=head_dim)


@dataclass(frozen=True)
class Subject:
    kernel: object
    device: str
    dtype: str

    @property
    def torch_dtype(self):
        import torch

        return getattr(torch, self.dtype)

    def precision(self, head_dim: int):
        return _precision(self.kernel, self.torch_dtype, head_dim)

    def adapt(self, case: Case) -> Case:
        return adapt(case, self.kernel)

    def tensor(self, x, requires_grad=False):
        import torch

        t = torch.from_numpy(np.ascontiguousarray(x)).to(device=self.device, dtype=self.torch_dtype)
        return t.requires_grad_(requires_grad)

    def kwargs(self, case: Case, inputs: Inputs, mask=None) -> dict:
        import torch

        sup = self.kernel.supports
        kw = {}
        if case.causal:
            kw["causal"] = True  # the case carries the kernel's declared alignment (adapt)
        if case.window is not None:
            kw["window"] = case.window
        m = inputs.mask if mask is None else mask
        if m is not None:
            kw["mask"] = torch.from_numpy(np.ascontiguousarray(m)).to(self.device)
        if "scale" in sup:
            kw["scale"] = inputs.scale
        return kw


def subject_for(kernel_under_test, dtype) -> Subject:
    opts = options()
    reason = kernel_under_test.available(opts.device, getattr(__import__("torch"), dtype))
    if reason:
        pytest.skip(f"{kernel_under_test.name} on {opts.device} in {dtype}: {reason}")
    return Subject(kernel_under_test, opts.device, dtype)


@dataclass
class Run:
    """One kernel call: O and LSE as float64 arrays, and the torch tensors for autograd."""
    o: np.ndarray
    lse: np.ndarray | None
    o_t: object
    q_t: object
    k_t: object
    v_t: object
    case: Case
    subject: Subject


def to_numpy(t):
    return t.detach().to("cpu", dtype=__import__("torch").float64).numpy()


def refuse(subject: Subject, case: Case, refusal: Refusal, backward: bool = False):
    """The kernel raised on this input (in its backward when `backward`): record the refusal and reject the
    input (hypothesis draws another)."""
    record_refusal(case, subject.dtype, refusal, backward)
    note(f"refused: {case!r} dtype={subject.dtype}: {refusal}")
    reject()


def n_in_domain(kernel, n: int) -> bool:
    """Whether a sequence length a property derives (a key removed, keys split) is inside the kernel's
    declared domain; outside it, the property discards the input rather than provoke a refusal."""
    dom = kernel.domain
    return n >= dom.min_n and n % dom.seq_multiple == 0 and (dom.max_n is None or n <= dom.max_n)


def discard(reason: str):
    """This input says nothing about the property (e.g. no key left to remove): counted, then rejected."""
    record_discard(reason)
    reject()


def run(subject: Subject, case: Case, inputs: Inputs, *, grad=False, q=None, k=None, v=None, mask=None) -> Run:
    q = inputs.q if q is None else q
    k = inputs.k if k is None else k
    v = inputs.v if v is None else v
    q_t, k_t, v_t = (subject.tensor(x, grad) for x in (q, k, v))
    call = called(case, q, k)
    try:
        o_t, lse_t = subject.kernel(q_t, k_t, v_t, **subject.kwargs(case, inputs, mask))
    except Refusal as refusal:
        refuse(subject, call, refusal)
    expect = (q.shape[0], q.shape[1], q.shape[2], v.shape[-1])
    if tuple(o_t.shape) != expect:
        raise AssertionError(f"O has shape {tuple(o_t.shape)}, expected {expect} (B, Hq, Nq, dv)")
    record_accepted(call, subject.dtype)
    dead = int(masked_rows(call, replace(inputs, mask=inputs.mask if mask is None else mask)).sum())
    _dead_rows["count"] = max(_dead_rows["count"] or 0, dead)
    return Run(o=to_numpy(o_t), lse=None if lse_t is None else to_numpy(lse_t), o_t=o_t, q_t=q_t, k_t=k_t, v_t=v_t,
               case=case, subject=subject)


def called(case: Case, q, k) -> Case:
    """`case` with the shape of the call actually made: properties call the kernel on parts of the keys
    (split and merge, a masked key removed) or on repeated heads (GQA), and a refusal or an acceptance is
    recorded for what the kernel was given, not for the case it came from."""
    B, Hq, Nq, d = q.shape
    return replace(case, shape=replace(case.shape, B=B, Hq=Hq, Hkv=k.shape[1], Nq=Nq, Nk=k.shape[2], d=d))


def gradients(r: Run, do: np.ndarray):
    """dQ, dK, dV through the kernel's O; an exception from its backward is a refusal of the input."""
    import torch

    subject, call = r.subject, called(r.case, r.q_t, r.k_t)
    try:
        grads = torch.autograd.grad(r.o_t, (r.q_t, r.k_t, r.v_t), subject.tensor(do), allow_unused=True)
    except Exception as exc:  # noqa: BLE001 - the kernel's backward raised: its refusal
        refuse(subject, call, Refusal(exc), backward=True)
    record_accepted(call, subject.dtype, backward=True)
    out = []
    for g, x in zip(grads, (r.q_t, r.k_t, r.v_t)):
        out.append(np.zeros(tuple(x.shape)) if g is None else to_numpy(g))
    return out


# ---- the float64 reference and the bounds on the same inputs -----------------------------------------

def reference_kwargs(case: Case, inputs: Inputs, mask=None) -> dict:
    return {"scale": inputs.scale, "causal": case.causal, "window": case.window,
            "mask": inputs.mask if mask is None else mask}


def expected(case, inputs, *, q=None, k=None, v=None, mask=None):
    q = inputs.q if q is None else q
    k = inputs.k if k is None else k
    v = inputs.v if v is None else v
    if not judging():
        return 0.0, 0.0
    return reference_fn("attention")(q, k, v, **reference_kwargs(case, inputs, mask))


def expected_backward(case, inputs, o, lse):
    if not judging():
        return 0.0, 0.0, 0.0
    return reference_fn("attention_backward")(inputs.q, inputs.k, inputs.v, o, lse, inputs.do,
                                              **reference_kwargs(case, inputs))


def forward_bound(subject, case, inputs, *, q=None, k=None, v=None, mask=None):
    q = inputs.q if q is None else q
    k = inputs.k if k is None else k
    v = inputs.v if v is None else v
    if not judging():
        return Unjudged()
    precision = subject.precision(case.shape.d)
    return bound_fn("forward_bound")(q, k, v, precision=precision, **reference_kwargs(case, inputs, mask))


def backward_bound(subject, case, inputs):
    if not judging():
        return Unjudged()
    precision = subject.precision(case.shape.d)
    return bound_fn("backward_bound")(inputs.q, inputs.k, inputs.v, inputs.do, precision=precision,
                                      **reference_kwargs(case, inputs))


def masked_rows(case: Case, inputs: Inputs) -> np.ndarray:
    """(B, Hq, Nq): rows that see no key."""
    return ~visible(case, inputs.mask).any(-1)


# ---- comparison ----------------------------------------------------------------------------------------

# fully masked rows of the example being judged: its input's (`prepare`), or more in a call a property
# derives from it (`run`: a key masked, half the keys): named in every failure, as what may explain it
_dead_rows = {"count": None}


def describe(case, subject) -> str:
    dead = "" if _dead_rows["count"] is None else f" fully_masked_rows={_dead_rows['count']}"
    return (f"{case!r} dtype={subject.dtype} kernel={subject.kernel.name} precision={subject.precision(case.shape.d)} "
            f"bound={bounds_source()}{dead}")


def check_within(name: str, got, want, bound, *, case, subject, exact=None,
                 against="the float64 reference", hint=None) -> float:
    """Assert |got - want| <= bound elementwise; `exact` (broadcastable bool) marks entries compared exactly.

    NaN never agrees (not with NaN either); a NaN or Inf in `got` fails whatever the bound, except on
    `exact` entries where `want` holds the same infinity (LSE = -inf on fully masked rows).
    `hint(worst_index)`, when given, is called on failure and its text appended (e.g. what another
    causal alignment would explain). Returns the worst |got - want| / bound, records and notes it.
    In the dry run (`judging()` False) nothing is compared: 0.
    """
    if not judging():
        return 0.0
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        raise AssertionError(f"{name} has shape {got.shape}, expected {want.shape}")
    bound = np.broadcast_to(np.asarray(bound, dtype=np.float64), want.shape)
    exact = np.broadcast_to(np.asarray(False if exact is None else exact, bool), want.shape)
    same = got == want  # False for NaN, True for equal infinities
    with np.errstate(invalid="ignore"):
        diff = np.where(same, 0.0, np.abs(got - want))
    diff = np.where(np.isnan(diff), np.inf, diff)
    escaped = ~np.isfinite(got) & ~exact  # NaN/Inf from the kernel where a number is due
    diff = np.where(escaped, np.inf, diff)
    ok = np.where(exact, same, (diff <= bound) & ~escaped)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(diff == 0, 0.0, diff / bound)
    ratio = np.where((exact & ~same) | escaped | np.isnan(ratio), np.inf, ratio)
    worst_idx = np.unravel_index(int(np.argmax(ratio)), ratio.shape) if ratio.size else ()
    worst = float(ratio[worst_idx]) if ratio.size else 0.0
    # (batch, head, row, column): the row is a query for O/dQ/LSE and a key for dK/dV
    where = ", ".join(f"{a}={i}" for a, i in zip(("b", "h", "row", "col"), worst_idx))
    info = (f"{name}: worst error/bound {worst:.3g} at ({where}): kernel={float(got[worst_idx])!r} "
            f"reference={float(want[worst_idx])!r} |diff|={diff[worst_idx]:.3g} bound={bound[worst_idx]:.3g}")
    note(f"{describe(case, subject)}\n  {info}")
    record(ratio=worst, info=info)
    if not ok.all():
        bad = int((~ok).sum())
        kind = ("a fully masked row (compared exactly)" if exact[worst_idx] else
                "finiteness (NaN/Inf from finite inputs)" if escaped[worst_idx] else "the derived bound")
        extra = hint(worst_idx) if hint is not None else ""
        raise AssertionError(
            f"{name} differs from {against} beyond {kind}: {bad} of {ok.size} elements.\n"
            f"  worst at ({where}): kernel={float(got[worst_idx])!r} reference={float(want[worst_idx])!r} "
            f"|diff|={diff[worst_idx]:.6g} bound={bound[worst_idx]:.6g} (ratio {worst:.3g})\n"
            f"  {describe(case, subject)}" + (f"\n  {extra}" if extra else ""))
    return worst


def check_finite(name: str, got, *, case, subject, neginf_ok=None) -> None:
    """No NaN or Inf in `got` (from finite inputs); -inf allowed where `neginf_ok` (masked rows' LSE).
    Stated through `check_within` (expected: some finite number, any distance allowed)."""
    got = np.asarray(got, dtype=np.float64)
    allowed = np.zeros(got.shape, bool) if neginf_ok is None else np.broadcast_to(neginf_ok, got.shape) & (got == -np.inf)
    want = np.where(allowed, -np.inf, 0.0)
    check_within(f"{name} (finite)", got, want, np.inf, case=case, subject=subject, exact=allowed,
                 against="a finite value")


def other_alignment_hint(subject: Subject, case: Case, inputs: Inputs, got_o: np.ndarray):
    """A `hint` for O: on a non-square causal case, whether the other causal alignment explains the output."""
    s = case.shape
    if not case.causal or s.Nq == s.Nk:
        return None
    declared = "bottom-right" if case.causal == "bottom_right" else "top-left"
    other = replace(case, causal=True if case.causal == "bottom_right" else "bottom_right")
    other_name = "top-left" if declared == "bottom-right" else "bottom-right"
    flag = "top-left" if other_name == "top-left" else "bottom-right"

    def hint(_idx) -> str:
        o_other, _ = expected(other, inputs)
        bound_other = forward_bound(subject, other, inputs).o
        dead = masked_rows(other, inputs)[..., None]
        with np.errstate(invalid="ignore"):
            fits = np.where(dead, got_o == 0, np.abs(got_o - o_other) <= bound_other).all()
        if fits:
            return (f"the output matches {other_name} causal alignment (the kernel was judged {declared}): "
                    f"declare it with --causal-alignment {flag} or fn.causal_alignment = \"{other_name.replace('-', '_')}\"")
        return ""

    return hint


# ---- decorators ------------------------------------------------------------------------------------

_draw_seeds: dict = {}


def _draw_seed(group: str) -> int:
    """One hypothesis seed per draw group: fixed where the loaded profile is derandomized (the ci profile: the
    same draws every run, as derandomize promises), else random once per process (each run explores anew)."""
    from hypothesis import settings

    if group not in _draw_seeds:
        if settings.default.derandomize:
            _draw_seeds[group] = int.from_bytes(hashlib.sha256(f"flashcheck {group}".encode()).digest()[:8], "big")
        else:
            _draw_seeds[group] = random.SystemRandom().getrandbits(64)
    return _draw_seeds[group]


def property_cases(*, examples=None, shape_filter=None, draws: str | None = None, **case_kw):
    """@given(case=cases(**case_kw)) with the canonical examples first and the shared example database:
    shapes from SUITE_SHAPES (the reduced set under `--budget reduced`: small shapes, head dims <= 64,
    few examples). `shape_filter` reads (B, Hq, Hkv, Nq, Nk).

    draws: the properties of one group draw the same cases (one hypothesis seed, _draw_seed), so that the dQ, dK
    and dV properties judge one backward per case (backward_result's memo). Derandomized hypothesis seeds each test
    from its own function digest: without the group the three drew different cases and every one paid for its own
    kernel call and backward bound (the bound's host time is most of a property run on the fp32 kernels)."""
    if options().reduced:
        base = [b for b in SMALL_SHAPES if shape_filter is None or shape_filter(b)]
        strategy = cases(base=tuple(base), max_d=64, **case_kw)
    else:
        strategy = cases(pairs=[p for p in SUITE_SHAPES if shape_filter is None or shape_filter(p[:5])], **case_kw)
    reduced = options().reduced
    if examples is None:
        examples = CANONICAL_SMALL if reduced else CANONICAL

    def wrap(fn):
        fn = given(case=strategy)(fn)
        for ex in reversed(examples):
            fn = example(case=ex)(fn)
        if draws is not None:
            fn = seed(_draw_seed(draws))(fn)
        return hypothesis_settings()(fn)

    return wrap


def prepare(kernel_under_test, dtype, case: Case):
    """(subject, adapted case, exact inputs) for one example."""
    subject = subject_for(kernel_under_test, dtype)
    case = subject.adapt(case)
    inputs = materialize(case, dtype)
    _dead_rows["count"] = int(masked_rows(case, inputs).sum())
    return subject, case, inputs


_backward_memo: dict = {}


def backward_result(subject: Subject, case: Case, inputs: Inputs):
    """(kernel dq, dk, dv), (reference dq, dk, dv), bound — memoized so the dQ, dK and dV properties
    share one kernel call when they draw the same case (they do: property_cases(draws="backward"))."""
    key = (subject.kernel.name, subject.device, subject.dtype, case)
    if key not in _backward_memo:
        r = run(subject, case, inputs, grad=True)
        got = gradients(r, inputs.do)
        o, lse = expected(case, inputs)
        want = expected_backward(case, inputs, o, lse)
        if len(_backward_memo) > 64:
            _backward_memo.clear()
        _backward_memo[key] = (got, want, backward_bound(subject, case, inputs))
    return _backward_memo[key]

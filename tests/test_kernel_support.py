"""Shared harness of the kernel tests (no tests here): where the kernel runs, output poisoning,
running a `flashcheck.strategies.Case` through `flashcheck.kernels.attention`, and bound comparisons.

The kernel runs on CUDA when there is a GPU, else through the Triton interpreter on the CPU
(TRITON_INTERPRET=1 must be set before triton is imported: `make test` does it). Interpreter runs
are fp32/fp16 only: the interpreter cannot do bf16 dots.
"""
from __future__ import annotations

import contextlib
import os

import numpy as np
import pytest
import torch

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
CUDA = torch.cuda.is_available() and not INTERPRET
DEVICE = "cuda" if CUDA else "cpu"
RUNNABLE = CUDA or INTERPRET

needs_kernel = pytest.mark.skipif(
    not RUNNABLE, reason="needs CUDA, or TRITON_INTERPRET=1 to run the Triton kernel on the CPU")
TORCH_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


@contextlib.contextmanager
def poisoned():
    """Every float tensor torch.empty / torch.empty_like allocates is filled with NaN, so an
    output element the kernel fails to write shows up as NaN instead of stale memory."""
    empty, empty_like = torch.empty, torch.empty_like

    def _poison(t):
        if t.is_floating_point():
            t.fill_(float("nan"))
        return t

    torch.empty = lambda *a, **kw: _poison(empty(*a, **kw))
    torch.empty_like = lambda *a, **kw: _poison(empty_like(*a, **kw))
    try:
        yield
    finally:
        torch.empty, torch.empty_like = empty, empty_like


def to_torch(x: np.ndarray, dtype: str, requires_grad=False) -> torch.Tensor:
    t = torch.from_numpy(np.ascontiguousarray(x)).to(device=DEVICE, dtype=TORCH_DTYPES[dtype])
    return t.requires_grad_(requires_grad)


def to_numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(device="cpu", dtype=torch.float64).numpy()


def kernel_precision(dtype: str, d: int, dot_precision=None, block_mask=None, **modes):
    """Our kernel's Precision; `modes`: its precision options (precision=..., delta_from=...) as run."""
    from flashcheck.adapters import ours_precision

    return ours_precision(TORCH_DTYPES[dtype], dot_precision, head_dim=d, interpret=INTERPRET,
                          block_mask=block_mask, **modes)


def run_kernel(inp, case, dtype: str, *, backward=False, dot_precision=None, mask=None, **modes):
    """(o, lse[, dq, dk, dv]) as float64 arrays; outputs poisoned before the kernel runs.
    `modes`: the kernel's precision options (precision=..., delta_from=...)."""
    from flashcheck.kernels import attention

    q, k, v = (to_torch(x, dtype, backward) for x in (inp.q, inp.k, inp.v))
    if mask is None and inp.mask is not None:
        mask = torch.from_numpy(inp.mask).to(DEVICE)
    with poisoned():
        o, lse = attention(q, k, v, scale=inp.scale, causal=case.causal, window=case.window,
                           mask=mask, return_lse=True, dot_precision=dot_precision, **modes)
        if not backward:
            return to_numpy(o), to_numpy(lse)
        do = to_torch(inp.do, dtype)
        dq, dk, dv = torch.autograd.grad(o, (q, k, v), do)
    return tuple(to_numpy(t) for t in (o, lse, dq, dk, dv))


def reference_forward(inp, case):
    from flashcheck.reference import attention

    return attention(inp.q, inp.k, inp.v, scale=inp.scale, causal=case.causal, window=case.window,
                     mask=inp.mask)


def reference_backward(inp, case, o, lse):
    from flashcheck.reference import attention_backward

    return attention_backward(inp.q, inp.k, inp.v, o, lse, inp.do, scale=inp.scale,
                              causal=case.causal, window=case.window, mask=inp.mask)


def record(message: str):
    """hypothesis.note inside a property; nothing outside one."""
    from hypothesis import note
    from hypothesis.errors import InvalidArgument

    try:
        note(message)
    except InvalidArgument:
        pass


def assert_within(name: str, got: np.ndarray, want: np.ndarray, bound: np.ndarray):
    """|got − want| <= bound elementwise; NaN always fails; equal infinities (−inf LSE of a fully
    masked row) match exactly. The message says where, by how much, against which bound."""
    got, want, bound = np.broadcast_arrays(got, want, bound)
    same_inf = np.isinf(want) & (got == want)
    with np.errstate(invalid="ignore"):
        err = np.where(same_inf, 0.0, np.abs(got - want))
    bad = ~(err <= bound)  # NaN compares False: fails
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        ratio = np.where(bound > 0, err / np.where(bound > 0, bound, 1), np.inf)
        worst = tuple(int(i) for i in np.unravel_index(np.nanargmax(np.where(bad, ratio, -1)), err.shape))
        raise AssertionError(
            f"{name}: {int(bad.sum())} of {bad.size} entries outside the bound; first at {idx}: "
            f"got {got[idx]!r}, reference {want[idx]!r}, |diff| {err[idx]:.3e} > bound {bound[idx]:.3e}; "
            f"worst at {worst}: |diff| {err[worst]:.3e} vs bound {bound[worst]:.3e}")
    finite = bound > 0
    return float(np.max(err[finite] / bound[finite])) if finite.any() else 0.0

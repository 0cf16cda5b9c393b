"""Argument checking for every attention-like reference (ARCHITECTURE.md, "Conventions").

`check_attention_args` is the single place where shapes, dtypes and options are validated; each
failure is a ValueError or TypeError that names the argument and what was expected.
"""
from __future__ import annotations

from dataclasses import dataclass
import math
import numbers

import numpy as np

CAUSAL_VALUES = (False, True, "top_left", "bottom_right")


@dataclass(frozen=True)
class Problem:
    """Sizes of one attention call: q (B, Hq, Nq, d), k (B, Hkv, Nk, d), v (B, Hkv, Nk, dv)."""

    B: int
    Hq: int
    Hkv: int
    Nq: int
    Nk: int
    d: int
    dv: int
    group: int  # Hq // Hkv: query head h reads kv head h // group

    @property
    def full(self) -> tuple[int, int, int, int]:
        """Shape every mask, bias and probability matrix broadcasts to: (B, Hq, Nq, Nk)."""
        return (self.B, self.Hq, self.Nq, self.Nk)


def _floating(name: str, x) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.kind != "f":
        raise TypeError(f"{name} must be a real floating-point array, got dtype {a.dtype}")
    return a


def _rank4(name: str, a: np.ndarray, layout: str) -> None:
    if a.ndim != 4:
        raise ValueError(f"{name} must have rank 4 with layout {layout}, got shape {a.shape}")


def check_causal(causal) -> None:
    """`causal` must be one of False, True, "top_left", "bottom_right"."""
    if isinstance(causal, (bool, np.bool_)):
        return
    if isinstance(causal, str) and causal in ("top_left", "bottom_right"):
        return
    raise ValueError(
        f"causal must be one of False, True, 'top_left', 'bottom_right', got {causal!r}"
    )


def check_window(window) -> None:
    """`window` must be None or a pair (left, right) of non-negative ints or None."""
    if window is None:
        return
    if not isinstance(window, (tuple, list)) or len(window) != 2:
        raise ValueError(
            f"window must be None or a pair (left, right) of non-negative ints or None, got {window!r}"
        )
    for side, w in zip(("left", "right"), window):
        if w is None:
            continue
        if isinstance(w, (bool, np.bool_)) or not isinstance(w, numbers.Integral) or w < 0:
            raise ValueError(
                f"window {side} must be a non-negative int or None, got {w!r} in window={window!r}"
            )


def _broadcastable(name: str, a: np.ndarray, full: tuple[int, ...]) -> None:
    if a.ndim > 4:
        raise ValueError(f"{name} must broadcast to (B, Hq, Nq, Nk) = {full}, got shape {a.shape}")
    try:
        np.broadcast_shapes(a.shape, full)
        ok = np.broadcast_shapes(a.shape, full) == full
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{name} must broadcast to (B, Hq, Nq, Nk) = {full}, got shape {a.shape}")


def check_mask(name: str, mask, full: tuple[int, ...]) -> np.ndarray:
    """A boolean array broadcastable to `full` (True = attend)."""
    m = np.asarray(mask)
    if m.dtype != np.bool_:
        raise TypeError(f"{name} must be a boolean array (True = attend), got dtype {m.dtype}")
    _broadcastable(name, m, full)
    return m


def check_attention_args(
    q,
    k,
    v,
    *,
    scale=None,
    causal=False,
    window=None,
    mask=None,
    bias=None,
    dropout_p=0.0,
    dropout_mask=None,
) -> Problem:
    """Validate the arguments shared by every attention-like reference and return their sizes."""
    qa, ka, va = _floating("q", q), _floating("k", k), _floating("v", v)
    _rank4("q", qa, "(B, Hq, Nq, d)")
    _rank4("k", ka, "(B, Hkv, Nk, d)")
    _rank4("v", va, "(B, Hkv, Nk, dv)")
    B, Hq, Nq, d = qa.shape
    if ka.shape[0] != B:
        raise ValueError(f"k batch size must equal q's B = {B}, got k shape {ka.shape}")
    if va.shape[0] != B:
        raise ValueError(f"v batch size must equal q's B = {B}, got v shape {va.shape}")
    Hkv, Nk = ka.shape[1], ka.shape[2]
    if ka.shape[3] != d:
        raise ValueError(f"k head dim must equal q's d = {d}, got k shape {ka.shape}")
    if va.shape[1] != Hkv:
        raise ValueError(f"v heads must equal k's Hkv = {Hkv}, got v shape {va.shape}")
    if va.shape[2] != Nk:
        raise ValueError(f"v sequence length must equal k's Nk = {Nk}, got v shape {va.shape}")
    dv = va.shape[3]
    if min(B, Hq, Nq, d, Hkv, Nk, dv) < 1:
        raise ValueError(
            f"all sizes must be >= 1, got q {qa.shape}, k {ka.shape}, v {va.shape}"
        )
    if Hq % Hkv != 0:
        raise ValueError(
            f"q heads Hq = {Hq} must be a multiple of k/v heads Hkv = {Hkv} (GQA)"
        )
    problem = Problem(B=B, Hq=Hq, Hkv=Hkv, Nq=Nq, Nk=Nk, d=d, dv=dv, group=Hq // Hkv)

    if scale is not None:
        if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, numbers.Real) or not math.isfinite(scale):
            raise TypeError(f"scale must be None or a finite real number, got {scale!r}")
    check_causal(causal)
    check_window(window)
    if mask is not None:
        check_mask("mask", mask, problem.full)
    if bias is not None:
        _broadcastable("bias", _floating("bias", bias), problem.full)
    if isinstance(dropout_p, (bool, np.bool_)) or not isinstance(dropout_p, numbers.Real) or not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be a real number in [0, 1), got {dropout_p!r}")
    if dropout_p > 0.0 and dropout_mask is None:
        raise ValueError("dropout_mask (boolean, True = keep) is required when dropout_p > 0")
    if dropout_mask is not None:
        check_mask("dropout_mask", dropout_mask, problem.full)
    return problem


def check_backward_args(problem: Problem, o, lse, do) -> None:
    """o and do must be (B, Hq, Nq, dv) floating arrays; lse (B, Hq, Nq)."""
    want_o = (problem.B, problem.Hq, problem.Nq, problem.dv)
    want_lse = want_o[:3]
    for name, x, want in (("o", o, want_o), ("do", do, want_o), ("lse", lse, want_lse)):
        a = _floating(name, x)
        if a.shape != want:
            raise ValueError(f"{name} must have shape {want}, got {a.shape}")

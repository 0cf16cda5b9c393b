"""Merging two partial attention results over disjoint key sets (the split-KV / ring-attention step;
seed 002 step0, "the basic attention row-decomposition" P = [P_1 P_2]).

With O_k = softmax over key set k, LSE_k its log-sum-exp:
    lse = log(e^{lse1} + e^{lse2}) = m + log(e^{lse1 - m} + e^{lse2 - m}),  m = max(lse1, lse2)
    o   = (e^{lse1 - lse} o1 + e^{lse2 - lse} o2)
A side with LSE = -inf (no visible key) has weight 0; both -inf gives O = 0, LSE = -inf (safe max).
"""
from __future__ import annotations

import numpy as np

from flashcheck.reference.softmax import _divide_or_zero, safe_shift


def merge_states(o1, lse1, o2, lse2):
    """(o1, lse1) (..., N, dv), (..., N) and (o2, lse2) of the same shapes -> merged (o, lse)."""
    arrays = {}
    for name, x in (("o1", o1), ("lse1", lse1), ("o2", o2), ("lse2", lse2)):
        a = np.asarray(x)
        if a.dtype.kind != "f":
            raise TypeError(f"{name} must be a real floating-point array, got dtype {a.dtype}")
        arrays[name] = a.astype(np.float64)
    o1, lse1, o2, lse2 = arrays["o1"], arrays["lse1"], arrays["o2"], arrays["lse2"]
    if o1.shape != o2.shape or o1.ndim < 1:
        raise ValueError(f"o2 must have the shape of o1 (..., N, dv) = {o1.shape}, got {o2.shape}")
    for name, lse in (("lse1", lse1), ("lse2", lse2)):
        if lse.shape != o1.shape[:-1]:
            raise ValueError(f"{name} must have shape {o1.shape[:-1]} (o without its last axis), got {lse.shape}")
    shift = safe_shift(np.maximum(lse1, lse2))
    w1 = np.exp(lse1 - shift)  # e^{lse1 - m}, in [0, 1]
    w2 = np.exp(lse2 - shift)
    w = w1 + w2
    with np.errstate(divide="ignore"):  # log(0) = -inf when both sides are empty
        lse = shift + np.log(w)
    o = _divide_or_zero(w1[..., None] * o1 + w2[..., None] * o2, w[..., None])
    return o, lse

"""Standard attention with S and P materialized (seed 000, "Original Attention"; seed 002 eqs. (1)-(3)).

    S = scale * Q K^T + bias, masked to -inf where not visible
    P = softmax_rowwise(S) = diag(l)^{-1} exp(S - rowmax(S)),  l = rowsum(exp(S - rowmax(S)))
    O = dropout(P) V,  LSE = rowmax(S) + log(l)

This is the float64 ground truth every other variant is compared with.
"""
from __future__ import annotations

import math

import numpy as np

from flashcheck.reference.masks import visibility
from flashcheck.reference.shapes import Problem, check_attention_args
from flashcheck.reference.softmax import _divide_or_zero, safe_shift


def resolve_scale(scale, d: int) -> float:
    """`scale`, or the default 1/sqrt(d)."""
    return 1.0 / math.sqrt(d) if scale is None else float(scale)


def expand_kv(x: np.ndarray, group: int) -> np.ndarray:
    """(B, Hkv, N, d) -> (B, Hq, N, d): query head h reads kv head h // group (GQA)."""
    return np.repeat(x, group, axis=1)


def reduce_kv(dx: np.ndarray, group: int) -> np.ndarray:
    """The adjoint of `expand_kv`: sum the gradients of the `group` query heads sharing a kv head."""
    B, Hq, N, d = dx.shape
    return dx.reshape(B, Hq // group, group, N, d).sum(axis=2)


def masked_logits(q, k, problem: Problem, *, scale=None, causal=False, window=None, mask=None, bias=None):
    """S = scale * Q K^T (+ bias) with -inf where invisible, shape (B, Hq, Nq, Nk), and the visibility."""
    p = problem
    qf = np.asarray(q, dtype=np.float64)
    kf = expand_kv(np.asarray(k, dtype=np.float64), p.group)
    bias_full = None if bias is None else np.broadcast_to(np.asarray(bias, dtype=np.float64), p.full)
    vis = visibility(p.B, p.Hq, p.Nq, p.Nk, causal=causal, window=window, mask=mask)
    everything = slice(None)
    return logits_tile(qf, kf, resolve_scale(scale, p.d), bias_full, everything, everything, vis), vis


def logits_tile(q, k, scale: float, bias, rows: slice, cols: slice, vis: np.ndarray) -> np.ndarray:
    """One tile S_ij = scale * Q_i K_j^T (+ bias_ij), -inf where invisible: what a tiled kernel computes on chip.
    q (B, Hq, Nq, d) and k (B, Hq, Nk, d) already expanded to the query heads; bias broadcast to (B, Hq, Nq, Nk)."""
    s = scale * (q[:, :, rows] @ np.swapaxes(k[:, :, cols], -1, -2))
    if bias is not None:
        s = s + bias[:, :, rows, cols]
    return np.where(vis[:, :, rows, cols], s, -np.inf)


def masked_softmax(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """P = softmax(S) along the last axis and LSE, with the safe max: a fully masked row gives P = 0, LSE = -inf."""
    m = s.max(axis=-1)
    shift = safe_shift(m)
    e = np.exp(s - shift[..., None])
    l = e.sum(axis=-1)
    with np.errstate(divide="ignore"):  # log(0) = -inf for a fully masked row
        lse = shift + np.log(l)
    return _divide_or_zero(e, l[..., None]), lse


def apply_dropout(p: np.ndarray, dropout_p: float, dropout_mask) -> np.ndarray:
    """Kept entries scaled by 1/(1 - p), dropped entries 0; the identity when dropout_p = 0 and no mask."""
    if dropout_mask is None:
        return p
    return np.where(np.asarray(dropout_mask), p / (1.0 - dropout_p), 0.0)


def attention(
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
):
    """Standard attention: O = dropout(softmax(scale Q K^T + bias, masked)) V and LSE (natural log).

    q (B, Hq, Nq, d), k (B, Hkv, Nk, d), v (B, Hkv, Nk, dv) -> o (B, Hq, Nq, dv), lse (B, Hq, Nq).
    A fully masked row gives O = 0 and LSE = -inf. Dropout (with an explicit boolean `dropout_mask`,
    True = keep) acts on P after the LSE, so the LSE does not depend on it.
    """
    problem = check_attention_args(
        q, k, v, scale=scale, causal=causal, window=window, mask=mask, bias=bias,
        dropout_p=dropout_p, dropout_mask=dropout_mask,
    )
    s, _ = masked_logits(q, k, problem, scale=scale, causal=causal, window=window, mask=mask, bias=bias)
    p, lse = masked_softmax(s)
    p = apply_dropout(p, dropout_p, dropout_mask)
    o = p @ expand_kv(np.asarray(v, dtype=np.float64), problem.group)
    return o, lse

"""FlashAttention-2 forward (seed 002, "step2: flash-attn forward algorithm with tiling").

Outer loop over Q tiles Q_i (block_q rows), inner loop over K/V tiles K_j, V_j (block_k rows):
    P_i^(j)  = mask(scale Q_i K_j^T + bias)                      (logits; -inf where invisible)
    m_i^(j)  = max(m_i^(j-1), rowmax(P_i^(j)))
    S_i^(j)  = exp(P_i^(j) - m_i^(j))
    alpha    = exp(m_i^(j-1) - m_i^(j))                           (seed 002's delta_m)
    l_i^(j)  = alpha l_i^(j-1) + rowsum(S_i^(j))
    acc^(j)  = diag(alpha) acc^(j-1) + dropout(S_i^(j)) V_j       (un-normalized output)
then one division O_i = diag(l_i)^{-1} acc and LSE_i = m_i + log(l_i).
The code names the logits `s` and the exponentials `p` (the FA2 paper's names; seed 002 swaps P/S).
Tiles with no visible entry are skipped, as a kernel skips them; the safe max keeps
(-inf) - (-inf) away from exp for rows with nothing visible yet.
"""
from __future__ import annotations

import numpy as np

from flashcheck.reference.attention import expand_kv, logits_tile, resolve_scale
from flashcheck.reference.masks import visibility
from flashcheck.reference.shapes import Problem, check_attention_args
from flashcheck.reference.softmax import _divide_or_zero, safe_shift


def check_block(name: str, b) -> int:
    if isinstance(b, (bool, np.bool_)) or not isinstance(b, (int, np.integer)) or b < 1:
        raise ValueError(f"{name} must be a positive int, got {b!r}")
    return int(b)


def tile_ranges(n: int, block: int) -> list[slice]:
    """[0, b), [b, 2b), ..., the last tile shorter when b does not divide n."""
    return [slice(s, min(s + block, n)) for s in range(0, n, block)]


def forward_tiles(q, k, v, problem: Problem, *, block_q: int, block_k: int, scale=None, causal=False,
                  window=None, mask=None, bias=None, dropout_p=0.0, dropout_mask=None, tile_mask=None):
    """The FA2 double loop shared by `flash_attention_2_forward` and `block_sparse_attention`.

    `tile_mask` (optional, bool (B, Hq, n_q_tiles, n_k_tiles)) further restricts which tiles are visited.
    Returns (o, lse, tiles_visited).
    """
    p = problem
    sc = resolve_scale(scale, p.d)
    q_all = np.asarray(q, dtype=np.float64)
    k_all = expand_kv(np.asarray(k, dtype=np.float64), p.group)
    v_all = expand_kv(np.asarray(v, dtype=np.float64), p.group)
    vis = visibility(p.B, p.Hq, p.Nq, p.Nk, causal=causal, window=window, mask=mask)
    bias_all = None if bias is None else np.broadcast_to(np.asarray(bias, dtype=np.float64), p.full)
    keep = None if dropout_mask is None else np.broadcast_to(np.asarray(dropout_mask), p.full)
    o = np.zeros((p.B, p.Hq, p.Nq, p.dv))
    lse = np.empty((p.B, p.Hq, p.Nq))
    visited = 0
    for ti, rows in enumerate(tile_ranges(p.Nq, block_q)):
        n_rows = rows.stop - rows.start
        m_i = np.full((p.B, p.Hq, n_rows), -np.inf)
        l_i = np.zeros((p.B, p.Hq, n_rows))
        acc = np.zeros((p.B, p.Hq, n_rows, p.dv))
        for tj, cols in enumerate(tile_ranges(p.Nk, block_k)):
            vis_ij = vis[:, :, rows, cols]
            if tile_mask is not None:
                vis_ij = vis_ij & tile_mask[:, :, ti, tj, None, None]
            if not vis_ij.any():
                continue  # nothing visible in this tile for any batch/head: never loaded
            visited += 1
            s = np.where(vis_ij, logits_tile(q_all, k_all, sc, bias_all, rows, cols, vis), -np.inf)
            m_new = np.maximum(m_i, s.max(axis=-1))
            shift = safe_shift(m_new)
            alpha = np.exp(m_i - shift)  # exp(m_i^(j-1) - m_i^(j)); 0 while nothing was visible
            p_ij = np.exp(s - shift[..., None])
            l_i = alpha * l_i + p_ij.sum(axis=-1)
            if keep is not None:  # dropout acts on the numerator only; l_i stays the softmax denominator
                p_ij = np.where(keep[:, :, rows, cols], p_ij / (1.0 - dropout_p), 0.0)
            acc = alpha[..., None] * acc + p_ij @ v_all[:, :, cols, :]
            m_i = m_new
        o[:, :, rows, :] = _divide_or_zero(acc, l_i[..., None])  # the one division
        with np.errstate(divide="ignore"):  # log(0) = -inf: fully masked row
            lse[:, :, rows] = safe_shift(m_i) + np.log(l_i)
    return o, lse, visited


def flash_attention_2_forward(q, k, v, *, block_q: int = 64, block_k: int = 64, scale=None, causal=False,
                              window=None, mask=None, bias=None, dropout_p=0.0, dropout_mask=None):
    """FA2 forward: Q outer loop, un-normalized accumulator, one division at the end -> (o, lse).

    Same arguments and result as `flashcheck.reference.attention` plus the tile sizes.
    """
    problem = check_attention_args(q, k, v, scale=scale, causal=causal, window=window, mask=mask, bias=bias,
                                   dropout_p=dropout_p, dropout_mask=dropout_mask)
    o, lse, _ = forward_tiles(q, k, v, problem, block_q=check_block("block_q", block_q),
                              block_k=check_block("block_k", block_k), scale=scale, causal=causal,
                              window=window, mask=mask, bias=bias, dropout_p=dropout_p, dropout_mask=dropout_mask)
    return o, lse

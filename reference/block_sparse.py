"""Block-sparse FlashAttention forward (seed 001, "Block-Sparse Attention").

A block mask M (n_q_blocks, n_k_blocks), M[i, j] = True when query block i attends to key block j,
selects the tiles the FA2 loop visits; skipped tiles are never loaded. The result equals standard
attention with the block mask expanded elementwise and ANDed with causal/window/mask: where those
constraints are not block-aligned, the partial blocks are still masked elementwise.
"""
from __future__ import annotations

import math

import numpy as np

from flashcheck.reference.flash_attention_2 import check_block, forward_tiles
from flashcheck.reference.shapes import check_attention_args


def causal_block_mask(nq_blocks: int, nk_blocks: int) -> np.ndarray:
    """Lower-triangular block mask M[i, j] = (j <= i) (seed 001's causal block mask; top_left aligned,
    equal query and key block sizes)."""
    nq_blocks, nk_blocks = check_block("nq_blocks", nq_blocks), check_block("nk_blocks", nk_blocks)
    return np.tril(np.ones((nq_blocks, nk_blocks), dtype=bool))


def local_block_mask(n_blocks: int, width: int) -> np.ndarray:
    """Banded block mask M[i, j] = (|i - j| <= width) (seed 001's local block mask is width = 1)."""
    n_blocks = check_block("n_blocks", n_blocks)
    if isinstance(width, bool) or not isinstance(width, (int, np.integer)) or width < 0:
        raise ValueError(f"width must be a non-negative int, got {width!r}")
    i, j = np.indices((n_blocks, n_blocks))
    return np.abs(i - j) <= width


def expand_block_mask(block_mask, block_q: int, block_k: int, Nq: int, Nk: int) -> np.ndarray:
    """The elementwise mask of a block mask (..., n_q_blocks, n_k_blocks) -> (..., Nq, Nk)."""
    bm = np.asarray(block_mask)
    return np.repeat(np.repeat(bm, block_q, axis=-2), block_k, axis=-1)[..., :Nq, :Nk]


def block_sparse_attention(q, k, v, block_mask, *, block_size, scale=None, causal=False, window=None,
                           mask=None, bias=None, dropout_p=0.0, dropout_mask=None):
    """Block-sparse forward -> (o, lse). `block_size` is an int or (block_q, block_k); `block_mask` is
    boolean, broadcastable to (B, Hq, ceil(Nq/block_q), ceil(Nk/block_k))."""
    p = check_attention_args(q, k, v, scale=scale, causal=causal, window=window, mask=mask, bias=bias,
                             dropout_p=dropout_p, dropout_mask=dropout_mask)
    if isinstance(block_size, (tuple, list)) and len(block_size) == 2:
        block_q, block_k = (check_block("block_size", b) for b in block_size)
    else:
        block_q = block_k = check_block("block_size", block_size)
    tiles = (p.B, p.Hq, math.ceil(p.Nq / block_q), math.ceil(p.Nk / block_k))
    bm = np.asarray(block_mask)
    if bm.dtype != np.bool_:
        raise TypeError(f"block_mask must be a boolean array, got dtype {bm.dtype}")
    try:
        ok = bm.ndim <= 4 and np.broadcast_shapes(bm.shape, tiles) == tiles
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(
            f"block_mask must broadcast to (B, Hq, ceil(Nq/block_q), ceil(Nk/block_k)) = {tiles}, got {bm.shape}"
        )
    tile_mask = np.broadcast_to(bm, tiles)
    o, lse, _ = forward_tiles(q, k, v, p, block_q=block_q, block_k=block_k, scale=scale, causal=causal,
                              window=window, mask=mask, bias=bias, dropout_p=dropout_p,
                              dropout_mask=dropout_mask, tile_mask=tile_mask)
    return o, lse

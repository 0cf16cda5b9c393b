"""Block-sparse masks for the Triton kernel (seed 001, block-sparse FlashAttention).

The (Nq × Nk) visibility matrix is cut into tiles of block_q × block_k, the kernel's tile shape.
Each tile is *empty* (nothing visible: never visited), *full* (everything visible and inside
[0, Nq) × [0, Nk): visited without any elementwise mask) or *partial* (visited, with the
elementwise causal/window/dense mask applied). The kernel reads per (batch, head, query block)
lists of partial and full key blocks (forward, dQ) and per (batch, head, key block) lists of
partial and full query blocks (dK/dV) — the same tiles, indexed the other way round.

Batch and head dimensions of size 1 broadcast (stride 0 in the kernel).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class BlockSparseMask:
    """Tile lists plus the elementwise rule used on partial tiles.

    `kv_num_blocks[b, h, m]` partial key blocks of query block m are `kv_indices[b, h, m, :num]`;
    `full_kv_*` likewise for full blocks; `q_*` / `full_q_*` are the transposed lists
    (per key block). All index tensors are int32. `dense` is the boolean elementwise mask
    (True = attend; shape (B|1, H|1, Nq, Nk)) or None; `causal`/`window` are the band it was built
    with — the kernel applies dense ∧ band on partial tiles only.
    """

    block_q: int
    block_k: int
    nq: int
    nk: int
    kv_num_blocks: torch.Tensor
    kv_indices: torch.Tensor
    full_kv_num_blocks: torch.Tensor
    full_kv_indices: torch.Tensor
    q_num_blocks: torch.Tensor
    q_indices: torch.Tensor
    full_q_num_blocks: torch.Tensor
    full_q_indices: torch.Tensor
    dense: torch.Tensor | None = None
    causal: bool | str = False
    window: tuple | None = None

    @property
    def shape(self):
        """(B|1, H|1, Nq, Nk): the broadcast shape of the mask."""
        return (*self.kv_num_blocks.shape[:2], self.nq, self.nk)

    def tensors(self) -> list[torch.Tensor]:
        """The eight index tensors in the order the kernels take them."""
        return [self.kv_num_blocks, self.kv_indices, self.full_kv_num_blocks, self.full_kv_indices,
                self.q_num_blocks, self.q_indices, self.full_q_num_blocks, self.full_q_indices]

    def density(self) -> float:
        """Fraction of tiles visited (partial + full) over all tiles."""
        total = self.kv_indices.shape[-1] * self.kv_indices.shape[-2] * self.kv_num_blocks[..., 0].numel()
        visited = int(self.kv_num_blocks.sum()) + int(self.full_kv_num_blocks.sum())
        return visited / max(total, 1)


def _band_visibility(nq: int, nk: int, causal, window, device) -> torch.Tensor:
    """(Nq, Nk) bool: key j visible from query i under causal ∧ window (ARCHITECTURE.md).

    Deliberately not flashcheck.reference.masks.visibility: the kernel package keeps its own statement of the
    convention (in torch, on the mask's device), and tests/test_kernel_masks.py checks the two agree."""
    off = nk - nq if causal == "bottom_right" else 0
    i = torch.arange(nq, device=device)[:, None]
    j = torch.arange(nk, device=device)[None, :]
    vis = torch.ones(nq, nk, dtype=torch.bool, device=device)
    if causal is not False:
        vis &= j <= i + off
    if window is not None:
        left, right = window
        if left is not None:
            vis &= j >= i + off - left
        if right is not None:
            vis &= j <= i + off + right
    return vis


def _lists(flags: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of the last axis: number of True entries and their indices first (ascending)."""
    num = flags.sum(-1, dtype=torch.int32)
    order = torch.argsort((~flags).to(torch.int8), dim=-1, stable=True).to(torch.int32)
    return num.contiguous(), order.contiguous()


def build_block_mask(nq: int, nk: int, *, block_q: int, block_k: int, causal=False, window=None,
                     mask: torch.Tensor | None = None, device=None) -> BlockSparseMask:
    """Classify every block_q × block_k tile of causal ∧ window ∧ mask.

    `mask` is a boolean tensor broadcastable to (B, H, Nq, Nk) (True = attend); its batch/head
    dims of size 1 stay size 1 in the lists. block sizes must be powers of two >= 16 (kernel tiles).
    """
    for name, b in (("block_q", block_q), ("block_k", block_k)):
        if not isinstance(b, int) or b < 16 or b & (b - 1):
            raise ValueError(f"{name} must be a power of two >= 16, got {b!r}")
    if device is None:
        device = mask.device if mask is not None else "cpu"
    vis = _band_visibility(nq, nk, causal, window, device)
    dense = None
    if mask is not None:
        if mask.dtype != torch.bool:
            raise TypeError(f"mask must be a bool tensor (True = attend), got {mask.dtype}")
        if mask.dim() > 4:
            raise ValueError(f"mask must have at most 4 dims, got shape {tuple(mask.shape)}")
        m4 = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
        if m4.shape[2] not in (1, nq) or m4.shape[3] not in (1, nk):
            raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to (B, H, {nq}, {nk})")
        dense = m4.expand(m4.shape[0], m4.shape[1], nq, nk).to(device).contiguous()
        vis = vis[None, None] & dense
    else:
        vis = vis[None, None]
    nb, nh = vis.shape[:2]
    mq, mk = -(-nq // block_q), -(-nk // block_k)
    padded = torch.zeros(nb, nh, mq * block_q, mk * block_k, dtype=torch.bool, device=device)
    padded[:, :, :nq, :nk] = vis
    tiles = padded.view(nb, nh, mq, block_q, mk, block_k)
    any_vis = tiles.any(dim=5).any(dim=3)
    all_vis = tiles.all(dim=5).all(dim=3)  # out-of-range entries are False: edge tiles never full
    partial = any_vis & ~all_vis
    kv_num, kv_idx = _lists(partial)
    fkv_num, fkv_idx = _lists(all_vis)
    q_num, q_idx = _lists(partial.transpose(-1, -2))
    fq_num, fq_idx = _lists(all_vis.transpose(-1, -2))
    return BlockSparseMask(block_q, block_k, nq, nk, kv_num, kv_idx, fkv_num, fkv_idx,
                           q_num, q_idx, fq_num, fq_idx, dense=dense, causal=causal,
                           window=tuple(window) if window is not None else None)


def from_flex_block_mask(block_mask, *, block_q: int | None = None,
                         block_k: int | None = None) -> BlockSparseMask:
    """Convert torch's FlexAttention `BlockMask` into our tile lists.

    The elementwise rule of a flex mask is its Python `mask_mod`, which a Triton kernel cannot
    call; it is materialized once (`create_mask`) and tiles are re-classified at the requested
    block sizes (default: the BlockMask's own BLOCK_SIZE), so full/partial stay exact at any Nq, Nk.
    """
    try:
        from torch.nn.attention.flex_attention import BlockMask, create_mask
    except ImportError as e:  # pragma: no cover - old torch
        raise TypeError("FlexAttention BlockMask needs torch.nn.attention.flex_attention") from e
    if not isinstance(block_mask, BlockMask):
        raise TypeError(f"block_mask must be a flex_attention.BlockMask, got {type(block_mask).__name__}")
    nq, nk = block_mask.seq_lengths
    bq, bk = block_mask.BLOCK_SIZE
    block_q = block_q or bq
    block_k = block_k or bk
    b, h = block_mask.kv_num_blocks.shape[:2]
    device = block_mask.kv_num_blocks.device
    dense = create_mask(block_mask.mask_mod, b, h, nq, nk, device=device)
    return build_block_mask(nq, nk, block_q=block_q, block_k=block_k, mask=dense, device=device)

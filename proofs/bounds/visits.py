"""The order in which our kernel's backward visits the inner axis of an accumulation, for each row of its outer axis
(proofs/bounds.md sec. 8, "The accumulation chains on the data", masked heads; Precision.block_q_dq, block_k_dkdv,
tile_lists).

The dQ kernel runs one program per query block of block_q_dq rows over the key tiles of dq_key_tile; the dK/dV kernel
one per key block of block_k_dkdv keys over the query tiles of block_q, the GQA group's query heads in turn. Each
program visits its PARTIAL inner tiles first (some entry of block x tile masked), ascending, then its FULL ones
ascending, and skips the tiles where nothing is visible (kernels/tiles.py inner_tiles, partial_start, full_start).
Which tiles are partial: under tile_lists "band" those that the band (causal, window) or the sequence end cuts (a
dense mask is applied elementwise on every visited tile and moves nothing); under "lists" a block-sparse mask's, every
tile with an invisible entry of the block x tile padded to full tiles (a ragged outer block: all its tiles). A masked
entry of a visited tile adds an exact 0 (P~ = 0: dS = 0 and P~ dO = 0; fma(0, x, acc) = acc), as do the skipped
tiles' entries had they been visited, so where those tiles sit in the order changes no partial sum: they go last.

This states the order from the visibility (what is partial, what is full); proofs/emulation.py walks the kernel's
loops themselves (its port of _band_range and the lists), and tests/test_masked_chains.py checks the two agree and
that the emulation agrees with the Triton kernel."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Visits:
    """An accumulation's inner axis (length n) in the kernel's visiting order, per row of its outer axis.

    blocks: (B|1, H|1, M, L) int64, the visiting orders: inner indices, every tile `block` wide (a ragged tile padded
      at the front with -1, which reads a zero, as backward._visiting), tiles with nothing visible last; None: every
      row takes the axis as it is.
    row_block: (R,) which of the M orders each row follows.
    known: (B|1, H|1, R) bool, the rows whose order is stated (the others: order-free bounds, worst case)."""
    blocks: np.ndarray | None
    row_block: np.ndarray
    known: np.ndarray
    block: int

    def rows(self, r) -> "Visits":
        """These visits restricted to the outer rows r (a slice or index array)."""
        return Visits(self.blocks, self.row_block[r], self.known[..., r], self.block)

    def _index(self):
        """(B|1, H|1, R, L) per-row indices, -1 for a zero; None: the axis as it is."""
        return None if self.blocks is None else self.blocks[:, :, self.row_block]

    def take(self, x):
        """x (B, H, R, n) along its last axis in each row's order: (B, H, R, L)."""
        idx = self._index()
        if idx is None:
            return x
        n = x.shape[-1]
        xz = np.concatenate([x, np.zeros(x.shape[:-1] + (1,), dtype=x.dtype)], axis=-1)
        return np.take_along_axis(xz, np.where(idx < 0, n, idx), axis=-1)

    def take_columns(self, oT):
        """The column operand oT (B, H, c, n), shared by the rows, in each row's order: (B, H, R|1, c, L) (one order
        for all the rows: broadcast over them)."""
        if self.blocks is None:
            return oT[:, :, None]
        n = oT.shape[-1]
        oz = np.concatenate([oT, np.zeros(oT.shape[:-1] + (1,), dtype=oT.dtype)], axis=-1)
        rb = self.row_block
        if rb.size and np.all(rb == rb[0]):  # one order for these rows
            idx = self.blocks[:, :, rb[:1]]
        else:
            idx = self.blocks[:, :, rb]
        idx = np.where(idx < 0, n, idx)[:, :, :, None, :]  # (B|1, H|1, R|1, 1, L)
        return np.take_along_axis(oz[:, :, None], idx, axis=-1)


def _tile_columns(n: int, block: int) -> np.ndarray:
    """(T, block): the inner indices of each tile, a ragged last tile padded at the front with -1."""
    T = max(1, -(-n // block))
    cols = np.arange(T * block).reshape(T, block)
    tail = n - (T - 1) * block
    cols[-1] = np.r_[-np.ones(block - tail, dtype=np.int64), np.arange((T - 1) * block, n)]
    return cols


def kernel_orders(cls, block_out: int, block_in: int, lists: bool, rotated: bool = False) -> np.ndarray:
    """(..., M, T * block_in) visiting orders of the outer blocks (module docstring) from the classification mask cls
    (..., N_out, N_in) (True: visible as the kernel's tile split sees it): per outer block of block_out rows, its
    partial tiles ascending, then its full ones, then the empty ones. lists: the block is padded to block_out rows,
    the padding invisible (a block-sparse mask's tiles); else the block ends at N_out (the kernel clips it).
    rotated: the fused backward's order (Precision.dkdv_rotated): outer block m of M (rank r = M − 1 − m) takes its
    n_full full tiles from the (r mod n_full)-th on, cyclically."""
    n_in = cls.shape[-1]
    rank = tile_ranks(cls, block_out, block_in, lists)
    key = rank * rank.shape[-1] + np.arange(rank.shape[-1])  # kinds in order, ascending within each
    if rotated:
        full = rank == FULL
        n_full = np.maximum(full.sum(axis=-1, keepdims=True), 1)
        M = rank.shape[-2]
        rot = ((M - 1 - np.arange(M))[:, None]) % n_full
        key = np.where(full, FULL * rank.shape[-1] + (np.cumsum(full, axis=-1) - 1 - rot) % n_full, key)
    order = np.argsort(key, axis=-1, kind="stable")  # (..., M, T)
    return _tile_columns(n_in, block_in)[order].reshape(rank.shape[:-2] + (rank.shape[-2], -1))


PARTIAL, FULL, EMPTY = 0, 1, 2  # tile_ranks: the kinds of an outer block's inner tiles, in visiting order


def tile_ranks(cls, block_out: int, block_in: int, lists: bool) -> np.ndarray:
    """(..., M, T): the kind of each inner tile for each outer block of block_out rows (PARTIAL: some entry of block x
    tile invisible and some visible, or the tile ragged; FULL: every entry visible; EMPTY: nothing visible, never
    visited) from the classification mask cls (..., N_out, N_in), as kernel_orders reads it; the kernel visits the
    PARTIAL tiles ascending, then the FULL ones ascending (stable argsort of the ranks)."""
    n_out, n_in = cls.shape[-2:]
    M, T = max(1, -(-n_out // block_out)), max(1, -(-n_in // block_in))
    lead = cls.shape[:-2]

    def tiles(fill_rows):
        x = np.full(lead + (M * block_out, T * block_in), False)
        x[..., n_out:, :] = fill_rows
        x[..., :n_out, :n_in] = cls
        return x.reshape(lead + (M, block_out, T, block_in))
    any_vis = tiles(False).any(axis=(-3, -1))
    all_vis = tiles(not lists).all(axis=(-3, -1))  # out-of-range inner entries are invisible: a ragged tile is partial
    return np.where(all_vis, FULL, np.where(any_vis, PARTIAL, EMPTY))


def _stated_rows(n: int, block: int, tile_order: str, repeats: int = 1):
    """The order of an axis that every row shares (backward._visiting: our kernel's unmasked order, or
    "ascending"), as (1, 1, 1, L) blocks (None: the axis as it is)."""
    from .backward import _visiting

    idx = _visiting(n, block, tile_order, repeats)
    return None if idx is None else idx[None, None, None, :]


def shared_visits(n: int, block: int, tile_order: str, known, repeats: int = 1) -> Visits:
    """One order for every row (backward._visiting: the unmasked order of a stated tile_order; "any": none), known
    (B|1, H|1, R) where the caller vouches for it."""
    known = np.asarray(known, dtype=bool)
    idx = None if tile_order == "any" else _stated_rows(n, block, tile_order, repeats)
    return Visits(idx, np.zeros(known.shape[-1], dtype=np.int64), known, block)


def dq_visits(band_cls, vis, precision, recursive: bool) -> Visits:
    """The dQ kernel's key order per query row: band_cls (1, 1, Nq, Nk) the band's visibility (causal, window; no
    dense mask), vis (B, H, Nq, Nk) the full one."""
    cls = vis if precision.tile_lists == "lists" else band_cls
    return _visits(cls[:, :, None], vis[:, :, None], precision, recursive, precision.dq_key_tile,
                   precision.block_q_dq, 1)


def rows_visits(band_cls, vis, precision, recursive: bool, group: int) -> Visits:
    """The dK/dV kernel's order of its group's query rows (group * Nq, head g's at g Nq ...) per key: band_cls
    (1, 1, Nq, Nk), vis (B, Hq, Nq, Nk) as dq_visits'."""
    cls = vis if precision.tile_lists == "lists" else band_cls

    def per_kv(x):  # (B|1, Hq|1, Nq, Nk) -> (B|1, Hkv|1, group|1, Nk, Nq): the dK/dV kernel's outer axis first
        g = group if x.shape[1] > 1 else 1
        return np.swapaxes(x.reshape(x.shape[0], x.shape[1] // g, g, *x.shape[2:]), -1, -2)
    return _visits(per_kv(cls), per_kv(vis), precision, recursive, precision.block_q, precision.block_k_dkdv, group,
                   precision.dkdv_rotated)


def _visits(cls, vis, precision, recursive: bool, block: int, block_out, group: int, rotated: bool = False) -> Visits:
    """Visits of an accumulation whose outer rows see, through the GQA group's heads in turn, the inner axis: cls and
    vis (B|1, H|1, G|1, n_out, n_in), the classification mask (module docstring) and the visibility; rotated: the
    outer blocks' full tiles in the fused backward's rotated order (kernel_orders)."""
    n_out, n_in = vis.shape[-2:]
    tile_order = precision.tile_order
    rows = vis.shape[:2] + (n_out,)
    if not recursive or tile_order == "any":  # blocked accumulations, or no order stated: order-free (as before)
        return Visits(None, np.zeros(n_out, dtype=np.int64), np.zeros(rows, dtype=bool), block)
    if tile_order == "partial_first" and block_out is not None:
        orders = kernel_orders(cls, block_out, block, precision.tile_lists == "lists", rotated)  # (B|1, H|1, G|1, M, L)
        # head g's rows at g n_in: one accumulator through the group's heads in turn
        offs = (np.arange(group) * n_in)[:, None, None]
        orders = np.where(orders < 0, -1, orders + offs)
        orders = np.broadcast_to(orders, orders.shape[:2] + (group,) + orders.shape[3:])
        orders = np.moveaxis(orders, 2, -2).reshape(orders.shape[:2] + (orders.shape[3], -1))
        return Visits(orders, np.arange(n_out) // block_out, np.ones(rows, dtype=bool), block)
    # one order for every row (backward._visiting), stated for the heads that see every entry (the unmasked order),
    # and with "partial_first" under "band" for those the band cuts nowhere (each block's partial tile: the ragged one)
    head = vis.all(axis=(-3, -2, -1))[..., None]
    if tile_order == "partial_first":
        head = head | cls.all(axis=(-3, -2, -1))[..., None]
    return Visits(_stated_rows(n_in, block, tile_order, group), np.zeros(n_out, dtype=np.int64),
                  np.broadcast_to(head, rows), block)

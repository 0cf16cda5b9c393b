"""FlashAttention-1, Algorithm 1 exactly as written (seed 000 "Algorithm 1 FLASHATTENTION"; seed 004 Theorem 1),
with an IO counter.

    1: B_c = ceil(M / 4d), B_r = min(ceil(M / 4d), d)
    2: O = 0, l = 0, m = -inf in HBM
    5: for j = 1..T_c:  load K_j, V_j
    7:   for i = 1..T_r:  load Q_i, O_i, l_i, m_i
    9-10:  S_ij = Q_i K_j^T;  m~_ij = rowmax(S_ij);  P~_ij = exp(S_ij - m~_ij);  l~_ij = rowsum(P~_ij)
    11:    m_new = max(m_i, m~_ij);  l_new = e^{m_i - m_new} l_i + e^{m~_ij - m_new} l~_ij
    12:    O_i <- diag(l_new)^{-1} (diag(l_i) e^{m_i - m_new} O_i + e^{m~_ij - m_new} P~_ij V_j)   (write to HBM)
    13:    l_i <- l_new, m_i <- m_new                                                          (write to HBM)

Every HBM array access is counted in elements (reads and writes); the on-chip footprint is the number of
elements of one head's live tiles, whose peak depends on M and d only, never on N.
"""
from __future__ import annotations

from dataclasses import dataclass
import math
import numbers

import numpy as np

from flashcheck.reference.attention import expand_kv, resolve_scale
from flashcheck.reference.flash_attention_2 import tile_ranges
from flashcheck.reference.masks import visibility
from flashcheck.reference.shapes import check_attention_args
from flashcheck.reference.softmax import _divide_or_zero, safe_shift


@dataclass(frozen=True)
class IOStats:
    """HBM traffic of Algorithm 1 in elements, summed over all (batch, head) pairs, and the peak
    on-chip (SRAM) footprint of one head in elements."""

    hbm_reads: int
    hbm_writes: int
    peak_on_chip: int
    block_r: int
    block_c: int

    @property
    def hbm_accesses(self) -> int:
        return self.hbm_reads + self.hbm_writes


def block_sizes(sram_size: int, d: int) -> tuple[int, int]:
    """Algorithm 1 line 1: (B_r, B_c) = (min(ceil(M/4d), d), ceil(M/4d))."""
    b_c = math.ceil(sram_size / (4 * d))
    return min(b_c, d), b_c


def algorithm1_hbm_accesses(Nq: int, Nk: int, d: int, dv: int, sram_size: int, heads: int = 1) -> tuple[int, int]:
    """Closed form of the counter (no mask/bias): (reads, writes) in elements.

    reads  = heads * (Nk (d + dv)                  K_j, V_j once each (line 6)
                      + T_c Nq (d + dv + 2))       Q_i, O_i, l_i, m_i once per (j, i) (line 8)
    writes = heads * (Nq (dv + 2)                  initialisation (line 2)
                      + T_c Nq (dv + 2))           O_i, l_i, m_i once per (j, i) (lines 12-13)
    With T_c = ceil(Nk / B_c) ~ 4 d Nk / M this is Theta(N^2 d^2 / M) (the paper's Theorem 2).
    """
    _, b_c = block_sizes(sram_size, d)
    t_c = math.ceil(Nk / b_c)
    reads = Nk * (d + dv) + t_c * Nq * (d + dv + 2)
    writes = Nq * (dv + 2) + t_c * Nq * (dv + 2)
    return heads * reads, heads * writes


class _Chip:
    """Counts HBM element traffic and tracks the per-head on-chip footprint (arrays are (B, H, ...))."""

    def __init__(self):
        self.reads = 0
        self.writes = 0
        self.live: dict[str, int] = {}
        self.peak = 0

    def load(self, name: str, hbm_tile: np.ndarray) -> np.ndarray:
        self.reads += hbm_tile.size
        return self.hold(name, hbm_tile.copy())

    def hold(self, name: str, on_chip: np.ndarray) -> np.ndarray:
        self.live[name] = on_chip[0, 0].size  # one head's share
        self.peak = max(self.peak, sum(self.live.values()))
        return on_chip

    def store(self, hbm: np.ndarray, index, tile: np.ndarray) -> None:
        self.writes += tile.size
        hbm[index] = tile

    def free(self, *names: str) -> None:
        for name in names:
            self.live.pop(name, None)


def flash_attention_1(q, k, v, *, sram_size: int, scale=None, causal=False, window=None, mask=None, bias=None):
    """Algorithm 1 -> (o, IOStats). `sram_size` is the on-chip size M in elements.

    Masking (causal, window, mask, bias) is applied to S_ij on chip; user mask and bias tiles are read from
    HBM and counted. Rows with nothing visible yet keep m = -inf, l = 0, O = 0 (safe max); a fully masked
    row ends with O = 0.
    """
    p = check_attention_args(q, k, v, scale=scale, causal=causal, window=window, mask=mask, bias=bias)
    if isinstance(sram_size, bool) or not isinstance(sram_size, numbers.Integral) or sram_size < 1:
        raise ValueError(f"sram_size must be a positive int (on-chip size M in elements), got {sram_size!r}")
    b_r, b_c = block_sizes(int(sram_size), p.d)
    sc = resolve_scale(scale, p.d)
    Q = np.asarray(q, dtype=np.float64)
    K = expand_kv(np.asarray(k, dtype=np.float64), p.group)
    V = expand_kv(np.asarray(v, dtype=np.float64), p.group)
    geometric = visibility(p.B, p.Hq, p.Nq, p.Nk, causal=causal, window=window)  # from indices, not HBM
    user_mask = None if mask is None else np.broadcast_to(np.asarray(mask), p.full)
    user_bias = None if bias is None else np.broadcast_to(np.asarray(bias, dtype=np.float64), p.full)

    chip = _Chip()
    O = np.zeros((p.B, p.Hq, p.Nq, p.dv))  # line 2, in HBM
    l = np.zeros((p.B, p.Hq, p.Nq))
    m = np.full((p.B, p.Hq, p.Nq), -np.inf)
    chip.writes += O.size + l.size + m.size
    for cols in tile_ranges(p.Nk, b_c):  # line 5
        K_j = chip.load("K_j", K[:, :, cols])  # line 6
        V_j = chip.load("V_j", V[:, :, cols])
        for rows in tile_ranges(p.Nq, b_r):  # line 7
            Q_i = chip.load("Q_i", Q[:, :, rows])  # line 8
            O_i = chip.load("O_i", O[:, :, rows])
            l_i = chip.load("l_i", l[:, :, rows])
            m_i = chip.load("m_i", m[:, :, rows])
            S_ij = chip.hold("S_ij", sc * (Q_i @ np.swapaxes(K_j, -1, -2)))  # line 9
            vis = geometric[:, :, rows, cols]
            if user_bias is not None:
                S_ij = S_ij + chip.load("bias_ij", user_bias[:, :, rows, cols])
            if user_mask is not None:
                vis = vis & chip.load("mask_ij", user_mask[:, :, rows, cols])
            S_ij = np.where(vis, S_ij, -np.inf)
            m_tilde = chip.hold("m_tilde", S_ij.max(axis=-1))  # line 10
            P_tilde = chip.hold("S_ij", np.exp(S_ij - safe_shift(m_tilde)[..., None]))  # overwrites S_ij
            l_tilde = chip.hold("l_tilde", P_tilde.sum(axis=-1))
            m_new = chip.hold("m_new", np.maximum(m_i, m_tilde))  # line 11
            shift = safe_shift(m_new)
            alpha = np.exp(m_i - shift)  # e^{m_i - m_new}
            # e^{m~_ij - m_new}; an empty tile (m~_ij = -inf) has l~ = 0 and P~ = 0, so any finite factor will do
            beta = np.exp(np.where(m_tilde == -np.inf, shift, m_tilde) - shift)
            l_new = chip.hold("l_new", alpha * l_i + beta * l_tilde)
            # line 12: O_i <- diag(l_new)^{-1} (diag(l_i) e^{m_i - m_new} O_i + e^{m~_ij - m_new} P~_ij V_j)
            num = (l_i * alpha)[..., None] * O_i + beta[..., None] * (P_tilde @ V_j)
            chip.store(O, (slice(None), slice(None), rows), _divide_or_zero(num, l_new[..., None]))
            chip.store(l, (slice(None), slice(None), rows), l_new)  # line 13
            chip.store(m, (slice(None), slice(None), rows), m_new)
            chip.free("Q_i", "O_i", "l_i", "m_i", "S_ij", "bias_ij", "mask_ij", "m_tilde", "l_tilde", "m_new", "l_new")
        chip.free("K_j", "V_j")
    stats = IOStats(hbm_reads=chip.reads, hbm_writes=chip.writes, peak_on_chip=chip.peak, block_r=b_r, block_c=b_c)
    return O, stats

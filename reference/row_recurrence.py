"""The single-pass row recurrence o'_i and its tiled form (seed 000, "Flash attention" and
"Flash attention w/ Tiling"; worked by hand in seed 003).

For one query row with logits x (N,) and values V (N, dv):
    m_i  = max(m_{i-1}, x_i)
    d'_i = d'_{i-1} e^{m_{i-1} - m_i} + e^{x_i - m_i}
    o'_i = o'_{i-1} d'_{i-1} e^{m_{i-1} - m_i} / d'_i + e^{x_i - m_i} V[i] / d'_i
and O = o'_N. o'_i is normalized at every step: it is the attention output over keys 1..i.
Leading axes of x (..., N) and V (..., N, dv) are batch axes. Entries x_i = -inf are masked keys;
while d'_i = 0 (nothing visible yet) o'_i = 0, so a fully masked row gives O = 0.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flashcheck.reference.softmax import _divide_or_zero, _as_rows, safe_shift


@dataclass(frozen=True)
class RowState:
    """State after one step (or tile): running max m, denominator d', normalized output o'."""

    m: np.ndarray
    d: np.ndarray
    o: np.ndarray

    @property
    def acc(self) -> np.ndarray:
        """The un-normalized accumulator o' d' (seed 003's o_running, Appendix B "Method 2")."""
        return self.o * self.d[..., None]


def _check_values(x: np.ndarray, v) -> np.ndarray:
    v = np.asarray(v)
    if v.dtype.kind != "f":
        raise TypeError(f"v must be a real floating-point array, got dtype {v.dtype}")
    if v.ndim < 2 or v.shape[-2] != x.shape[-1]:
        raise ValueError(f"v must have shape (..., N, dv) with N = {x.shape[-1]} from x, got {v.shape}")
    return v.astype(np.float64)


def _step(state: RowState, x_tile: np.ndarray, v_tile: np.ndarray) -> RowState:
    """One update of seed 000's tiled recurrence with a tile of b >= 1 keys."""
    m_new = np.maximum(state.m, x_tile.max(axis=-1))
    shift = safe_shift(m_new)
    alpha = np.exp(state.m - shift)  # e^{m_{i-1} - m_i}; 0 when m_{i-1} = -inf, never (-inf) - (-inf)
    p = np.exp(x_tile - shift[..., None])  # e^{x_i[j] - m_i}
    d_new = state.d * alpha + p.sum(axis=-1)
    # o'_i = o'_{i-1} d'_{i-1} e^{m_{i-1}-m_i} / d'_i + sum_j e^{x_i[j]-m_i} V[j] / d'_i
    num = state.o * (state.d * alpha)[..., None] + np.einsum("...j,...jc->...c", p, v_tile)
    return RowState(m=m_new, d=d_new, o=_divide_or_zero(num, d_new[..., None]))


def tiled_row_recurrence(x, v, block: int, *, return_states: bool = False):
    """Seed 000 "Flash attention w/ Tiling": the o'_i recurrence over tiles of `block` keys
    (the last tile may be shorter). Returns O = o'_{ceil(N/b)}, and with return_states the list of
    RowState after each tile."""
    x = _as_rows(x)
    v = _check_values(x, v)
    if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 1:
        raise ValueError(f"block must be a positive int, got {block!r}")
    lead = np.broadcast_shapes(x.shape[:-1], v.shape[:-2])
    state = RowState(m=np.full(lead, -np.inf), d=np.zeros(lead), o=np.zeros(lead + (v.shape[-1],)))
    states = []
    for start in range(0, x.shape[-1], block):
        state = _step(state, x[..., start:start + block], v[..., start:start + block, :])
        states.append(state)
    return (state.o, states) if return_states else state.o


def row_recurrence(x, v, *, return_states: bool = False):
    """Seed 000 "Flash attention": the single-pass o'_i recurrence, one key per step (block = 1)."""
    return tiled_row_recurrence(x, v, 1, return_states=return_states)

"""Visibility: every masking constraint ANDed into one boolean matrix (ARCHITECTURE.md, "Conventions").

Causal alignment when Nq != Nk: True / "top_left" (torch SDPA) uses offset 0, "bottom_right"
(flash-attn) uses offset Nk - Nq. Key j is visible from query i iff j <= i + off (causal) and
i + off - left <= j <= i + off + right (window); the window uses top_left alignment when causal is False.
"""
from __future__ import annotations

import numpy as np

from flashcheck.reference.shapes import check_causal, check_mask, check_window


def causal_offset(causal, Nq: int, Nk: int) -> int:
    """Diagonal offset `off` of the causal/window alignment: 0 for False/True/"top_left",
    Nk - Nq for "bottom_right"."""
    check_causal(causal)
    return Nk - Nq if causal == "bottom_right" else 0


def visibility(B: int, Hq: int, Nq: int, Nk: int, *, causal=False, window=None, mask=None) -> np.ndarray:
    """Boolean (B, Hq, Nq, Nk): True where query i may attend to key j.

    AND of: j <= i + off (if causal), i + off - left <= j <= i + off + right (if window),
    and `mask` broadcast to (B, Hq, Nq, Nk).
    """
    check_window(window)
    off = causal_offset(causal, Nq, Nk)
    i = np.arange(Nq)[:, None]
    j = np.arange(Nk)[None, :]
    vis = np.ones((Nq, Nk), dtype=bool)
    if causal:  # True, "top_left" or "bottom_right"
        vis &= j <= i + off
    if window is not None:
        left, right = window
        if left is not None:
            vis &= j >= i + off - left
        if right is not None:
            vis &= j <= i + off + right
    full = np.broadcast_to(vis, (B, Hq, Nq, Nk))
    if mask is not None:
        full = full & check_mask("mask", mask, (B, Hq, Nq, Nk))
    return np.array(np.broadcast_to(full, (B, Hq, Nq, Nk)))

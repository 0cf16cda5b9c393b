"""The softmax family over the last axis, each -inf aware (seed 000, "Online softmax").

A row whose entries are all -inf (fully masked) has softmax 0 and log-sum-exp -inf. The recurrences
use a safe max: where the running max m is -inf, the shift is 0 instead of m, so (-inf) - (-inf)
never reaches exp (every such exp gets exp(-inf - 0) = 0).
"""
from __future__ import annotations

import numpy as np


def safe_shift(m: np.ndarray) -> np.ndarray:
    """The shift used in exp(x - shift): m, or 0 where m = -inf (nothing seen yet / fully masked)."""
    m = np.asarray(m, dtype=np.float64)
    return np.where(m == -np.inf, 0.0, m)


def _divide_or_zero(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den, and 0 where den = 0 (a fully masked row: its numerator is 0 too)."""
    den = np.asarray(den)
    return np.divide(num, den, out=np.zeros(np.broadcast_shapes(np.shape(num), den.shape)), where=den != 0)


def _as_rows(x) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.kind != "f":
        raise TypeError(f"x must be a real floating-point array, got dtype {x.dtype}")
    if x.ndim < 1 or x.shape[-1] < 1:
        raise ValueError(f"x must have a non-empty last axis, got shape {x.shape}")
    return x.astype(np.float64)


def naive_softmax(x) -> np.ndarray:
    """a_i = e^{x_i} / sum_j e^{x_j} (seed 000, the unshifted definition).

    Deliberately unsafe: e^{x_i} overflows once some x_i > log(DBL_MAX) ~ 709.78 (and the sum may overflow a
    little earlier). Rather than return inf / inf = NaN it raises FloatingPointError there: it is the
    baseline the safe variants are derived from. A fully masked row (all -inf) gives 0.
    """
    x = _as_rows(x)
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(x)
        total = e.sum(axis=-1, keepdims=True)
    if not np.all(np.isfinite(total)):
        raise FloatingPointError(
            f"naive_softmax overflows: max(x) = {float(np.max(x))!r}, the sum of e^x exceeds DBL_MAX "
            f"(x > log(DBL_MAX) ~ 709.78 is enough); use safe_softmax"
        )
    return _divide_or_zero(e, total)


def safe_softmax(x) -> np.ndarray:
    """Three passes (seed 000, "safe softmax"): m_i = max(m_{i-1}, x_i); d_i = d_{i-1} + e^{x_i - m_N};
    a_i = e^{x_i - m_N} / d_N."""
    x = _as_rows(x)
    n = x.shape[-1]
    m = np.full(x.shape[:-1], -np.inf)
    for i in range(n):  # pass 1: the max
        m = np.maximum(m, x[..., i])
    shift = safe_shift(m)
    d = np.zeros(x.shape[:-1])
    for i in range(n):  # pass 2: the denominator
        d = d + np.exp(x[..., i] - shift)
    a = np.empty_like(x)
    for i in range(n):  # pass 3: normalize
        a[..., i] = _divide_or_zero(np.exp(x[..., i] - shift), d)
    return a


def online_softmax(x, *, return_states: bool = False):
    """Two passes (seed 000, "online softmax"):
    pass 1: m_i = max(m_{i-1}, x_i), d'_i = d'_{i-1} e^{m_{i-1} - m_i} + e^{x_i - m_i};
    pass 2: a_i = e^{x_i - m_N} / d'_N.

    With return_states, also returns the list of (m_i, d'_i) after each step i.
    """
    x = _as_rows(x)
    m = np.full(x.shape[:-1], -np.inf)
    d = np.zeros(x.shape[:-1])
    states = []
    for i in range(x.shape[-1]):
        m_new = np.maximum(m, x[..., i])
        shift = safe_shift(m_new)
        # d'_i = d'_{i-1} e^{m_{i-1} - m_i} + e^{x_i - m_i}; m_{i-1} = -inf gives e^{-inf} = 0
        d = d * np.exp(m - shift) + np.exp(x[..., i] - shift)
        m = m_new
        states.append((m.copy(), d.copy()))
    a = _divide_or_zero(np.exp(x - safe_shift(m)[..., None]), d[..., None])
    return (a, states) if return_states else a


def tiled_online_softmax(x, block: int, *, return_states: bool = False):
    """Online softmax over tiles of `block` entries (seed 001, "Simple example"; seed 000 tiling):
    m^{(t)} = max(m^{(t-1)}, rowmax(x^{(t)})), l^{(t)} = e^{m^{(t-1)} - m^{(t)}} l^{(t-1)} + sum e^{x^{(t)} - m^{(t)}};
    then a = e^{x - m} / l. The last tile may be shorter than `block`.

    With return_states, also returns the list of (m^{(t)}, l^{(t)}) after each tile t.
    """
    x = _as_rows(x)
    if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 1:
        raise ValueError(f"block must be a positive int, got {block!r}")
    m = np.full(x.shape[:-1], -np.inf)
    l = np.zeros(x.shape[:-1])
    states = []
    for start in range(0, x.shape[-1], block):
        tile = x[..., start:start + block]
        m_new = np.maximum(m, tile.max(axis=-1))
        shift = safe_shift(m_new)
        l = np.exp(m - shift) * l + np.exp(tile - shift[..., None]).sum(axis=-1)
        m = m_new
        states.append((m.copy(), l.copy()))
    a = _divide_or_zero(np.exp(x - safe_shift(m)[..., None]), l[..., None])
    return (a, states) if return_states else a


def logsumexp(x) -> np.ndarray:
    """LSE(x) = max(x) + log sum_i e^{x_i - max(x)} (seed 002, the LSE identity); -inf for a fully masked row."""
    x = _as_rows(x)
    m = x.max(axis=-1)
    shift = safe_shift(m)
    with np.errstate(divide="ignore"):  # log(0) = -inf is the fully-masked-row answer
        return shift + np.log(np.exp(x - shift[..., None]).sum(axis=-1))

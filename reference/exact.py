"""The mpmath oracle: forward, backward, softmax and log-sum-exp at configurable precision (default 60
decimal digits), for small shapes (it loops in Python over every element).

The inputs are float64 arrays, taken as exact rationals; every operation then runs with `dps` digits,
so the result carries a relative error around 10^-dps, far below float64's 2^-53 ~ 1.1e-16. Results are
float64 arrays (correctly rounded from the high-precision value, to within one extra rounding) or, with
`as_mpf=True`, object arrays of mpmath numbers. Masking conventions are those of `flashcheck.reference.attention`:
a fully masked row gives O = 0, LSE = -inf, zero gradients. The default scale is the exact 1/sqrt(d).
"""
from __future__ import annotations

import mpmath
import numpy as np

from flashcheck.reference.masks import visibility
from flashcheck.reference.shapes import check_attention_args

DEFAULT_DPS = 60


def _mp(a) -> np.ndarray:
    """float64 array -> object array of mpf (exact: every float64 is an mpf)."""
    a = np.asarray(a, dtype=np.float64)
    out = np.empty(a.shape, dtype=object)
    for idx in np.ndindex(a.shape):
        out[idx] = mpmath.mpf(float(a[idx]))
    return out


def _finish(x: np.ndarray, as_mpf: bool) -> np.ndarray:
    if as_mpf:
        return x
    out = np.empty(x.shape, dtype=np.float64)
    for idx in np.ndindex(x.shape):
        out[idx] = float(x[idx])
    return out


def _row_softmax(row: list) -> tuple[list, object]:
    """Softmax and LSE of a list of mpf with -inf entries (masked); all -inf gives zeros and -inf."""
    finite = [x for x in row if x != mpmath.ninf]
    if not finite:
        return [mpmath.mpf(0)] * len(row), mpmath.ninf
    m = max(finite)
    e = [mpmath.exp(x - m) if x != mpmath.ninf else mpmath.mpf(0) for x in row]
    l = mpmath.fsum(e)
    return [x / l for x in e], m + mpmath.log(l)


def exact_softmax(x, *, dps: int = DEFAULT_DPS, as_mpf: bool = False) -> np.ndarray:
    """softmax over the last axis at `dps` digits (-inf entries are masked; an all -inf row gives 0)."""
    with mpmath.workdps(dps):
        xm = _mp(x)
        out = np.empty(xm.shape, dtype=object)
        for idx in np.ndindex(xm.shape[:-1]):
            out[idx] = np.array(_row_softmax(list(xm[idx]))[0], dtype=object)
        return _finish(out, as_mpf)


def exact_logsumexp(x, *, dps: int = DEFAULT_DPS, as_mpf: bool = False) -> np.ndarray:
    """log sum exp over the last axis at `dps` digits (-inf for an all -inf row)."""
    with mpmath.workdps(dps):
        xm = _mp(x)
        out = np.empty(xm.shape[:-1], dtype=object)
        for idx in np.ndindex(xm.shape[:-1]):
            out[idx] = _row_softmax(list(xm[idx]))[1]
        return _finish(out, as_mpf)


def _forward(q, k, v, *, scale, causal, window, mask, bias, dropout_p=0.0, dropout_mask=None):
    """Shared by the forward and backward oracles: problem, mp inputs, probabilities P (and dropped), LSE."""
    p = check_attention_args(q, k, v, scale=scale, causal=causal, window=window, mask=mask, bias=bias,
                             dropout_p=dropout_p, dropout_mask=dropout_mask)
    Q, K, V = _mp(q), _mp(k), _mp(v)
    sc = mpmath.mpf(1) / mpmath.sqrt(p.d) if scale is None else mpmath.mpf(float(scale))
    Bm = None if bias is None else np.broadcast_to(_mp(np.broadcast_to(bias, p.full)), p.full)
    keep = None if dropout_mask is None else np.broadcast_to(np.asarray(dropout_mask), p.full)
    vis = visibility(p.B, p.Hq, p.Nq, p.Nk, causal=causal, window=window, mask=mask)
    P = np.empty(p.full, dtype=object)
    Pd = np.empty(p.full, dtype=object)
    lse = np.empty(p.full[:3], dtype=object)
    for b in range(p.B):
        for h in range(p.Hq):
            hk = h // p.group
            for i in range(p.Nq):
                row = []
                for j in range(p.Nk):
                    if not vis[b, h, i, j]:
                        row.append(mpmath.ninf)
                        continue
                    s = sc * mpmath.fsum(Q[b, h, i, c] * K[b, hk, j, c] for c in range(p.d))
                    row.append(s if Bm is None else s + Bm[b, h, i, j])
                probs, lse[b, h, i] = _row_softmax(row)
                for j in range(p.Nk):
                    P[b, h, i, j] = probs[j]
                    if keep is None:
                        Pd[b, h, i, j] = probs[j]
                    else:
                        Pd[b, h, i, j] = probs[j] / (1 - mpmath.mpf(float(dropout_p))) if keep[b, h, i, j] else mpmath.mpf(0)
    return p, Q, K, V, sc, P, Pd, lse


def exact_attention(q, k, v, *, scale=None, causal=False, window=None, mask=None, bias=None, dropout_p=0.0,
                    dropout_mask=None, dps: int = DEFAULT_DPS, as_mpf: bool = False):
    """(o, lse) of standard attention at `dps` digits; same arguments as `flashcheck.reference.attention`."""
    with mpmath.workdps(dps):
        p, Q, K, V, sc, P, Pd, lse = _forward(q, k, v, scale=scale, causal=causal, window=window, mask=mask,
                                              bias=bias, dropout_p=dropout_p, dropout_mask=dropout_mask)
        o = np.empty((p.B, p.Hq, p.Nq, p.dv), dtype=object)
        for b, h, i, c in np.ndindex(o.shape):
            o[b, h, i, c] = mpmath.fsum(Pd[b, h, i, j] * V[b, h // p.group, j, c] for j in range(p.Nk))
        return _finish(o, as_mpf), _finish(lse, as_mpf)


def exact_attention_backward(q, k, v, do, *, scale=None, causal=False, window=None, mask=None, bias=None,
                             dropout_p=0.0, dropout_mask=None, dps: int = DEFAULT_DPS, as_mpf: bool = False):
    """(dq, dk, dv) of L = sum(dO o O) at `dps` digits, through dS = P o (dP - rowsum(P o dP))
    (the J_softmax product written out); same arguments as `flashcheck.reference.standard_attention_backward`."""
    with mpmath.workdps(dps):
        p, Q, K, V, sc, P, Pd, _ = _forward(q, k, v, scale=scale, causal=causal, window=window, mask=mask,
                                            bias=bias, dropout_p=dropout_p, dropout_mask=dropout_mask)
        dO = _mp(do)
        if dO.shape != (p.B, p.Hq, p.Nq, p.dv):
            raise ValueError(f"do must have shape {(p.B, p.Hq, p.Nq, p.dv)}, got {dO.shape}")
        inv_keep = 1 / (1 - mpmath.mpf(float(dropout_p)))
        keep = None if dropout_mask is None else np.broadcast_to(np.asarray(dropout_mask), p.full)
        dq = np.full((p.B, p.Hq, p.Nq, p.d), mpmath.mpf(0), dtype=object)
        dk = np.full((p.B, p.Hkv, p.Nk, p.d), mpmath.mpf(0), dtype=object)
        dv = np.full((p.B, p.Hkv, p.Nk, p.dv), mpmath.mpf(0), dtype=object)
        for b in range(p.B):
            for h in range(p.Hq):
                hk = h // p.group
                for i in range(p.Nq):
                    # dP[j] = (dO_i . v_j) * (keep / (1 - p))
                    dP = []
                    for j in range(p.Nk):
                        g = mpmath.fsum(dO[b, h, i, c] * V[b, hk, j, c] for c in range(p.dv))
                        dP.append(g if keep is None else (g * inv_keep if keep[b, h, i, j] else mpmath.mpf(0)))
                    delta = mpmath.fsum(P[b, h, i, j] * dP[j] for j in range(p.Nk))
                    for j in range(p.Nk):
                        ds = P[b, h, i, j] * (dP[j] - delta)
                        for c in range(p.d):
                            dq[b, h, i, c] += sc * ds * K[b, hk, j, c]
                            dk[b, hk, j, c] += sc * ds * Q[b, h, i, c]
                        for c in range(p.dv):
                            dv[b, hk, j, c] += Pd[b, h, i, j] * dO[b, h, i, c]
        return _finish(dq, as_mpf), _finish(dk, as_mpf), _finish(dv, as_mpf)

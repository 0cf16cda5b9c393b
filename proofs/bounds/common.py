"""Pieces every analysis shares: the exact problem, softmax parts, row blocks, weighted deviations and the
exp-error helpers that avoid 0 * inf."""
from __future__ import annotations

import numpy as np

from .precision import UNIT_ROUNDOFF, gamma


# ----------------------------------------------------------------------------------------------
# Shared pieces
# ----------------------------------------------------------------------------------------------


def _problem(q, k, v, scale, causal, window, mask, bias):
    """Exact logits S (masked to -inf), visibility, the float64 arrays, scale and sizes."""
    from flashcheck.reference.attention import expand_kv, masked_logits, resolve_scale
    from flashcheck.reference.shapes import check_attention_args

    p = check_attention_args(q, k, v, scale=scale, causal=causal, window=window, mask=mask, bias=bias)
    qf = np.asarray(q, dtype=np.float64)
    kf = expand_kv(np.asarray(k, dtype=np.float64), p.group)
    vf = expand_kv(np.asarray(v, dtype=np.float64), p.group)
    s, vis = masked_logits(q, k, p, scale=scale, causal=causal, window=window, mask=mask, bias=bias)
    return p, qf, kf, vf, s, vis, abs(resolve_scale(scale, p.d))


def _softmax_parts(s, vis):
    """Row max m (0 for empty rows), A = softmax(S) (0 where invisible), l = sum exp(S - m), LSE."""
    empty = ~vis.any(axis=-1)
    m = np.where(empty, 0.0, np.max(np.where(vis, s, -np.inf), axis=-1))
    e = np.exp(np.where(vis, s - m[..., None], -np.inf))  # invisible: exp(-inf) = 0, no 0 - m overflow
    l = e.sum(axis=-1)
    l_safe = np.where(empty, 1.0, l)
    A = e / l_safe[..., None]
    lse = np.where(empty, -np.inf, m + np.log(l_safe))
    return m, A, l_safe, lse, empty


def _half_ulp(x_up, fmt: str):
    """Bound on round-to-nearest's error when rounding a value of magnitude <= x_up (elementwise) into the
    working format `fmt` ("float32", "float64": unit roundoff u = 2^-p, smallest normal `tiny`): half an ulp of
    the binade, u 2^floor(log2 x_up) (<= u x_up; the binade is x_up's, so an upper bound on the magnitude is
    enough: a larger x_up only moves it up); below `tiny`, `tiny` (subnormal spacing or a flush to zero,
    <= |x|); 0 for x_up = 0 (an exact 0) or NaN; inf for inf.

    2^floor(log2 x_up) is read off x_up's float64 bits (the exponent field, the mantissa cleared): exact, where
    np.exp2(np.floor(np.log2(x))) rounds log2 up to the next integer just below a power of two (a binade too
    high: still a bound, twice the size) and costs two transcendental passes (this function ran 180 times in
    one fp32 backward bound)."""
    u, tiny = UNIT_ROUNDOFF[fmt], _NORMAL_MIN[fmt]
    x_up = np.asarray(x_up, dtype=np.float64)
    # x >= tiny (a normal float64, as tiny >= 2^-1022): clearing the 52 mantissa bits leaves 2^floor(log2 x)
    bits = np.where(x_up >= tiny, x_up, 1.0).view(np.int64) & np.int64(-1 << 52)
    binade = np.where(x_up >= tiny, u * bits.view(np.float64), tiny)
    return np.where(x_up > 0, np.where(np.isinf(x_up), np.inf, binade), 0.0)


def _rows_chunks(Nq: int, Nk: int, dv: int, budget: int = 1 << 21):
    step = max(1, budget // max(1, Nk * dv))
    for r0 in range(0, Nq, step):
        yield slice(r0, min(Nq, r0 + step))


def _weighted_dev(weights_abs, weights_sq, v, o):
    """For (..., Nq, Nk) weights W and rows o (..., Nq, dv): sum_j W_ij |v_jc - o_ic| and
    sum_j W_ij (v_jc - o_ic)^2, computed directly (no cancellation), chunked over query rows.

    All weights of one kind are stacked, so each chunk is one einsum (rows, n_w, Nk) x (rows, Nk, dv),
    and |v - o|, (v - o)^2 are formed in place in one small buffer. (Not np.matmul: these are many
    small products, and a threaded BLAS on a loaded machine made them ~50x slower.)"""
    Nq, Nk = weights_abs[0].shape[-2:] if weights_abs else weights_sq[0].shape[-2:]
    dv = v.shape[-1]
    lead = np.broadcast_shapes(o.shape[:-2], v.shape[:-2])
    out_a = np.zeros((*lead, Nq, len(weights_abs), dv))
    out_s = np.zeros((*lead, Nq, len(weights_sq), dv))
    for r in _rows_chunks(Nq, Nk, dv, budget=1 << 18):
        D = v[..., None, :, :] - o[..., r, None, :]  # (..., rows, Nk, dv)
        np.abs(D, out=D)
        if weights_abs:
            Wa = np.stack([W[..., r, :] for W in weights_abs], axis=-2)  # (..., rows, n_abs, Nk)
            out_a[..., r, :, :] = np.einsum("...iwj,...ijc->...iwc", Wa, D)
        if weights_sq:
            np.multiply(D, D, out=D)
            Ws = np.stack([W[..., r, :] for W in weights_sq], axis=-2)
            out_s[..., r, :, :] = np.einsum("...iwj,...ijc->...iwc", Ws, D)
    return ([out_a[..., t, :] for t in range(len(weights_abs))],
            [out_s[..., t, :] for t in range(len(weights_sq))])


def _exp_err(e, eps):
    """b = exp(e) (1 + eps) - 1, the relative-error bound of an exp whose argument is off by <= e:
    +inf where exp(e) overflows (intended: that factor is vacuous)."""
    with np.errstate(over="ignore"):
        return np.exp(e) * (1.0 + eps) - 1.0


def _weighted_exp_err(A, b, e, eps, vis, log_a):
    """(A b, A (1 + b), bad) for b = exp(e)(1 + eps) - 1 (0 off `vis`).

    Where exp(e) overflows (b = inf, `bad`), the product A b would be 0 * inf = NaN for an A that
    underflowed; there A (1 + b) is evaluated as exp(log A + e)(1 + eps), which is 0 when the
    perturbed weight itself underflows (the entry's contribution is then provably 0) and +inf
    (vacuous, honest) otherwise. Elsewhere the plain products, bit for bit. `log_a()` returns
    log A_ij = s_ij - m_i - log l_i (only called when some entry is bad)."""
    bad = vis & ~np.isfinite(b)
    with np.errstate(invalid="ignore"):
        Ab = A * b
        Ab1 = A * (1.0 + b)
    if bad.any():
        with np.errstate(over="ignore", invalid="ignore"):
            stable = np.exp(np.where(bad, log_a() + e, -np.inf)) * (1.0 + eps)
        Ab1 = np.where(bad, stable, Ab1)
        Ab = np.where(bad, stable - A, Ab)
    return Ab, Ab1, bad


def _fix_bad(value, bad, stable):
    """`value` where not `bad`, else `stable()` (an expression of A (1 + b) that avoids 0 * inf)."""
    if not np.any(bad):
        return value
    with np.errstate(over="ignore", invalid="ignore"):
        return np.where(bad, stable(), value)


def _no_nan(x):
    """A bound is a number or +inf: a NaN can only come from inf * 0 or inf - inf inside a piece that
    is already vacuous, so it is +inf (honest)."""
    x = np.asarray(x, dtype=np.float64)
    return np.where(np.isnan(x), np.inf, x)


# the operand formats that P and dS are rounded (fp16, bf16) or truncated (tf32) into: significand bits, and the
# exponent e (x = f 2^e, f in [1/2, 1)) of their smallest normal number, below which the spacing stays
# 2^(e_min - bits) (subnormals)
_SIGNIFICAND_BITS = {"float16": 11, "bfloat16": 8, "tf32": 11}
_E_MIN = {"float16": -13, "bfloat16": -125, "tf32": -125}
# fp32's smallest normal: a working-format value below it may be flushed to zero (ftz) before it is rounded
_FP32_NORMAL_MIN = 2.0**-126
_NORMAL_MIN = {"float32": _FP32_NORMAL_MIN, "float64": 2.0**-1022}  # smallest normal of the working formats


def _round_nearest(x, fmt: str, truncate: bool = False):
    """x >= 0 (float64) rounded to nearest even in fmt (or truncated toward zero: tf32 as the H100 reads fp32 bits),
    exactly, subnormals included: the significand scaled to an integer at the format's spacing, rounded by np.rint
    (half to even) or np.floor, scaled back."""
    bits = _SIGNIFICAND_BITS[fmt]
    _, e = np.frexp(x)
    e = np.maximum(e, _E_MIN[fmt])
    return np.ldexp((np.floor if truncate else np.rint)(np.ldexp(x, bits - e)), e - bits)


def _rounding_on_data(x_lo, x_hi, fmt: str, u_op: float, truncate: bool = False):
    """The relative rounding error rho = RN_fmt(x) / x - 1 of an unknown x in [x_lo, x_hi] (float64 arrays of
    magnitudes), as an interval: (centre, half-width, known) (bounds.md sec. 6, "roundings on the data").

    Round to nearest is monotone: where RN(x_lo) == RN(x_hi) the rounded value R is known, and rho = R / x - 1,
    decreasing in x, lies in [R / x_hi - 1, R / x_lo - 1] (subnormal R included; R = 0 gives rho = -1); the
    float64 evaluation of the two quotients adds <= 2^-52 each (2^-50 charged). Where the interval holds a
    rounding boundary, or reaches below fp32's normal range (the working value may have been flushed to 0),
    R is not known: known False, centre 0, half-width u_op (the standard model; the caller charges the
    subnormal floor apart); truncated (tf32), rho in [-u_op, 0]: centre -u_op/2, half-width u_op/2."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        ok = (x_lo >= _FP32_NORMAL_MIN) & np.isfinite(x_hi) & (x_hi >= x_lo)
        safe_lo = np.where(ok, x_lo, 1.0)
        safe_hi = np.where(ok, x_hi, 1.0)
        r = _round_nearest(safe_lo, fmt, truncate)
        known = ok & (_round_nearest(safe_hi, fmt, truncate) == r)
        a = r / safe_hi - 1.0
        b = r / safe_lo - 1.0
    centre = np.where(known, 0.5 * (a + b), -0.5 * u_op if truncate else 0.0)
    half = np.where(known, 0.5 * (b - a) + 2.0**-50, 0.5 * u_op if truncate else u_op)
    return centre, half, known


def _signed_sum_bound(signed, absolute, X, n: int):
    """|signed @ X| + absolute @ |X| + gamma_n(2^-53) |signed| @ |X|: a first-order sum whose terms are known with
    their sign (signed) up to an uncertainty (absolute), contracted with X, plus the float64 evaluation of the
    signed product (n: the terms per entry, + 1). The roundings on the data of P (O) and dS (dQ) take this form."""
    absX = np.abs(X)
    return np.abs(signed @ X) + absolute @ absX + float(gamma(n, 2.0**-53)) * (np.abs(signed) @ absX)

"""The logit error e_ij (proofs/bounds.md sec. 3)."""
from __future__ import annotations

from dataclasses import dataclass
import math

import numpy as np

from .precision import (_Model, _conv, _within_dot, gamma)


@dataclass(frozen=True)
class _Logits:
    """Per-logit bounds on the error e_ij of the exponent argument (natural-log units), sec. 3. No part of it is
    modelled as random (_logit_errors): its first order is all in `det`."""

    wc: np.ndarray  # worst case |e_ij| (full majorant)
    lin: np.ndarray  # linear part of that majorant
    det: np.ndarray  # first-order part (truncation, roundings to nearest, the shared constant c), none of it random
    qk: tuple = ()  # (scale |q||k|^T, |scale q.k| or None, tensor-core dot error
    # or None, (exact conversion error, its floor) or None): shift-independent, reusable
    conv: np.ndarray | None = None  # signed, exact logit error of the operand conversion (tf32 truncation), or None
    conv_floor: np.ndarray | None = None  # |.| bound on what `conv` cannot state (subnormal operands)
    det_conv: np.ndarray | None = None  # the one-sided bound of that conversion inside `det` (replaceable by conv)
    det_mma: np.ndarray | None = None  # the tensor-core dot's part of `det` (symmetric)
    mma_sides: tuple | None = None  # (neg, pos): that error by sign, computed - exact in [-neg, pos]
    dot_wc: np.ndarray | None = None  # the dot's part of wc (the rest, wc - dot_wc, is the argument's roundings)
    # (wc, lin) evaluated with the known error where that is smaller: |conv| + floor + the argument's remaining
    # roundings (product, bias add, shift), its linear part |conv| + floor + u (|scale q.k| + |bias| + |s - shift|);
    # (wc, lin) elsewhere. A majorant of |computed - exact| like wc (given the stated arithmetic); None: nothing known
    wc_known: np.ndarray | None = None
    lin_known: np.ndarray | None = None
    # (below, above): computed - exact in [-below, above] from the known error (centred on conv: conv +- its floor and
    # the product's, bias add's and shift's roundings), each side no wider than wc; wc where nothing is known
    known_sides: tuple | None = None


def _logit_errors(qf, kf, s, shift, vis, scale, model: _Model, d: int, has_bias: bool,
                  qk: tuple = (), detailed: bool = True) -> _Logits:
    """Error of t_ij = fl(fl(q_i.k_j) * c) - shift_i (c = scale*log2 e rounded), in natural units.

    dot: operands converted into the dot format (u_in each: rounded, or truncated for tf32), d products
    accumulated with u_dacc
    (products exact on tensor cores, rounded for ieee/fp64, counted within gamma_d);
    argument: c rounded (u_w |s|, shared by the row: deterministic; three roundings, fl32(fl32(scale) fl32(log2 e)),
    where the precision states the kernel's c, model.fma_logits), product rounded (u_w |s|),
    subtraction of the running max rounded (u_w |s - m_run| <= u_w |s - m|), bias add (u_w |s|).
    detailed=False skips what only the probabilistic kind reads (the tensor-core steps, the exact
    conversion on the data, sec. 6a, and the known FMA-chain logits).

    model.fma_logits (Precision.ieee_fma_chain), detailed, q and k fp32 values: fl(q.k) c is a known number per
    (i, j) (_fma_logit_error), so its error e_ij = ln 2 fl(q.k) c - scale q.k is `conv` (with its float64
    evaluation floor `conv_floor`) where the chain stays in fp32's normal range (elsewhere nothing is known and
    the model applies); there `det_conv` is the dot's and c's roundings (what conv replaces in det). wc, lin and det keep the model: a consumer that does not charge conv
    stays sound."""
    if not qk:  # the products of q and k do not depend on the shift: computed once per problem
        absqk = scale * (np.abs(qf) @ np.swapaxes(np.abs(kf), -1, -2))
        # |scale q.k| before any bias: with a cancelling bias it can be far larger than |s|
        qk = (absqk, np.abs(scale * (qf @ np.swapaxes(kf, -1, -2))) if has_bias else None,
              _mma_dot_error(qf, kf, scale, model) if detailed and model.mma is not None else None,
              _conversion_error(qf, kf, scale) if detailed and model.conv_exact else None,
              _fma_logit_error(qf, kf, scale, absqk) if detailed and model.fma_logits else None)
    absqk, a_qk, mma_dot, conv, fma = qk
    s0 = np.where(vis, s, 0.0)
    if a_qk is None:
        a_qk = np.abs(s0)
    a_b = np.abs(s0) if has_bias else 0.0 * s0  # rounding of the bias add, on the sum
    a_t = np.abs(s0 - shift[..., None])
    u, ui = model.u_w, model.u_in
    n_c = 3 if model.fma_logits else 1  # roundings of c: once, or the kernel's fl32(fl32(scale) fl32(log2 e))
    coef_arg = (1.0 + n_c) * a_qk + a_b + a_t  # c's roundings, the product, the bias add, the shift
    nd = _within_dot(model, d)  # accumulator roundings of the d-long dot
    dot_wc = ((1.0 + ui) ** 2 * (1.0 + gamma(nd, model.u_dacc)) - 1.0) * absqk
    # The argument's roundings in order, each <= u |computed value| = u (|exact value| + the error so
    # far): the first-order part is u coef_arg (= arg_lin), the rest is the exact second-order majorant
    # (not a gamma_n hand count: gamma_3 coef_arg put 2u coef_arg of first-order error into "second order").
    x_hat = a_qk + dot_wc  # |fl(q.k)| in logit units
    err_c = ((1.0 + u) ** n_c - 1.0) * x_hat  # c = scale * log2(e) rounded
    err_p = u * (x_hat + err_c)  # fl(x * c)
    err_b = u * (a_b + dot_wc + err_c + err_p) if has_bias else 0.0  # + bias
    err_t = u * (a_t + dot_wc + err_c + err_p + err_b)  # - running max
    arg_wc = err_c + err_p + err_b + err_t
    dot_lin = (2.0 * ui + nd * model.u_dacc) * absqk
    arg_lin = u * coef_arg
    (ri, _), (di, _) = _conv(model)
    # No round-to-nearest part of the logit is modelled as random (bounds.md sec. 6): the d roundings of a CUDA-core
    # dot are one-signed when its small products are lost against a large one (bench/adversaries/
    # lost_terms_logits.py: the sqrt(d) u |q||k| model was exceeded 2x in the LSE), the operands' conversions
    # (u_in, rounded) are one-signed on near-constant q, k, and the argument's roundings are shared by keys of
    # equal or similar logits. Their first order is charged worst case: n_d u_dacc |q||k| + 2 u_in |q||k|.
    det_dot = nd * model.u_dacc * absqk
    mma_used = mma_sides = None
    if mma_dot is not None:  # the steps as the data make them (sec. 2a): the same truncations, sharper
        # (second order: the computed partial sums and products differ from the exact ones by <= dot_wc,
        # which moves each step's bound by <= (delta + 2^(-22-F)) dot_wc)
        second = nd * (model.u_dacc + 2.0 ** (-22 - model.mma.extra_bits)) * dot_wc
        mma_used = np.minimum(det_dot, mma_dot[0] + second)
        # by sign (the LSE's sum_j A_j e_j): where the step model won, its one-sided parts, else the symmetric bound
        won = mma_dot[0] + second < det_dot
        mma_sides = tuple(np.where(won, x + second, mma_used) for x in mma_dot[1:])
        det_dot = mma_used
    det_dot = det_dot + 2.0 * ri * absqk
    det_conv = None
    if di:  # truncated q, k: sum_k q_k k_k theta_k, theta_k in [-2 u_in, 0] (first order), not random:
        # <= 2 u_in max(positive part, negative part) = u_in (sum_k |q_k k_k| + |q.k|)  (bounds.md sec. 6)
        det_conv = di * (absqk + a_qk)
        det_dot = det_dot + det_conv
    # c = scale * log2(e) rounded (one error for the whole row), the product, the bias add, the shift: u coef_arg
    det_arg = u * coef_arg
    z = np.zeros_like(s0)
    wc_known = lin_known = known_sides = None
    wc, lin = dot_wc + arg_wc, dot_lin + arg_lin
    if fma is not None:  # the known FMA-chain logits: conv states the dot's error and c's, with their signs
        known = vis & fma[2]
        conv = (fma[0], fma[1])
        # what conv states: the dot's roundings and c's (the product's, the bias add's and the shift's stay in det)
        det_conv = np.where(known, nd * model.u_dacc * absqk + n_c * u * a_qk, 0.0)
        # the majorant from the known error: |fl(q.k) c| ln 2 <= |scale q.k| + |e|; then the product's rounding
        # (or none, fused into the subtraction), the bias add and the shift, each <= u |its computed value|
        e_abs = np.abs(conv[0]) + conv[1]
        err_p = u * (a_qk + e_abs)
        err_b = u * (a_b + e_abs + err_p) if has_bias else 0.0
        err_t = u * (a_t + e_abs + err_p + err_b)
        wc_k = e_abs + err_p + err_b + err_t
        lin_k = e_abs + u * (a_qk + a_b + a_t)
        sel = known & (wc_k < wc)
        wc_known, lin_known = np.where(sel, wc_k, wc), np.where(sel, lin_k, lin)
        rest = wc_k - np.abs(conv[0])  # the floor and the argument's roundings around the known error
        known_sides = tuple(np.where(known, np.minimum(wc, rest + sgn * conv[0]), wc) for sgn in (-1.0, 1.0))
    return _Logits(
        wc=np.where(vis, dot_wc + arg_wc, z),
        lin=np.where(vis, dot_lin + arg_lin, z),
        det=np.where(vis, det_dot + det_arg, z),
        qk=qk,
        conv=None if conv is None or det_conv is None else np.where(vis, conv[0], z),
        conv_floor=None if conv is None or det_conv is None else np.where(vis, conv[1], z),
        wc_known=None if wc_known is None else np.where(vis, wc_known, z),
        lin_known=None if lin_known is None else np.where(vis, lin_known, z),
        known_sides=None if known_sides is None else tuple(np.where(vis, x, z) for x in known_sides),
        det_conv=None if det_conv is None else np.where(vis, det_conv, z),
        det_mma=None if mma_used is None else np.where(vis, mma_used, z),
        mma_sides=None if mma_sides is None else tuple(np.where(vis, x, z) for x in mma_sides),
        dot_wc=np.where(vis, dot_wc, z),
    )


def _fma_logit_error(qf, kf, scale, absqk):
    """(e, floor, known, x, normal) for every (i, j), or None if q, k are not fp32 values: the logit error up to the scale
    product as the kernel computes it under Precision.ieee_fma_chain, e = ln 2 x c - scale q.k in natural units,
    x = fl(q.k) the ascending fp32 FMA chain (flashcheck.proofs.fma_chain, exact), c = fl32(fl32(scale)
    fl32(log2 e)) the kernel's qk_scale2; `known`: the chain's operands and steps in fp32's normal range (or 0),
    so flush-to-zero or not gives the same x (elsewhere e = 0 and the caller keeps the model).
    floor: e's float64 evaluation: x c is exact (two fp32 values), ln 2 (math.log, <= 1 ulp) times it rounds
    once, q.k (any order) and its product by scale round d + 1 times, the difference once:
    <= gamma_{d+4}(2^-53) (scale sum|q||k| + ln 2 |x c|), taken twice. x and normal: the chain's fp32 values and
    fma_chain_dot's normal-range mask, which the exponent arguments (forward._known_arguments) and the backward's
    recomputed P~ (backward._recomputed_p_known) read."""
    from flashcheck.proofs.fma_chain import fma_chain_dot, kernel_qk_scale2

    if not (_fp32_exact(qf) and _fp32_exact(kf)):
        return None
    kT = np.swapaxes(kf, -1, -2)
    x, normal = fma_chain_dot(qf, kT, return_normal=True)
    xc = x * kernel_qk_scale2(scale)
    with np.errstate(invalid="ignore", over="ignore"):
        e = math.log(2.0) * xc - scale * (qf @ kT)
    known = normal & np.isfinite(e)
    floor = 2.0 * float(gamma(qf.shape[-1] + 4, 2.0**-53)) * (absqk + math.log(2.0) * np.abs(np.where(known, xc, 0.0)))
    return np.where(known, e, 0.0), np.where(known, floor, 0.0), known, x, normal


def _mma_steps_error(t, ends, mma, acc0=None, slack=None):
    """First-order bound on the error of summing the products t (..., n) in order into an accumulator that
    starts at acc0 (exact in fp32; default 0), in tensor-core steps ending at the indices `ends` (ascending, the last = n - 1), under
    the measured step model of proofs/hardware.py (MmaBehaviour; bounds.md sec. 2a), evaluated on the
    data instead of through delta (|acc| + sum |t|):

    one step adds its products t_i to acc = P_{s-1} (the partial sum before it). Alignment to the grid
    g = 2^(e - 23 - F) with 2^e <= M_s = max(|P_{s-1}|, max_i |t_i|) keeps the largest term whole and costs
    each other term < min(|t_i|, g) (truncation; min(|t_i|, g/2) rounded): at most
    a_s = sum_{terms} min(|t|, g') - g' with g' = 2^(-23-F) M_s (halved when rounded). Normalizing the
    aligned sum (|.| <= |P_s| + a_s) into fp32 costs < 2^-23 of it (2^-24 rounded). Hence the step errs by
    < norm (|P_s| + a_s) + a_s, with P_s the exact partial sums: what is returned, summed over the steps.
    The computed values differ from the exact ones (second order): the caller adds that. With `slack` (a bound
    on |computed - exact| of the partial sums): (total, neg, pos), the split by sign of _mma_steps_sides."""
    steps, P, Pprev, g, norm = _mma_steps(t, ends, mma, acc0)
    prev = np.abs(Pprev)
    lost = np.minimum(np.abs(steps), g[..., None])
    acc_lost = np.minimum(prev, g)
    a = np.maximum(lost.sum(-1) + acc_lost - g, 0.0)
    total = (norm * (np.abs(P) + a) + a).sum(-1)
    if slack is None:
        return total
    return (total, *_mma_steps_sides(steps, P, Pprev, lost, acc_lost, norm, mma, slack))


def _mma_steps(t, ends, mma, acc0=None):
    """The steps of _mma_steps_error: (products per step (..., S, k) zero-padded, exact partial sums P_s after
    and P_{s-1} before each step, the grid bound g_s (halved when aligning rounds), the normalization's u)."""
    ends = np.asarray(ends)
    starts = np.concatenate([[0], ends[:-1] + 1])
    half = 0.5 if mma.alignment == "round" else 1.0
    norm = 2.0**-24 if mma.normalization == "round" else 2.0**-23
    width = int((ends - starts).max()) + 1
    if np.all(ends - starts + 1 == width) and ends[-1] + 1 == t.shape[-1]:  # equal steps: a reshape
        steps = t.reshape(*t.shape[:-1], len(ends), width)
    else:  # steps padded with zeros (a zero term loses nothing and sets no maximum)
        idx = starts[:, None] + np.arange(width)[None, :]
        steps = np.where(idx <= ends[:, None], t[..., np.minimum(idx, t.shape[-1] - 1)], 0.0)
    c = np.zeros(t.shape[:-1]) if acc0 is None else np.asarray(acc0, dtype=np.float64)
    P = c[..., None] + np.cumsum(steps.sum(-1), axis=-1)
    Pprev = np.concatenate([c[..., None], P[..., :-1]], axis=-1)
    g = half * 2.0 ** (-23 - mma.extra_bits) * np.maximum(np.abs(Pprev), np.abs(steps).max(-1))
    return steps, P, Pprev, g, norm


def _mma_steps_sides(steps, P, Pprev, lost, acc_lost, norm, mma, slack):
    """(neg, pos): the step errors of _mma_steps_error split by sign, computed - exact in [-neg, pos] (first
    order; truncating alignment and normalization only, else the total on both sides). Truncation moves every
    term and the normalized sum toward zero: a term t loses min(|t|, g) in the direction -sign(t), the sum
    < 2^-23 (|P_s| + a_s) in the direction -sign(P_s). Where a computed value may have the other sign than the
    exact one (|exact| <= `slack`, the bound on computed - exact, plus the alignment loss for the sum), its loss
    counts on both sides. (No credit for the largest term: a little above _mma_steps_error's total.)"""
    if mma.alignment != "truncation" or mma.normalization != "truncation":
        a = lost.sum(-1) + acc_lost
        total = (norm * (np.abs(P) + a) + a).sum(-1)
        return total, total
    neg = (lost * (steps > 0)).sum(-1)
    pos = (lost * (steps < 0)).sum(-1)
    e = np.asarray(slack)[..., None]
    sure = np.abs(Pprev) > e
    neg = neg + acc_lost * ((Pprev > 0) | ~sure)
    pos = pos + acc_lost * ((Pprev < 0) | ~sure)
    a = lost.sum(-1) + acc_lost
    n_lost = norm * (np.abs(P) + a)
    sure = np.abs(P) > e + a
    neg = neg + n_lost * ((P > 0) | ~sure)
    pos = pos + n_lost * ((P < 0) | ~sure)
    return neg.sum(-1), pos.sum(-1)


def _mma_dot_error(qf, kf, scale, model: _Model) -> tuple:
    """First-order error of the tensor-core logit dot scale * q_i.k_j for every (i, j): the products over d
    in consecutive k_step groups (the MMA's K steps, in ascending order): (_mma_steps_error, and its split by
    sign _mma_steps_sides as (neg, pos), or that total on both sides where the model gives no sign)."""
    d = qf.shape[-1]
    ends = np.unique(np.minimum(np.arange(model.k_step - 1, d + model.k_step - 1, model.k_step), d - 1))
    Nq, Nk = qf.shape[-2], kf.shape[-2]
    out = np.zeros((3, *np.broadcast_shapes(qf.shape[:-2], kf.shape[:-2]), Nq, Nk))
    step = max(1, (1 << 20) // max(1, Nk * d))
    nd = _within_dot(model, d)
    wc = (1.0 + model.u_in) ** 2 * (1.0 + gamma(nd, model.u_dacc)) - 1.0  # |computed - exact| per unit sum |t|
    for r0 in range(0, Nq, step):
        r = slice(r0, min(Nq, r0 + step))
        t = scale * (qf[..., r, None, :] * kf[..., None, :, :])
        res = _mma_steps_error(t, ends, model.mma, slack=wc * np.abs(t).sum(-1))
        for i in range(3):
            out[i, ..., r, :] = res[i]
    return out[0], out[1], out[2]


def tf32_truncated(x) -> np.ndarray:
    """fp32 values as the H100's tensor core takes them for .tf32 (the low 13 significand bits cleared;
    proofs/hardware.py tf32_operand = "truncate", measured), as float64."""
    b = np.ascontiguousarray(np.asarray(x, dtype=np.float32)).view(np.int32) & np.int32(~0x1FFF)
    return b.view(np.float32).astype(np.float64)


def _fp32_exact(x) -> bool:
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore"):
        return bool(np.all(x.astype(np.float32).astype(np.float64) == x))


def _conversion_error(qf, kf, scale):
    """(scale (q~ . k~ - q . k), floor) for every (i, j) with q~, k~ the truncated tf32 operands: the exact
    logit error of the conversion (bounds.md sec. 6a), evaluated in float64 (products of 11-bit significands
    and of fp32 values: the difference is formed from exact products, its float64 sum errs by
    <= gamma_{2d}(2^-53) scale sum |q||k|, in the floor). Subnormal operands may be flushed to zero instead
    (bounds.md sec. 2): those products are in the floor, |q_k k_k| each. None if q, k are not fp32 values."""
    if not (_fp32_exact(qf) and _fp32_exact(kf)):
        return None
    tiny = 2.0**-126
    qt, kt = tf32_truncated(qf), tf32_truncated(kf)
    qn, kn = np.where(np.abs(qf) < tiny, 0.0, qf), np.where(np.abs(kf) < tiny, 0.0, kf)
    qtn, ktn = np.where(np.abs(qf) < tiny, 0.0, qt), np.where(np.abs(kf) < tiny, 0.0, kt)
    T = lambda x: np.swapaxes(x, -1, -2)  # noqa: E731
    conv = scale * ((qtn - qn) @ T(ktn) + qn @ T(ktn - kn))
    aq, ak = np.abs(qf), np.abs(kf)
    sub = scale * ((aq * (aq < tiny)) @ T(ak) + (aq * (aq >= tiny)) @ T(ak * (ak < tiny)))
    d = qf.shape[-1]
    floor = sub + float(gamma(2 * d + 2, 2.0**-53)) * scale * (aq @ T(ak))
    return conv, floor

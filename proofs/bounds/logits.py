"""The logit error e_ij (proofs/bounds.md sec. 3)."""
from __future__ import annotations

from dataclasses import dataclass
import math

import numpy as np

from .precision import (_Model, _conv, _within_dot, gamma)


@dataclass(frozen=True)
class _Logits:
    """Per-logit bounds on the error e_ij of the exponent argument (natural-log units), sec. 3."""

    wc: np.ndarray  # worst case |e_ij| (full majorant)
    lin: np.ndarray  # linear part of that majorant
    sigma: np.ndarray  # sqrt(sum c_t^2 u_t^2) of the random (round-to-nearest) first-order part
    det: np.ndarray  # first-order part that is not random (truncation, shared constant rounding)
    qk: tuple = ()  # (scale |q||k|^T, scale sqrt(q^2 (k^2)^T), |scale q.k| or None): shift-independent, reusable


def _logit_errors(qf, kf, s, shift, vis, scale, model: _Model, d: int, has_bias: bool,
                  qk: tuple = ()) -> _Logits:
    """Error of t_ij = fl(fl(q_i.k_j) * c) - shift_i (c = scale*log2 e rounded), in natural units.

    dot: operands converted into the dot format (u_in each: rounded, or truncated for tf32), d products
    accumulated with u_dacc
    (products exact on tensor cores, rounded for ieee/fp64, counted within gamma_d);
    argument: c rounded (u_w |s|, shared by the row: deterministic), product rounded (u_w |s|),
    subtraction of the running max rounded (u_w |s - m_run| <= u_w |s - m|), bias add (u_w |s|)."""
    if not qk:  # the products of q and k do not depend on the shift: computed once per problem
        absqk = scale * (np.abs(qf) @ np.swapaxes(np.abs(kf), -1, -2))
        sqqk = scale * np.sqrt((qf * qf) @ np.swapaxes(kf * kf, -1, -2))
        # |scale q.k| before any bias: with a cancelling bias it can be far larger than |s|
        qk = (absqk, sqqk, np.abs(scale * (qf @ np.swapaxes(kf, -1, -2))) if has_bias else None)
    absqk, sqqk, a_qk = qk
    s0 = np.where(vis, s, 0.0)
    if a_qk is None:
        a_qk = np.abs(s0)
    a_b = np.abs(s0) if has_bias else 0.0 * s0  # rounding of the bias add, on the sum
    a_t = np.abs(s0 - shift[..., None])
    u, ui = model.u_w, model.u_in
    coef_arg = 2.0 * a_qk + a_b + a_t
    nd = _within_dot(model, d)  # accumulator roundings of the d-long dot
    dot_wc = ((1.0 + ui) ** 2 * (1.0 + gamma(nd, model.u_dacc)) - 1.0) * absqk
    # The argument's roundings in order, each <= u |computed value| = u (|exact value| + the error so
    # far): the first-order part is u coef_arg (= arg_lin), the rest is the exact second-order majorant
    # (not a gamma_n hand count: gamma_3 coef_arg put 2u coef_arg of first-order error into "second order").
    x_hat = a_qk + dot_wc  # |fl(q.k)| in logit units
    err_c = u * x_hat  # c = scale * log2(e) rounded once
    err_p = u * (x_hat + err_c)  # fl(x * c)
    err_b = u * (a_b + dot_wc + err_c + err_p) if has_bias else 0.0  # + bias
    err_t = u * (a_t + dot_wc + err_c + err_p + err_b)  # - running max
    arg_wc = err_c + err_p + err_b + err_t
    dot_lin = (2.0 * ui + nd * model.u_dacc) * absqk
    arg_lin = u * coef_arg
    (ri, _), (di, _) = _conv(model)
    sig_dot = math.sqrt(2.0) * ri * sqqk + (0.0 if model.tensor_core else math.sqrt(d) * u * absqk)
    det_dot = (nd * model.u_dacc if model.tensor_core else 0.0) * absqk
    if di:  # truncated q, k: sum_k q_k k_k theta_k, theta_k in [-2 u_in, 0] (first order), not random:
        # <= 2 u_in max(positive part, negative part) = u_in (sum_k |q_k k_k| + |q.k|)  (bounds.md sec. 6)
        det_dot = det_dot + di * (absqk + a_qk)
    sig_arg = u * np.sqrt(a_qk**2 + a_b**2 + a_t**2)
    det_arg = u * a_qk  # rounding of the constant c = scale * log2(e): one error for the whole row
    z = np.zeros_like(s0)
    return _Logits(
        wc=np.where(vis, dot_wc + arg_wc, z),
        lin=np.where(vis, dot_lin + arg_lin, z),
        sigma=np.where(vis, np.sqrt(sig_dot**2 + sig_arg**2), z),
        det=np.where(vis, det_dot + det_arg, z),
        qk=qk,
    )

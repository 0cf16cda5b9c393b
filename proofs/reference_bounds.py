"""Error bounds of the float64 references (reference/) against the exact result: the softmax family,
the row recurrences and attention with dropout (derivations in proofs/reference_bounds.md).

Attention without dropout is bounded by `flashcheck.proofs.bounds.reference_bound`; this module covers what that
one does not model. Every bound is rigorous, not first order: a quantity computed as
x (1 + d_1) ... (1 + d_k)^(+-1) with |d_i| <= u_i satisfies |log(x_hat / x)| <= sum_i lam(u_i),
lam(u) = -log(1 - u), so its relative error is <= expm1(that sum): the gamma_n of Higham in log form,
second-order terms included. Hypotheses (measured: tests/test_hardware.py::test_numpy_exp_log_ulps):
NumPy's float64 exp and log are within 1 ulp (relative 2u); + - * / and sqrt round to nearest.
Results below the normal range (2^-1022) carry an absolute error instead, <= ETA = 2^-1074 per
operation (<= 1 ulp for exp); the `floor` terms count those operations.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

U = 2.0**-53  # float64 unit roundoff
ETA = 2.0**-1074  # smallest subnormal: absolute error of one operation whose result underflows
LAM = -math.log1p(-U)  # |log(1 + d)| for one rounding, |d| <= u
LAM_LIBM = -math.log1p(-2 * U)  # one exp or log: <= 1 ulp, relative 2u


def _eval(*sizes: int) -> float:
    """The bound itself is evaluated in float64: on any path < 64 roundings plus the length of its
    sums of nonnegative terms (each computed sum >= exact sum exp(-n lam)); this factor majorizes them."""
    return math.exp((64 + 2 * sum(int(n) for n in sizes)) * LAM)


def _log_bound(*terms) -> np.ndarray:
    """The sum of log-error terms, broadcast together."""
    total = np.zeros(())
    for t in terms:
        total = total + np.asarray(t, dtype=np.float64)
    return total


def _finite_rows(x: np.ndarray):
    """(count of finite entries, max, min) per row; max/min are 0 for rows with nothing finite."""
    fin = np.isfinite(x)
    n = fin.sum(axis=-1)
    any_ = n > 0
    mx = np.where(any_, np.where(fin, x, -np.inf).max(axis=-1), 0.0)
    mn = np.where(any_, np.where(fin, x, np.inf).min(axis=-1), 0.0)
    return fin, n, mx, mn


@dataclass(frozen=True)
class SoftmaxBound:
    """Elementwise bounds on |a_hat - a| (softmax entries) and |LSE_hat - LSE| (per row)."""

    a: np.ndarray
    lse: np.ndarray


def _softmax_log_error(x: np.ndarray, rescales):
    """(fin, n, m, R, theta, L, a_major): the denominator's and each entry's log error of any softmax
    evaluation with <= `rescales` rescale steps (reference_bounds.md, sec. 1), and a majorant of the
    exact softmax (this function's own float64 softmax, itself within L of it)."""
    fin, n, m, mn = _finite_rows(x)
    R = m - mn
    T = n if rescales is None else rescales
    theta = _log_bound(2 * U * R, (T + 1) * LAM_LIBM, (2 * T + n) * LAM, 8 * n * ETA)
    t = np.where(fin, np.abs(x - m[..., None]), 0.0)
    L = _log_bound(U * t, LAM_LIBM + LAM, theta[..., None])
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.where(fin, np.exp(np.where(fin, x - m[..., None], 0.0)), 0.0)
        a = e / np.maximum(e.sum(axis=-1, keepdims=True), 1.0)
    return fin, n, m, R, theta, L, a * np.exp(L) + ETA


def softmax_bound(x) -> SoftmaxBound:
    """Any float64 evaluation of softmax(x) / logsumexp(x) in reference/softmax.py: safe, online,
    tiled online (any block), naive (where it does not overflow), logsumexp and m + log l of the
    online states; compared with the exact value rounded to float64 (one more u |a|).

    Row of n finite entries, max m, range R = m - min. Each term of the denominator reaches it as
    e_l exp(theta_l), |theta_l| <= Theta = 2 u R + (n + 1) lam_libm + 3 n lam (its own exp argument
    u |x_l - m_l| <= u R, the rescale arguments u |m_old - m_new| telescoping to <= u R, <= n rescale
    exps and its own exp, <= n products by alpha, <= 2n additions). The numerator of a_j carries
    u |x_j - m| + lam_libm, the division lam. Underflow: <= 4n operations of the denominator may
    each lose ETA absolutely; d >= 1 (the maximum's term is exp(0) = 1), so that is a relative
    8 n ETA in log form; the numerator and the division lose <= 2 ETA."""
    x = np.asarray(x, dtype=np.float64)
    fin, n, m, R, theta, L, a = _softmax_log_error(x, None)
    ev = _eval(x.shape[-1])
    b_a = ev * (a * (np.expm1(L) + U) + 2 * ETA)
    # LSE = m + log l: |log l_hat - log l| <= Theta, then the log (2u |log l_hat|, log l_hat <= log n +
    # Theta) and the final addition (u |m + log l_hat|); the oracle's rounding u |LSE|
    log_l = np.log(np.maximum(n, 1)) + theta
    lse_major = np.abs(m) + log_l
    b_lse = ev * _log_bound(theta, 2 * U * log_l, 2 * U * lse_major)
    empty = n == 0
    return SoftmaxBound(a=np.where(empty[..., None], 0.0, b_a), lse=np.where(empty, 0.0, b_lse))


def row_recurrence_bound(x, v, block: int | None = None) -> np.ndarray:
    """|o_hat - O| per output entry for flashcheck.reference.row_recurrence / tiled_row_recurrence (`block`
    b: T = ceil(n / b) tiles; None covers every block size).

    Key j enters o' in its tile as p_j V_j / d'_t and is carried by o' d'_{t-1} alpha / d'_t; the d''s
    telescope, so o_hat_c = sum_j V_jc p_j prod alpha / d'_T times (1 + delta) factors: <= b + 1 from
    the einsum and the addition, 1 for the division, 4 per later tile (d alpha, its product with o',
    the addition, the division). p_j prod alpha = e_j exp(phi_j) with |phi_j| <= 2 u R + (T + 1)
    lam_libm, and d'_T = sum_l e_l exp(theta_l), |theta_l| <= 2 u R + (T + 1) lam_libm + (2T + b) lam.
    So |o_hat_c - o_c| <= sum_j A_j |V_jc| expm1(Phi), Phi = 4 u R + 2 (T + 1) lam_libm +
    (6T + 2b + 2) lam, + u |O| for the oracle's rounding. Underflow: every operation with a subnormal
    result loses <= ETA, later scaled by factors <= 1 (+ rounding): 2 ETA (sum_j |V_jc| + 4 n + 4 T)."""
    x = np.asarray(x, dtype=np.float64)
    v = np.abs(np.asarray(v, dtype=np.float64))
    N = x.shape[-1]
    b = N if block is None else min(int(block), N)
    T = N if block is None else -(-N // b)
    fin, n, m, R, _, _, A = _softmax_log_error(x, None)
    phi = _log_bound(4 * U * R, 2 * (T + 1) * LAM_LIBM, (6 * T + 2 * b + 2) * LAM, 8 * N * ETA)
    weight = np.einsum("...j,...jc->...c", A, v)
    floor = 2 * ETA * (v.sum(axis=-2) + 4 * N + 4 * T)
    bound = _eval(N) * (weight * (np.expm1(phi)[..., None] + U) + floor)
    return np.where((n > 0)[..., None], bound, 0.0)


# ---- attention with dropout ---------------------------------------------------------------------------

@dataclass(frozen=True)
class AttentionBound:
    o: np.ndarray
    lse: np.ndarray


@dataclass(frozen=True)
class AttentionGradBound:
    dq: np.ndarray
    dk: np.ndarray
    dv: np.ndarray


@dataclass(frozen=True)
class _Logits:
    """What the dropout bounds are built from (shapes (B, Hq, Nq, Nk) unless said)."""

    problem: object
    vis: np.ndarray
    E: np.ndarray  # |s_hat - s| per entry
    kappa: np.ndarray  # majorant of |s| per entry (0 where invisible)
    L: np.ndarray  # |log(P_hat_ij / P_ij)| per entry, any tiling, dropout scale included
    theta: np.ndarray  # the denominator's log error per row
    P: np.ndarray  # majorant of the exact softmax P (0 where invisible)
    z: np.ndarray  # dropout factor keep / (1 - p), majorized (0 where dropped)
    scale: float
    scale_lam: float  # log error of the float scale value (2 lam for the default 1/sqrt(d))


def _logits(q, k, v, kwargs) -> _Logits:
    """Logit errors and softmax weight errors of the float64 references (attention, FA2 forward with
    any blocks, standard backward): reference_bounds.md, sec. 3."""
    from flashcheck.reference.attention import expand_kv, masked_logits, masked_softmax, resolve_scale
    from flashcheck.reference.shapes import check_attention_args

    kw = {k_: v_ for k_, v_ in kwargs.items() if k_ in ("scale", "causal", "window", "mask", "bias")}
    p = check_attention_args(q, k, v, **kw)
    s, vis = masked_logits(q, k, p, **kw)
    vis = np.broadcast_to(vis, p.full) & np.isfinite(s)
    sc = resolve_scale(kw.get("scale"), p.d)
    scale_lam = 2 * LAM if kw.get("scale") is None else 0.0  # fl(1 / fl(sqrt d)) vs the exact 1/sqrt(d)
    K = np.abs(expand_kv(np.asarray(k, dtype=np.float64), p.group))
    mag = abs(sc) * (np.abs(np.asarray(q, dtype=np.float64)) @ np.swapaxes(K, -1, -2))
    if kw.get("bias") is not None:
        mag = mag + np.abs(np.broadcast_to(kw["bias"], p.full))
    # s_hat = (sc (1 + sigma) sum_c q_c k_c (1 + theta_c) (1 + delta) + b)(1 + delta'): <= d + 3 roundings
    kappa = np.where(vis, mag * math.exp((p.d + 2) * LAM), 0.0) * math.exp(scale_lam)
    E = np.expm1((p.d + 3) * LAM + scale_lam) * kappa
    Ei = E.max(axis=-1)
    n = p.Nk
    R = 2 * (kappa.max(axis=-1) + Ei)  # range of the computed logits of a row
    theta = _log_bound(2 * U * R, (n + 1) * LAM_LIBM, 3 * n * LAM, 8 * n * ETA)
    L = _log_bound(E, Ei[..., None], (2 * U * R + (n + 1) * LAM_LIBM)[..., None], (3 * n + 4) * LAM,
                   theta[..., None])
    Ps, _ = masked_softmax(s)
    P = np.where(vis, Ps * np.exp(L), 0.0)
    dp = float(kwargs.get("dropout_p", 0.0) or 0.0)
    keep = kwargs.get("dropout_mask")
    keep = np.ones(p.full, bool) if keep is None else np.broadcast_to(np.asarray(keep, bool), p.full)
    z = np.where(keep, (1.0 / (1.0 - dp)) * math.exp(2 * LAM), 0.0)
    return _Logits(p, vis, E, kappa, L, theta, P, z, sc, scale_lam)


def dropout_attention_bound(q, k, v, **kwargs) -> AttentionBound:
    """|O_hat - O| and |LSE_hat - LSE| of flashcheck.reference.attention and flashcheck.reference.flash_attention_2_forward
    (any blocks) with dropout (dropout_p, dropout_mask; also valid without), against the oracle's
    value rounded to float64 (reference_bounds.md, sec. 3)."""
    from flashcheck.reference.attention import expand_kv

    g = _logits(q, k, v, kwargs)
    p = g.problem
    V = np.abs(expand_kv(np.asarray(v, dtype=np.float64), p.group))
    Pd = g.P * g.z
    weight = (Pd * np.expm1(g.L)) @ V * math.exp((p.Nk + 1) * LAM)
    major = Pd @ V * math.exp((p.Nk + 1) * LAM)
    zmax = g.z.max(axis=-1, keepdims=True) if g.z.size else 1.0  # (B, Hq, Nq, 1)
    floor = 4 * ETA * np.maximum(zmax, 1.0) * (V.sum(axis=-2, keepdims=True) + 3 * p.Nk + 4)
    empty = ~g.vis.any(axis=-1)
    ev = _eval(p.Nk, p.d)
    b_o = ev * (weight + U * major + floor)
    # LSE = m_hat + log l_hat: |m_hat - m| <= E_i, |log l_hat - log l| <= theta + 2 E_i (shift
    # invariance), the log's 2u |log l_hat| and the addition's u |LSE_hat|; the oracle's u |LSE|
    Ei = g.E.max(axis=-1)
    log_l = np.log(max(p.Nk, 1)) + g.theta
    lse_major = g.kappa.max(axis=-1) + Ei + log_l
    b_lse = ev * _log_bound(3 * Ei, g.theta, 2 * U * log_l, 2 * U * lse_major, 4 * p.Nk * ETA)
    return AttentionBound(o=np.where(empty[..., None], 0.0, b_o), lse=np.where(empty, 0.0, b_lse))


def dropout_attention_backward_bound(q, k, v, do, **kwargs) -> AttentionGradBound:
    """|dQ_hat - dQ|, |dK_hat - dK|, |dV_hat - dV| of flashcheck.reference.standard_attention_backward with
    dropout (through J_softmax; reference_bounds.md, sec. 4), against the oracle rounded to float64."""
    from flashcheck.reference.attention import expand_kv, reduce_kv

    g = _logits(q, k, v, kwargs)
    p = g.problem
    Q = np.abs(np.asarray(q, dtype=np.float64))
    K = np.abs(expand_kv(np.asarray(k, dtype=np.float64), p.group))
    V = np.abs(expand_kv(np.asarray(v, dtype=np.float64), p.group))
    dO = np.abs(np.asarray(do, dtype=np.float64))
    nk, nq, dv, grp = p.Nk, p.Nq, p.dv, p.group
    sc = abs(g.scale)
    # dP = dropout(dO V^T): |dP| <= Gz, relative error eps_G (dv products/adds, 1 - p, division)
    Gz = (dO @ np.swapaxes(V, -1, -2)) * math.exp((dv + 1) * LAM) * g.z
    eps_G = math.expm1((dv + 2) * LAM)
    Lrow = g.L.max(axis=-1)
    # J_hat - J: <= (delta_jk P_j + P_j P_k) e_J; dS = J dP summed over Nk terms (eta)
    e_J = np.expm1(2 * Lrow + 2 * LAM)
    c_S = (1 + e_J) * (1 + eps_G) * math.exp(nk * LAM) - 1  # per row
    W = g.P * (Gz + (g.P * Gz).sum(axis=-1, keepdims=True))  # majorant of |dS| and of the J|dP| terms
    f_P = 2 * ETA  # absolute error of a subnormal P_hat entry (exp, division)
    f_S = 2 * (2 * f_P * (Gz * (1 + eps_G) + (Gz * (1 + eps_G)).sum(axis=-1, keepdims=True))
               + (nk + 2) * ETA)
    f_S = np.where(g.vis.any(axis=-1, keepdims=True), f_S, 0.0)
    grow_q = math.exp((nk + 2) * LAM + g.scale_lam)
    Wc = W * (1 + c_S)[..., None]
    b_dq = sc * ((Wc * grow_q - W) @ K + 2 * f_S @ K) + (nk + 2) * ETA + U * sc * (W @ K) * grow_q
    grow_k = math.exp((nq + grp + 2) * LAM + g.scale_lam)
    WcT, WT = np.swapaxes(Wc, -1, -2), np.swapaxes(W, -1, -2)
    b_dk = (sc * ((WcT * grow_k - WT) @ Q + 2 * np.swapaxes(f_S, -1, -2) @ Q) + (nq + grp + 2) * ETA
            + U * sc * (WT @ Q) * grow_k)
    Pd = g.P * g.z
    PdT = np.swapaxes(Pd * np.expm1(g.L + (nq + grp) * LAM), -1, -2)
    zmax = float(g.z.max()) if g.z.size else 1.0
    b_dv = (PdT @ dO + 2 * f_P * zmax * np.swapaxes(g.vis, -1, -2) @ dO + (nq + grp) * ETA
            + U * (np.swapaxes(Pd, -1, -2) @ dO) * math.exp((nq + grp) * LAM))
    ev = _eval(nk, nq * grp, dv, p.d)
    return AttentionGradBound(dq=ev * b_dq, dk=ev * reduce_kv(b_dk, grp), dv=ev * reduce_kv(b_dv, grp))

"""The backward bounds on dQ, dK, dV (proofs/bounds.md sec. 8) and the float64 references' bound (sec. 9)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
import math

import numpy as np

from .precision import (_DOT_OPERAND, FAILURE_PROBABILITY, Precision, REFERENCE_PRECISION, UNDERFLOW_FLOOR, UNIT_ROUNDOFF, _Model, _check_kind, _conv, _dot_steps, _model, _within_dot, gamma, hoeffding_lambda, _for_call)
from .precision import _dq_model, _dq_tile_add_flush
from .results import (BackwardBound, ForwardBound)
from .common import (_FP32_NORMAL_MIN, _SIGNIFICAND_BITS, _exp_err, _fix_bad, _half_ulp, _no_nan, _round_nearest,
                     _rounding_on_data, _rows_chunks, _weighted_exp_err)
from .logits import _fp32_exact, _logit_errors
from . import forward as _forward_module
from .forward import (_Forward, _forward)
from .visits import Visits, dq_visits, rows_visits, shared_visits


def _combine(wc, rem, var, det, lam, kind):
    """worst_case: the majorant wc. probabilistic: lam sqrt(var) + det + rem, capped by wc; rem bounds the
    nonlinear remainder (wc - lin, or _GradError.rem)."""
    if kind == "worst_case":
        return wc
    return np.minimum(lam * np.sqrt(np.maximum(var, 0.0)) + det + np.maximum(rem, 0.0), wc)


def _delta_error(F: _Forward, M: _Model, dof, vf, kind, out, lr: _LseRandom | None = None, fmt: str | None = None):
    """out: _delta_error_model's (eps, std, det, signed); on the rows where the forward's accumulator is known
    (_ForwardParts.acc_known) the smaller of that and _delta_from_accumulator's (both hold)."""
    ak = F.parts.acc_known
    if ak is None or kind != "probabilistic" or lr is None or not ak[3].any():
        return out
    new = _delta_from_accumulator(F, M, dof, vf, ak, fmt)
    take = ak[3] & (new[0] < out[0])
    return tuple(np.where(take, n, o) for n, o in zip(new, out))


def _delta_from_accumulator(F: _Forward, M: _Model, dof, vf, ak, fmt):
    """Delta's error where the forward's accumulator is known (bounds.md sec. 8, "Delta from the known accumulator"):
    the kernel's O_hat_c = div(acc_c, l32) = (acc_c / l32)(1 + eps_c), |eps_c| <= eps_div (div.full, measured), with acc
    exactly known (_known_accumulator) and l32 in [l_lo, l_hi]; Delta_hat = fl(sum_c fl(dO_c O_hat_c)). So
    Delta_hat - Delta = kappa(l32) + sum_c dO_c (acc_c / l32) eps_c + (the fp32 dot's roundings), kappa(l) =
    (sum_c dO_c acc_c) / l - Delta, monotone in l: kappa lies between its values at l_lo and l_hi (centre signed,
    half-width), evaluated in float64 (gamma_{dv+2}(2^-53) of the sums of absolute values, and the float64 O's error
    against the exact one, gamma_{Nk+2}(2^-53) sum_c |dO_c| (A|V|)_c, twice); the division's eps worst case; the dot's
    roundings as _delta_dot (random over groups of equal products, half an ulp of their binade). Returns (eps, std,
    det, signed) as _delta_error_model: det holds |centre| (signed: the centre)."""
    acc, l_lo, l_hi, ok = ak
    o = F.o
    abs_do = np.abs(dof)
    dv, Nk = dof.shape[-1], F.A.shape[-1]
    l_lo1, l_hi1 = np.where(ok, l_lo, 1.0), np.where(ok, l_hi, 1.0)
    S = (dof * acc).sum(-1)
    delta = (dof * o).sum(-1)
    k_lo, k_hi = S / l_lo1 - delta, S / l_hi1 - delta
    centre, half = 0.5 * (k_lo + k_hi), 0.5 * np.abs(k_hi - k_lo)
    Sa = (abs_do * np.abs(acc)).sum(-1) / l_lo1  # sum_c |dO_c| |acc_c| / l, l >= l_lo
    Av = F.A @ np.abs(vf)
    ev = (float(gamma(dv + 2, 2.0**-53)) * (Sa + (abs_do * np.abs(o)).sum(-1) + np.abs(centre) + half)
          + 2.0 * float(gamma(Nk + 2, 2.0**-53)) * (abs_do * Av).sum(-1))
    div = M.eps_div * Sa
    # O_hat_c = acc_c / l32 (1 + eps_c) within o_err of acc_c / l_lo (the float64 quotient: 2^-52 more)
    o_hat = acc / l_lo1[..., None]
    o_err = np.abs(acc) * ((1.0 / l_lo1 - 1.0 / l_hi1)[..., None] + (M.eps_div + 2.0**-52) / l_lo1[..., None])
    dot_var, dot_det = _delta_dot(dof, o_hat, o_err, M.u_w, dv, fmt if fmt == "float32" else None, M)
    det = np.abs(centre) + half + ev + div + dot_det
    eps = F.parts.lam * np.sqrt(dot_var) + det
    return (np.where(ok, eps, np.inf), np.where(ok, np.sqrt(dot_var), 0.0), np.where(ok, det, np.inf),
            np.where(ok, centre, 0.0))


def _delta_error_model(F: _Forward, M: _Model, dof, dP, g, absdov, vf, kind, acc=None, tc=None,
                       lr: _LseRandom | None = None, lg_conv=None, fmt: str | None = None):
    """Bound on |Delta_hat_i - Delta_i|, Delta_hat = fl(sum_c dO_ic O_hat_ic) with the kernel's own O_hat.

    Contracting the exact O-error identity of sec. 5 with dO (bounds.md sec. 8):
    sum_c dO_c (N_c/D - O_c) = [sum_j p_j (b_j g_j + (1 + b_j)(sum_c dO_c nu_jc v_jc - mu_j Delta))] / D,
    g_j = dP_j - Delta, so the logit errors enter through |g_j| (not sum_c |dO_c||v_jc - O_c|); then the
    division and the store per column, and the fp32 sum of dv products. acc: (variance proxy, det) of
    the round-to-nearest P.V accumulation and rescales and its partial-sum total (_delta_accumulation), in place of the split
    along O; None: that split. tc: the tensor-core truncation of that accumulation from its partial sums
    (_tensor_core_steps), in place of n_pv u_dacc sum_c |dO_c| (A|V|)_c. lr (probabilistic): l's sum
    random over its groups of equal summands where lr.l_ok (_lse_random) in place of mu_lin |Delta|, and the
    final fp32 sum of dv products random over groups of equal products (_delta_dot) in place of
    gamma_dv sum_c |dO_c| (|O_c| + bound.o_c): the returned std and det then carry them (rows of dK, dV).
    fmt: the working format (Precision.accumulate); in fp32 that sum's roundings are charged by half an ulp of
    their binade (_delta_dot).
    lg_conv (probabilistic, tf32 that truncates): the logits' (one-sided bound, exact error, floor) of their
    input conversion (logits._Logits det_conv, conv, conv_floor): the first-order effect on Delta is then
    computed with its sign, |sum_j A_j e_j g_j|, and V's conversion likewise (_delta_v_conversion)."""
    P = F.parts
    A, o, u = F.A, F.o, M.u_w
    abs_do = np.abs(dof)
    absg = np.abs(g)
    delta = (dof * o).sum(-1)
    aD = np.abs(delta)
    inv = P.inv_den[..., 0]
    sum_fin = (abs_do * (P.floors * P.inv_den + P.final)).sum(-1)
    wc = (((P.Ab_wc * absg).sum(-1) + (P.Ab1_wc * (P.nu_wc * absdov)).sum(-1)
           + P.Ab1_wc.sum(-1) * P.mu_wc * aD) * inv + sum_fin)
    depth, trees = _delta_claim(M, F.problem.dv)
    if depth is None:
        rounding = float(gamma(F.problem.dv, u)) * (abs_do * (np.abs(o) + F.bound.o)).sum(-1)
    else:  # the dot's tree stated (Precision.delta_depth): its bound, a worst case as well
        rounding = _delta_tree_bound(dof, o, F.bound.o, u, depth, trees, fmt if fmt == "float32" else None)
    if kind == "worst_case":
        return wc + rounding, np.zeros_like(wc), wc + rounding, np.zeros_like(wc)
    oabs_do = abs_do * np.abs(o)
    u_store = M.u_out if F.bound.precision.delta_from == "output" else 0.0
    lin = ((A * P.b_lin * absg).sum(-1) + P.nu_lin * (A * absdov).sum(-1) + P.mu_lin * aD
           + (M.eps_div + u_store) * oabs_do.sum(-1))
    Av = A @ np.abs(vf)  # (A |V|)_c
    n_pv, T, n_l = P.n_pv, P.T, P.n_l
    (ri, rp), (di, dp) = _conv(M)
    rp = M.u_pv if rp else 0.0
    n_rn = (0 if M.tensor_core else n_pv) + T
    # as for O (sec. 6): the parts of the accumulation and P-rounding errors along O (resp. Delta) are
    # systematic on structured inputs: worst case; only the fluctuation around them is random
    # (sum_j A_j |v_jc - O_c| <= (A|V|)_c + |O_c|)
    rem = wc - lin
    if acc is None:
        acc_var, acc_det = n_rn * u**2 * ((dof * (Av + np.abs(o))) ** 2).sum(-1), n_rn * u * oabs_do.sum(-1)
    else:
        acc_var, acc_det, partial = acc
        if M.recursive:
            rem = np.minimum(rem, _delta_accumulation_remainder(F, M, abs_do, absdov, vf, partial, wc, lin))
    # P's rounding into the operand format enters Delta as sum_j A_j delta_j (g_j + Delta): not random (the logits
    # set its residue, bench/adversaries/p_residue_o.py): worst case rp (sum_j A_j |g_j| + |Delta|), or on the data
    # (no random part from the logit errors: they are in P.det, bounds.md sec. 3)
    var = (ri**2 * ((A * A) * ((dof * dof) @ np.swapaxes(vf * vf, -1, -2))).sum(-1)
           + acc_var
           + u_store**2 * ((dof * o) ** 2).sum(-1))
    if lr is not None:  # l's sum: Azuma over its groups of equal summands (rescales worst case)
        var = var + lr.l_var * delta**2
        mu_det = np.where(lr.l_ok, lr.l_det, P.mu_lin)
    else:
        mu_det = P.mu_lin

    def on_data(dPj):  # P's rounding (or truncation) evaluated on the data as in O (forward._p_rounding_on_data),
        # contracted with dO: v_jc -> dP_j; |sum_j A_j c_j dP_j| + sum_j A_j h_j |dP_j| + its float64 evaluation
        c, h = P.p_rho
        AcP = A * c * dPj
        return (np.abs(AcP.sum(-1)) + (A * h * np.abs(dPj)).sum(-1)
                + float(gamma(A.shape[-1] + 2, 2.0**-53)) * np.abs(AcP).sum(-1))

    p_round = rp * (aD + (A * absg).sum(-1))
    if rp and P.p_rho is not None:  # dO.v_j = g_j + Delta
        p_round = np.minimum(p_round, on_data(np.where(F.vis, g + delta[..., None], 0.0)))
    det = ((A * (P.det + M.eps_exp) * absg).sum(-1) + mu_det * aD + p_round + acc_det
           + ((n_pv * M.u_dacc * (abs_do * Av).sum(-1) if tc is None else tc) if M.tensor_core else 0.0)
           + M.eps_div * oabs_do.sum(-1))
    v_conv = None
    signed = np.zeros_like(aD)  # the signed conversion effects whose absolute values det holds
    if lg_conv is not None:  # the logits' conversion, known exactly (sec. 8, "input conversions"): signed
        one_sided, e, floor = lg_conv
        Ae = A * e
        signed = (Ae * g).sum(-1)
        det = (det - (A * one_sided * absg).sum(-1) + np.abs(signed) + (A * floor * absg).sum(-1)
               + float(gamma(A.shape[-1] + 2, 2.0**-53)) * (np.abs(Ae) * absg).sum(-1))
        v_conv = _delta_v_conversion(A, vf, dof) if M.trunc else None
    if M.trunc:  # P_j truncated (coefficients A_j dP_j), v_jc truncated (A_j dO_c v_jc), both summing
        # to Delta: one-sided errors, u (sum |coefficient| + |Delta|) / 2 each (bounds.md sec. 6)
        p_trunc = 0.5 * dp * ((A * np.abs(dP)).sum(-1) + aD)
        if P.p_rho is not None:  # truncation toward zero (tf32), on the data
            p_trunc = np.minimum(p_trunc, on_data(np.where(F.vis, dP, 0.0)))
        det = det + p_trunc
        if v_conv is None:
            det = det + 0.5 * di * ((abs_do * Av).sum(-1) + aD)
        else:
            det = det + np.abs(v_conv[0]) + v_conv[1]
            signed = signed + v_conv[0]
    lam = F.parts.lam
    prob = lam * np.sqrt(var) + det + np.maximum(rem, 0.0)
    capped = prob >= wc
    signed = np.where(capped, 0.0, signed)
    if lr is None:
        return (np.minimum(prob, wc) + rounding, np.where(capped, 0.0, np.sqrt(var)),
                np.where(capped, wc, det + np.maximum(rem, 0.0)) + rounding, signed)
    # the final sum's roundings join the random part (the cap above covers the rest only)
    dot_var, dot_det = _delta_dot(dof, o, F.bound.o, u, F.problem.dv, fmt if fmt == "float32" else None, M)
    var_all = np.where(capped, 0.0, var) + dot_var
    det_all = np.where(capped, wc, det + np.maximum(rem, 0.0)) + dot_det
    return (np.minimum(lam * np.sqrt(var_all) + det_all, wc + rounding), np.sqrt(var_all), det_all, signed)


def _delta_accumulation_remainder(F: _Forward, M: _Model, abs_do, absdov, vf, partial, wc, lin):
    """The remainder of Delta's bound (wc - lin) with the P.V accumulation's part from its partial sums
    (bounds.md sec. 8, "second order of the accumulations"), for the recursive round-to-nearest accumulation.

    wc - lin less the accumulation's gamma_{n_pv} (its majorant with nu_wc and nu_lin free of the accumulation:
    the conversions and the rescales' gamma_T), plus, per column, |dO_c| [(1 + gamma_T)(u C1_c + n u (W_c + E_c))
    (1 + f) - u C1_c]: the normalized accumulation error eps_c = (1 + theta_T) sum_s delta_s T_s with
    T_s = S_s + D_s + E_{s-1} (|D_s| <= W_c = the products' errors, sum |e_s| <= E_c = u (C1_c + n W_c) / (1 - n u),
    C1_c = sum of the partial-sum bounds, `partial`), divided by D/l in [D_low, D_up]
    (|l/D - 1| <= f = max(1/D_low - 1, D_up - 1)); its first order sum_s delta_s S_s is the Azuma proxy."""
    P = F.parts
    A, inv = F.A, P.inv_den[..., 0]
    n, ua, u, T = P.n_pv, M.u_dacc, M.u_w, P.T
    g_T = float(gamma(T, u))
    conv = (1 + M.u_pv) * (1 + M.u_in)
    nu_wc = conv * (1 + g_T) - 1.0
    nu_lin = M.u_pv + M.u_in + T * u
    Ab1 = P.Ab1_wc
    rest = (wc - (P.nu_wc - nu_wc) * (Ab1 * absdov).sum(-1) * inv
            - (lin - (P.nu_lin - nu_lin) * (A * absdov).sum(-1)))
    av = np.abs(vf)
    W = (Ab1 * (conv * (1 + g_T))) @ av - A @ av  # (rows, dv): sum_j |p^_j - p_j| in normalized units
    if n * ua >= 1.0:
        return np.full_like(wc, np.inf)
    E = ua * (partial + n * W) / (1.0 - n * ua)
    f = np.maximum(np.maximum(inv - 1.0, Ab1.sum(-1) * (1 + P.mu_wc) - 1.0), 0.0)[..., None]
    first = ua * partial
    acc = (1 + g_T) * (first + n * ua * (W + E)) * (1 + f) - first
    return rest + (abs_do * acc).sum(-1)


def _delta_v_conversion(A, vf, dof):
    """(sum_c dO_c sum_j A_j (v~_jc - v_jc) for V truncated to tf32 as the H100 does (exact, signed), the
    subnormal v (flushed or truncated: |v| each) and the float64 evaluation); None if V is not fp32 values
    (forward._v_conversion contracted with dO, signed)."""
    from .logits import _fp32_exact, tf32_truncated

    if not _fp32_exact(vf):
        return None
    tiny = 2.0**-126
    av = np.abs(vf)
    dv = np.where(av < tiny, 0.0, tf32_truncated(vf) - vf)
    g = float(gamma(A.shape[-1] + vf.shape[-1] + 1, 2.0**-53))
    return ((dof * (A @ dv)).sum(-1),
            (np.abs(dof) * (A @ (av * (av < tiny)) + g * (A @ np.abs(dv)))).sum(-1))


@dataclass(frozen=True)
class _PError:
    """The recomputed P_hat = A (1 + b) of a block of rows: |b| <= wc (A (1 + wc) = A_wc1, evaluated stably
    where `bad`), linear part lin, of which det is not random (all of it: no part of the logit error is modelled as
    random, bounds.md sec. 3)."""

    wc: np.ndarray
    A_wc1: np.ndarray
    bad: np.ndarray
    lin: np.ndarray
    det: np.ndarray


@dataclass(frozen=True)
class _DPError:
    """dP_hat - dP per entry: worst case, linear part, non-random part (no part of it is modelled as random: its
    roundings are one-signed where small products are lost, bounds.md sec. 3)."""

    wc: np.ndarray
    lin: np.ndarray
    det: np.ndarray


@dataclass(frozen=True)
class _DSError:
    """dS_hat - dS per entry in the pieces of sec. 6: majorant, its linear part, variance proxy, non-random part."""

    wc: np.ndarray
    lin: np.ndarray
    var: np.ndarray
    det: np.ndarray
    det_base: np.ndarray  # det's parts other than the operand rounding (P's, dP's, Delta's), on every entry
    rounding: np.ndarray  # det's operand-rounding part, max(u_p |dS|, floor_p) (replaceable on the data), every entry


def _dS_errors(M: _Model, vis, A, absg, P: _PError, dP: _DPError, eD, dD, extra_var=0.0,
               w_S=1.0) -> _DSError:
    """dS_hat - dS for dS = A g (|g| = absg) with P_hat, dP_hat as given and Delta off by <= eD (dD of it
    not random): the subtraction, the product and the conversion of dS to the operand format (rho) on
    (|g| + dP error + Delta error); floors of the working and operand formats (bounds.md sec. 8).
    w_S: the row groups' weight of dS's own random part (_RowGroups; 1 for a single row, as in dQ). P's and dP's
    errors have none (P.det, dP.det)."""
    u = M.u_w
    (_, r_p), _ = _conv(M)
    rho_wc = (1 + gamma(2, u)) * (1 + M.u_p) - 1.0
    rho_lin = 2 * u + M.u_p
    X = absg + dP.wc + eD
    wcS = np.where(vis, _fix_bad(A * ((1 + P.wc) * (1 + rho_wc) * X - absg), P.bad,
                                 lambda: P.A_wc1 * (1 + rho_wc) * X - A * absg)
                   + M.floor_w * (1 + rho_wc) * X + M.floor_p, 0.0)
    # dS rounded to nearest into the operand format errs by <= max(u_p |dS|, floor_p) (floor_p: half the
    # subnormal spacing; fp16 dS = A g reaches it at long N_k, A ~ 1/N_k): first order, so the floor leaves
    # wc - lin; charged worst case in detS, as P's (its residue is set by the data:
    # bench/adversaries/p_residue_dv.py for P; bounds.md sec. 6); the fp32 subtraction and product stay random
    f_p = _rounding_floor(M)
    linS = np.where(vis, A * ((P.lin + rho_lin) * absg + dP.lin + eD) + f_p, 0.0)
    varS = np.where(vis, A * A * (w_S * 2 * u**2 * absg**2) + extra_var, 0.0)
    # (a truncation of dS to tf32 is counted in _grad, with the other operand's)
    det_base = A * (P.det * absg + dP.det + dD)
    rounding = np.maximum(r_p * A * absg, f_p)
    detS = np.where(vis, det_base + rounding, 0.0)
    return _DSError(wcS, linS, varS, detS, det_base, rounding)


def _dS_rounding_on_data(M: _Model, fmt: str, vis, p_lo, p_hi, g_lo, g_hi, truncate: bool = False):
    """dS_ij's rounding into the operand format `fmt` (or its truncation, tf32) as the data fix it (bounds.md sec. 6,
    "roundings on the data"): the kernel's dS = fl(P~ fl(dP^ - Delta^)) with P~ in [p_lo, p_hi] and
    dP^ - Delta^ in [g_lo, g_hi] lies, in magnitude, within [p_lo min|g| (1 - u)^2, p_hi max|g| (1 + u)^2]; where
    that holds no rounding boundary, rho = RN(dS) / dS - 1 is known to its interval (common._rounding_on_data).
    RN is monotone, so the rounded magnitude lies in [RN(lo), RN(hi)] wherever the range is within fp32's normal
    range (no ftz) and g's sign is known (`bounded`; [0, 0] elsewhere); known: RN(lo) = RN(hi).
    Entries whose g may change sign are not known. Returns (centre, half-width, known, RN(lo), RN(hi), bounded)."""
    u = M.u_w
    with np.errstate(invalid="ignore", over="ignore"):
        ok = vis & np.isfinite(p_hi) & (p_lo > 0) & ((g_lo > 0) | (g_hi < 0))
        g_min = np.minimum(np.abs(g_lo), np.abs(g_hi))
        g_max = np.maximum(np.abs(g_lo), np.abs(g_hi))
        lo = np.where(ok, p_lo * g_min * (1.0 - u) ** 2 * (1.0 - 2.0**-50), 0.0)
        hi = np.where(ok, p_hi * g_max * (1.0 + u) ** 2 * (1.0 + 2.0**-50), 0.0)
    centre, half, known = _rounding_on_data(lo, hi, fmt, M.u_p, truncate)
    known = known & ok
    bounded = ok & (lo >= _FP32_NORMAL_MIN) & np.isfinite(hi)
    R_lo = np.where(bounded, _round_nearest(np.where(bounded, lo, 0.0), fmt, truncate), 0.0)
    R_hi = np.where(bounded, _round_nearest(np.where(bounded, hi, 0.0), fmt, truncate), 0.0)
    return centre, half, known, R_lo, R_hi, bounded


def _float64_dS_error(A, g, rel_A, vis, absdov, abs_do, o, Av):
    """A bound per entry on |A~ g~ - A g|: the float64 A~ (common._softmax_parts, from the float64 logits
    s~ = sc q.k (+ bias)) and g~ = dP~ - Delta~ (dP~ = dO @ V^T, Delta~ = sum_c dO_c o~_c, o~ = A~ @ V) the bound
    holds for the exact A, g. Where dS's rounding is known on the data (dQ's slices, _backward_impl) the entry's
    whole error R - A g enters at first order, so these float64 errors are charged there (elsewhere they are
    multiplied by a rounding error, far below the slack of the terms).

    |s~ - s| <= delta = gamma_{d+3}(2^-53) (sc |q|.|k| + |s~|) (aqk = sc |q| @ |k|^T); exp(s~ - m~) errs relatively
    by <= E = expm1(2 max_j delta + 2^-52 max_j |s~|) + 2^-49 (its argument's errors, the subtraction, the float64
    exp with 2^-50), l's sum by gamma_{Nk}, the quotient by 2^-53: |A~ / A - 1| <= rel_A = 4 E + 2 gamma_{Nk+2}
    (for E, gamma < 2^-30). |o~ - o| <= (rel_A + 2 gamma_{Nk+1}) A~|V|; |g~ - g| <= gamma_{dv+1}
    (|dO|.|v| + |dO|.|o~|) + |dO|.|o~ - o| + 2^-52 |g~|; then
    |A~ g~ - A g| <= (rel_A A~ |g~| + A~ |g~ - g|)(1 + 2 rel_A). rel_A: _float64_rel_A's (the caller computes it once
    per row block: the chains on the data read it too)."""
    Nk, dv = A.shape[-1], abs_do.shape[-1]
    u = 2.0**-53
    with np.errstate(invalid="ignore", over="ignore"):
        err_o = (rel_A + 2.0 * float(gamma(Nk + 1, u))) * Av  # (rows, dv)
        err_g = (float(gamma(dv + 1, u)) * (absdov + (abs_do * np.abs(o)).sum(-1)[..., None])
                 + (abs_do * err_o).sum(-1)[..., None] + 2.0**-52 * np.abs(g))
        out = (rel_A * A * np.abs(g) + A * err_g) * (1.0 + 2.0 * rel_A)
    # rel_A below 2^-30 is what the first-order form above needs; beyond it (logits ~10^6) the entry is vacuous
    return np.where(vis, np.where(rel_A < 2.0**-30, out, np.inf), 0.0)


def _dq_chain_enclosure(lo_S, hi_S, kf, vis, dS, f64, block_k: int, tile_order: str, head_full, u: float,
                        visits: Visits | None = None):
    """A bound (..., rows, d) on |acc - dS @ K| for the dQ kernel's fp32 accumulator acc (before the scale) when its
    dS_ij lie in [lo_S, hi_S] (_dS_candidate_interval): the chain over the keys in the kernel's order (`visits`, or
    _visiting on rows where nothing of the head is masked, as _dq_accumulation; inf where the order is not known)
    enclosed on the data (_chain_enclosure)."""
    if visits is None:
        visits = _keys_shared_visits(kf.shape[-2], block_k, tile_order, vis, head_full)
    return _chain_enclosure(lo_S, hi_S, dS, f64, kf, visits, u)


def _rows_chain_enclosure(lo, hi, S, f64, other, vis, block_q: int, group: int, tile_order: str, u: float,
                          visits: Visits | None = None):
    """A bound (B, Hkv, Nk, c) on |acc - S^T @ other| (summed over the GQA group's query heads) for the dK/dV kernel's
    fp32 accumulator acc (dK before the scale: S = dS, other = Q; dV: S = A, other = dO) when the kernel's S_ij (its
    dS, or its P~) lie in [lo, hi] (B, Hq, Nq, Nk; a masked entry 0 in both, as the kernel's): one chain per key
    through the group's query heads and their query tiles in the kernel's order (`visits`, rows_visits: every key
    block's own; or _visiting on kv heads where nothing of the group is masked, as _rows_accumulation; inf where the
    order is not known), enclosed on the data (_chain_enclosure; bounds.md sec. 8, "dK and dV enclosed")."""
    B, Hq, Nq, Nk = S.shape
    Hkv = Hq // group

    def rows(x):  # (B, Hq, Nq, Nk) -> (B, Hkv, Nk, group * Nq): head g's rows at g * Nq ...
        return np.swapaxes(x.reshape(B, Hkv, group * Nq, Nk), -1, -2)
    if visits is None:
        visits = _rows_shared_visits(block_q, tile_order, vis, group)
    return _chain_enclosure(rows(lo), rows(hi), rows(S), rows(f64), other.reshape(B, Hkv, group * Nq, -1), visits, u)


def _chain_enclosure(lo, hi, S, f64, other, visits: Visits, u: float):
    """A bound (..., R, c) on |acc_rc - (S @ other)_rc| for fp32 accumulators acc_rc, each one ascending FMA chain
    (Precision.ieee_fma_chain) over the n entries of the last axis of lo, hi, S, f64 (..., R, n) in each row's order
    (visits, proofs/bounds/visits.py), acc <- fl(acc + x_rs other_sc), the kernel's x_rs anywhere in [lo, hi] and
    other exact: enclosed on the data (_rn_chain_on_data(enclosure=True): centre +- radius, the summands x other
    within the interval's half-width plus 2^-51 (|lo| + |hi|) |other| for the float64 midpoint and product), against
    the float64 S @ other (S within f64 of the exact factor: its error <= f64 @ |other| + gamma_{n+1}(2^-53) |S| @
    |other|). inf on rows whose order is not known (visits.known) or where not finite."""
    n = other.shape[-2]
    mid, half = 0.5 * (lo + hi), 0.5 * (hi - lo) + 2.0**-51 * (np.abs(lo) + np.abs(hi))
    R = S @ other
    R_err = f64 @ np.abs(other) + float(gamma(n + 1, 2.0**-53)) * (np.abs(S) @ np.abs(other))
    out = np.full(R.shape, np.inf)
    for r, p, _, oT_r, vr in _ordered_products(mid, np.swapaxes(other, -1, -2), visits):
        w = vr.take(half[:, :, r])[:, :, :, None, :] * np.abs(oT_r)
        c, rad = _rn_chain_on_data(p, w, u, enclosure=True)
        with np.errstate(invalid="ignore", over="ignore"):
            out[:, :, r] = (np.abs(c - R[:, :, r]) + rad + R_err[:, :, r]) * (1.0 + 2.0**-50)
    out = np.where(np.isnan(out), np.inf, out)
    return np.where(np.broadcast_to(np.asarray(visits.known)[..., None], out.shape), out, np.inf)


def _fp32_at_least(x):
    """The smallest fp32 value >= x (float64 arrays, as float32)."""
    with np.errstate(over="ignore", invalid="ignore"):
        f = np.asarray(x, dtype=np.float64).astype(np.float32)
        return np.where(f.astype(np.float64) < x, np.nextafter(f, np.float32(np.inf)), f)


def _fp32_at_most(x):
    """The largest fp32 value <= x (float64 arrays, as float32)."""
    with np.errstate(over="ignore", invalid="ignore"):
        f = np.asarray(x, dtype=np.float64).astype(np.float32)
        return np.where(f.astype(np.float64) > x, np.nextafter(f, np.float32(-np.inf)), f)


def _dS_operands(dP, e_dp, dP_wc, absdov, eD, delta_c, Fr, do_r, vf, rel_A):
    """(dp_lo, dp_hi, D_lo, D_hi): the fp32 ranges of the kernel's dP^ (..., rows, Nk) and Delta^ (..., rows, 1) that
    _dS_candidate_interval reads (its docstring), the same for every candidate of the stored LSE."""
    Nk, dv = dP.shape[-1], do_r.shape[-1]
    u64 = 2.0**-53
    o = Fr.o
    abs_do = np.abs(do_r)
    with np.errstate(invalid="ignore", over="ignore"):
        D64 = (do_r * o).sum(-1)
        dD64 = (float(gamma(dv + 1, u64)) * (abs_do * np.abs(o)).sum(-1)
                + (abs_do * ((rel_A + 2.0 * float(gamma(Nk + 1, u64))) * (Fr.A @ np.abs(vf)))).sum(-1))
        half = np.maximum(eD - np.abs(delta_c), 0.0) + dD64
        D_lo = _fp32_at_least(D64 + delta_c - half * (1.0 + 2.0**-50))[..., None]
        D_hi = _fp32_at_most(D64 + delta_c + half * (1.0 + 2.0**-50))[..., None]
        e, _, known = e_dp
        dp32 = (dP + e).astype(np.float32)
        dpw = (dP_wc + float(gamma(dv + 1, u64)) * absdov) * (1.0 + 2.0**-50)
        dp_lo = np.where(known, dp32, _fp32_at_least(dP - dpw))
        dp_hi = np.where(known, dp32, _fp32_at_most(dP + dpw))
    return dp_lo, dp_hi, D_lo, D_hi


def _dS_candidate_interval(Pt, ops, tolS, dS, f64, vis):
    """[lo, hi] (float64, (..., rows, Nk)) holding the kernel's dS = fl32(P~ fl32(dP^ - Delta^)) for one candidate P~
    of the stored LSE (fp32 values, _recomputed_p_known; bounds.md sec. 8, "The accumulation chains on the data"):
    dP^ the ascending FMA chain's value where e_dp knows it (_fma_dp_error: fl(dO.v) = dP + e_dp, rounded to fp32 to
    undo the float64 subtraction), else within dP_wc (and the float64 dP's gamma_{dv+1}(2^-53) |dO|.|v|) of dP;
    Delta^ an fp32 number within delta_c +- (eD - |delta_c|) of Delta (_delta_error), and the float64 Delta these read
    within gamma_{dv+1}(2^-53) |dO|.|o| + |dO|.(rel_A + 2 gamma_{Nk+1}(2^-53)) A|V| of Delta (as _float64_dS_error).
    The fp32 subtraction and product round to nearest (numpy's float32 arithmetic: the same roundings), monotone, so
    the ends are the roundings of the ends (dP^ and Delta^ taken inward to fp32 values). Entries where an end is
    subnormal (a flush to zero could leave the interval) take dS +- (tolS + f64, the float64 dS's own error). ops:
    _dS_operands' ranges."""
    dp_lo, dp_hi, D_lo, D_hi = ops
    with np.errstate(invalid="ignore", over="ignore"):
        P32 = Pt.astype(np.float32)
        lo = (P32 * (dp_lo - D_hi)).astype(np.float64)
        hi = (P32 * (dp_hi - D_lo)).astype(np.float64)
        g_lo, g_hi = (dp_lo - D_hi).astype(np.float64), (dp_hi - D_lo).astype(np.float64)
    tiny = 2.0**-126
    ok = np.ones(lo.shape, dtype=bool)
    for x in (lo, hi, g_lo, g_hi):
        ok &= np.isfinite(x) & ((x == 0.0) | (np.abs(x) >= tiny))
    ok &= (D_lo <= D_hi) & (dp_lo <= dp_hi)
    with np.errstate(invalid="ignore"):
        w = (tolS + f64) * (1.0 + 2.0**-50)
    return np.where(vis, np.where(ok, lo, dS - w), 0.0), np.where(vis, np.where(ok, hi, dS + w), 0.0)


def _float64_rel_A(s, vis, aqk, d: int):
    """rel_A of _float64_dS_error, (..., rows, 1): |A~ / A - 1| <= rel_A for the float64 A~ the bounds read (its
    docstring); inf where rel_A >= 2^-30 (the first-order form needs it below)."""
    Nk = s.shape[-1]
    u = 2.0**-53
    with np.errstate(invalid="ignore", over="ignore"):
        s_abs = np.where(vis, np.abs(s), 0.0)
        delta = float(gamma(d + 3, u)) * (np.where(vis, aqk, 0.0) + s_abs)
        E = np.expm1(2.0 * delta.max(-1, initial=0.0) + 2.0**-52 * s_abs.max(-1, initial=0.0)) + 2.0**-49
        rel_A = (4.0 * E + 2.0 * float(gamma(Nk + 2, u)))[..., None]
    return np.where(rel_A < 2.0**-30, rel_A, np.inf)


# at most this many fp32 values of the stored LSE per row are evaluated apart (_recomputed_p_known); the forward's
# interval holds <= 4 on every structured family (bench/lse_interval.py)
P_KNOWN_CANDIDATES = 8


def _recomputed_p_known(chain, sc, vis, A, iv):
    """The backward's recomputed P~ for each fp32 value the stored LSE may hold (Precision.bwd_p_known): both kernels
    compute P~_ij = ex2(min(fl32(qk_ij c - lse2_i), 0)), qk the ascending fp32 FMA chain (chain: its values and
    normal-range mask, logits._fma_logit_error's), c =
    qk_scale2, lse2 = fl32(LSE fl32(log2 e)), the argument rounded once (fma.rn.f32: qk c is exact in float64, the
    sum with -lse2 rounded once by fma_step) and ex2 the measured table (ex2_model). iv: the forward's
    (lo, hi, ok, z_lo, z_hi) per row (_ForwardParts.lse_iv): the stored LSE is one of the fp32 numbers in
    [z_lo, z_hi]. Returns (ok per row, [P~ for each candidate]): ok where the interval holds at most
    P_KNOWN_CANDIDATES values, every visible chain stays in fp32's normal range, and no entry has A = 0 < P~
    (A underflowed in float64 where the kernel's P~ did not: its relative error is not defined); a row with fewer
    candidates repeats its last one."""
    from flashcheck.proofs import ex2_model
    from flashcheck.proofs.fma_chain import LOG2E, fma_step, kernel_qk_scale2

    ok = iv[2].copy()
    qk, normal = chain
    ok &= np.where(vis, normal, True).all(-1)
    pr = np.where(vis, qk * kernel_qk_scale2(sc), 0.0)  # exact in float64 (two 24-bit significands)
    l2e = float(np.float32(LOG2E))
    z = np.where(ok, iv[3], 1.0).astype(np.float32)
    z_hi = np.where(ok, iv[4], 1.0).astype(np.float32)
    out = []
    for _ in range(P_KNOWN_CANDIDATES):
        lse2 = (z.astype(np.float64) * l2e).astype(np.float32).astype(np.float64)  # one rounding of an exact product
        y = fma_step(np.broadcast_to(-lse2[..., None], pr.shape), pr)
        out.append(np.where(vis, ex2_model.ex2(np.where(vis, np.minimum(y, 0.0), 0.0)), 0.0))
        more = z < z_hi
        if not more[ok].any():
            break
        z = np.where(more, np.nextafter(z, np.float32(np.inf)), z)
    else:
        ok &= ~(z < z_hi)
    for Pt in out:
        ok &= ~(vis & (A <= 0.0) & (Pt > 0.0)).any(-1)
    return ok, out


@dataclass(frozen=True)
class _DqOwn:
    """dQ's dS error terms for a block of rows where the recomputed P~ is a known number (Precision.bwd_p_known, one
    candidate of the stored LSE): P~ = A (1 + b) with b = (P~ - A) / A known, so P's part of dS's first-order error,
    (P~ - A) g, and dP's known FMA-chain error P~ e_dp enter signed (rows: sum_j rows_ij k_jc, its float64 evaluation
    gamma_n rows_abs and, in detS, the float64 errors of A and g), P's |b| stays in the majorant and the linear part
    (the second order), the row-common LSE factor is 0 (the candidate is the stored LSE). wcS, linS, varS, detS as
    _dS_errors; W_delta: the Delta error's weights about A (dq_bound's dq_delta)."""

    wcS: np.ndarray
    linS: np.ndarray
    varS: np.ndarray
    detS: np.ndarray
    W_delta: np.ndarray
    rows: np.ndarray
    rows_abs: np.ndarray
    c_row: float = 0.0

    @staticmethod
    def of(M: _Model, vis, A, g, absg, Pt, f64, dP_err: _DPError, w_S, kap_k, rho_wc, dp_known,
           n_ops: int) -> "_DqOwn":
        """dp_known: _fma_dp_error's (e, basis, known) (e = 0 where not known): where known, dP's error is e within
        gamma_{n_ops}(2^-53) basis (n_ops >= dv + 2: the float64 dP it is taken against), which replaces its worst case
        in the majorant and the linear part; it enters `rows` with its sign, its evaluation through rows_abs."""
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(vis & (A > 0), Pt / A, 1.0)
        b = np.abs(ratio - 1.0)
        dPt = np.where(vis, Pt - A, 0.0)
        P = _PError(wc=b, A_wc1=A + np.abs(dPt), bad=np.zeros(A.shape, dtype=bool), lin=b, det=np.zeros_like(A))
        e_dp, basis, known = dp_known
        x = np.abs(e_dp) + float(gamma(n_ops, 2.0**-53)) * basis
        dP_err = _DPError(wc=np.where(known, x, dP_err.wc), lin=np.where(known, x, dP_err.lin), det=dP_err.det)
        dSe = _dS_errors(M, vis, A, absg, P, dP_err, eD=0.0, dD=0.0, w_S=w_S)
        rows = np.where(vis, dPt * g + Pt * e_dp, 0.0)
        rows_abs = np.where(vis, np.abs(dPt * g) + Pt * basis, 0.0)
        # the float64 A~, g~ the sums read: |(P~ - A~) g~ - (P~ - A) g| <= |A~ g~ - A g| + P~ |g~ - g| <= f64 (1 + P~/A)
        # (_float64_dS_error bounds A~ |g~ - g| within f64), and the two float64 roundings of the entry: 2^-51 |.|
        ev = np.where(vis, f64 * (1.0 + ratio) + 2.0**-51 * (np.abs(dPt * g) + np.abs(Pt * e_dp) + np.abs(rows)), 0.0)
        W_delta = np.where(vis, A * ((1 + kap_k) * (1 + b) * (1 + rho_wc) - 1.0), 0.0)
        return _DqOwn(wcS=dSe.wc, linS=dSe.lin, varS=dSe.var, detS=dSe.det + ev, W_delta=W_delta, rows=rows,
                      rows_abs=rows_abs)


def _recomputed_p_interval(M: _Model, lg, s, lse0, e_lse, vis, c_lse=None):
    """[lo, hi] of the backward's recomputed P~ = exp2(fl(S2) - fl(LSE log2 e)) per entry: the logits by sign
    (forward._logit_sides: the MMA steps on the data, tf32's known conversion error), the stored LSE's error and
    its rounding within c_lse +- e_lse (per row; c_lse: the LSE's known signed part, tf32's conversion, or None),
    exp2's eps_exp, the float64 exp 2^-50."""
    from .forward import _logit_sides

    below, above = _logit_sides(lg, M)
    x = np.where(vis, s - lse0[..., None], -np.inf)
    e = e_lse[..., None]
    c = 0.0 if c_lse is None else c_lse[..., None]
    with np.errstate(over="ignore", invalid="ignore"):
        lo = np.exp(x - below - c - e) * (1.0 - M.eps_exp) * (1.0 - 2.0**-50)
        hi = np.exp(x + above - c + e) * (1.0 + M.eps_exp) * (1.0 + 2.0**-50)
    return np.where(vis, lo, 0.0), np.where(vis, hi, 0.0)


def _products_over(mask, mats, right):
    """[m @ right for m in mats] for (B, H, rows, Nk) arrays m that vanish outside `mask`: one product over the keys
    where some row of the block has `mask` (the others add only zeros), the arrays stacked along the rows."""
    cols = np.flatnonzero(mask.any(axis=tuple(range(mask.ndim - 1))))
    out = (*np.broadcast_shapes(mask.shape[:-2], right.shape[:-2]), mask.shape[-2], right.shape[-1])
    if cols.size == 0:
        return [np.zeros(out) for _ in mats]
    if cols.size == mask.shape[-1]:
        x = np.concatenate(mats, axis=-2) @ right
    else:
        x = np.concatenate([m[..., cols] for m in mats], axis=-2) @ right[..., cols, :]
    return np.split(x, len(mats), axis=-2)


# slices of a row's Delta error [-eD, eD] over which dQ's dS roundings are evaluated apart (_dS_rounding_on_data)
DELTA_SLICES = 32


def _rounding_floor(M: _Model) -> float:
    """The absolute floor of rounding P or dS to the operand format where that rounding is to nearest (fp16,
    bf16: the error is <= max(u_p |x|, floor_p), charged worst case with the relative part, bounds.md sec. 6);
    0 where it truncates (tf32: one-sided, the floor is in the wc majorant)."""
    return 0.0 if M.trunc else M.floor_p


def _store(err, exact_abs, u_scale, M: _Model):
    """The last multiply by scale (scale itself rounded: gamma_2) and the store in the output dtype
    (relative u_out, absolute floor in its subnormal range)."""
    err = err + u_scale * (exact_abs + err)
    return err + M.u_out * (exact_abs + err) + M.floor_out


def backward_bound(q, k, v, do, *, scale=None, causal=False, window=None, mask=None, bias=None,
                   precision: Precision, kind: str = "probabilistic") -> BackwardBound:
    """Elementwise bound on |dQ_kernel - dQ|, |dK_kernel - dK|, |dV_kernel - dV| (proofs/bounds.md, sec. 7).

    The kernel's backward uses its own forward outputs: LSE (error <= forward_bound(...).lse) to
    recompute P, and O stored in the output dtype (error <= forward_bound(...).o) in
    Delta = rowsum(dO o O). Both are folded in; for "probabilistic" the forward bounds are taken at a
    failure probability small enough that the union over every row feeding one gradient entry stays
    below FAILURE_PROBABILITY."""
    return _backward(q, k, v, do, scale, causal, window, mask, bias, precision, kind)[0]


def backward_terms(q, k, v, do, *, scale=None, causal=False, precision: Precision,
                   kind: str = "probabilistic"):
    """The bound of backward_bound (in_accumulator GQA) and, per gradient, its named terms:
    (BackwardBound, {"dQ": [Term], "dK": [...], "dV": [...]}) (instrumentation: bench/backward_terms.py)."""
    kind = _check_kind(kind)
    detail = []
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        bb, _ = _backward_impl(q, k, v, do, scale, causal, None, None, None, precision, kind, detail=detail)
    return bb, dict(detail)


def _backward(q, k, v, do, scale, causal, window, mask, bias, precision, kind):
    kind = _check_kind(kind)
    group = q.shape[1] // max(k.shape[1], 1)
    if precision.gqa_reduction == "rounded_heads" and group > 1:
        return _backward_rounded_heads(q, k, v, do, scale, causal, window, mask, bias, precision, kind, group)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # as in _forward
        bb, exact = _backward_impl(q, k, v, do, scale, causal, window, mask, bias, precision, kind)
    return BackwardBound(dq=_no_nan(bb.dq), dk=_no_nan(bb.dk), dv=_no_nan(bb.dv), kind=kind,
                         precision=precision), exact


def _backward_rounded_heads(q, k, v, do, scale, causal, window, mask, bias, precision, kind, group):
    """GQA formed after the kernel (bounds.md sec. 7c): each query head h of a group computes dK_h, dV_h
    as for ordinary multi-head attention and stores them in the output dtype (error <= B_h, the bound
    of that head's problem with K, V repeated); then dK = round_out(sum_h of the stored dK_h), the sum
    in fp32 in any order. With S = sum_h (|dK_h| + B_h):
        |dK_kernel - dK| <= sum_h B_h + gamma_{G-1}(u_w) S + u_out (|dK| + sum_h B_h + gamma_{G-1}(u_w) S)
                            + floor_out.
    dQ is per query head already: its bound is the repeated problem's."""
    per_head = dataclasses.replace(precision, gqa_reduction="in_accumulator")
    ke, ve = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    bb, (dq, dk_h, dv_h) = _backward(q, ke, ve, do, scale, causal, window, mask, bias, per_head, kind)
    u_w, u_out = UNIT_ROUNDOFF[precision.accumulate], UNIT_ROUNDOFF[precision.out]
    floor_out = UNDERFLOW_FLOOR[precision.out]
    g_sum = float(gamma(group - 1, u_w))

    def reduce(b_h, x_h):
        shape = (x_h.shape[0], x_h.shape[1] // group, group) + x_h.shape[2:]
        b_h, x_h = b_h.reshape(shape), x_h.reshape(shape)
        e_heads = b_h.sum(2)
        e_sum = g_sum * (np.abs(x_h) + b_h).sum(2)
        x = x_h.sum(2)
        return e_heads + e_sum + u_out * (np.abs(x) + e_heads + e_sum) + floor_out, x

    bdk, dk = reduce(bb.dk, dk_h)
    bdv, dv = reduce(bb.dv, dv_h)
    return BackwardBound(dq=bb.dq, dk=_no_nan(bdk), dv=_no_nan(bdv), kind=kind, precision=precision), (dq, dk, dv)


def _rows_of(x, r):
    """Query rows r of a per-row quantity (axis 2 of (B, H, Nq, ...)); scalars and None unchanged."""
    if isinstance(x, np.ndarray) and x.ndim >= 3:
        return x[:, :, r]
    if isinstance(x, tuple):
        return tuple(_rows_of(y, r) for y in x)
    return x


def _forward_rows_view(F: _Forward, r) -> _Forward:
    """F restricted to the query rows r (what _delta_error and the per-row backward terms read)."""
    fb = F.bound
    return dataclasses.replace(
        F, bound=ForwardBound(o=fb.o[:, :, r], lse=fb.lse[:, :, r], kind=fb.kind, precision=fb.precision),
        s=F.s[:, :, r], vis=F.vis[:, :, r], A=F.A[:, :, r], o=F.o[:, :, r], lse=F.lse[:, :, r],
        m=F.m[:, :, r], empty=F.empty[:, :, r], qf=F.qf[:, :, r],
        parts=dataclasses.replace(F.parts, **{f.name: _rows_of(getattr(F.parts, f.name), r)
                                              for f in dataclasses.fields(F.parts)}))


def _backward_impl(q, k, v, do, scale, causal, window, mask, bias, precision, kind, detail=None):
    """The bounds and the exact gradients; `detail` (a list) receives the named terms of each
    gradient (instrumentation: (name of the gradient, [Term]) pairs)."""
    from flashcheck.reference.shapes import check_attention_args

    pr = check_attention_args(q, k, v, scale=scale, causal=causal, window=window, mask=mask, bias=bias)
    # the forward's tile of this call (long N, band), and dQ summed in the dK/dV kernel (Precision.fused_dq: unmasked
    # calls only, so N_q is given without a mask; a dense mask runs the dQ kernel; and V's head dim, which it reads)
    precision = _for_call(precision, causal, window, pr.Nk, pr.Nq if mask is None else None, pr.dv, pr.group)
    M = _model(precision)  # after for_call: the tree depth of the call's forward tile (rowsum_depth, lg2_known)
    # dQ's accumulation (Precision.dq_accumulation: the fused dQ's blocked sum) has its own model; the rest keeps M
    M_dq = _dq_model(M, precision)
    given, precision = precision, precision.fitted(pr.Nq, pr.Nk)
    dof = np.asarray(do, dtype=np.float64)
    if dof.shape != (pr.B, pr.Hq, pr.Nq, pr.dv):
        raise ValueError(f"do must have O's shape {(pr.B, pr.Hq, pr.Nq, pr.dv)}, got {dof.shape}")
    # per row feeding an entry: its LSE, its Delta and its dv entries of O (second-order parts of Delta)
    n_events = 2.0 * pr.Nq * pr.group * (2 + pr.dv)
    # the precision as given: the forward fits its tiles itself, and reads the kernel's ragged tile (where the exponent
    # arguments are not fused, Precision.exp_argument) from the given block_k (a fitted block_k = N_k < the kernel's
    # tile would make a masked tile look full: the backward's stored-LSE interval and accumulator were then wrong)
    F = _forward(q, k, v, scale, causal, window, mask, bias, given, kind,
                 eta=FAILURE_PROBABILITY / n_events)
    lam = hoeffding_lambda(2.0)
    u, sc, group = M.u_w, F.scale, pr.group
    kf, vf = F.kf, F.vf
    d, dv = pr.d, pr.dv

    # dV = P^T dO: P rounded to the operand format, dO exact unless input does not fit (u_in);
    # accumulation over query tiles: block_q products per tile, T_q * group tiles (GQA heads add up)
    Nq, Nk = pr.Nq, pr.Nk
    # dK, dV: one accumulator through every query tile of every head of the GQA group; dQ: through
    # every key tile (recursive, sec. 4)
    n_q = _dot_steps(M, Nq, precision.block_q, repeats=group)
    # dQ's key loop has its own tile width (Precision.block_k_dq; ours: the dQ kernel's block_n): its steps, the
    # ragged tile it visits first; Delta's P.V and the stored LSE are the forward's and keep block_k. A blocked dQ
    # (Precision.dq_accumulation, the fused dQ): each tile one chain from zero, then T additions (_dot_steps)
    n_k = _dot_steps(M_dq, Nk, precision.dq_key_tile, tile_chain=precision.dq_accumulation == "blocked")
    dq_flush = _dq_tile_add_flush(precision, Nk)  # those additions' subnormal flushes (before the scale)
    nu_q_wc = (1 + M.u_p) * (1 + M.u_in) * (1 + gamma(n_q, M.u_dacc)) - 1
    nu_q_lin = M.u_p + M.u_in + n_q * M.u_dacc
    rho_wc = (1 + gamma(2, u)) * (1 + M.u_p) - 1.0
    rho_lin = 2 * u + M.u_p
    g2 = float(gamma(2, u))
    (r_in, r_p), (d_in, d_p) = _conv(M)
    kap_k = (1 + M.u_in) * (1 + gamma(n_k, M.u_dacc)) - 1.0
    # fp32 inputs truncated to tf32 (bounds.md sec. 8, "input conversions"): a deterministic function of
    # the inputs the bound sees, so its first-order effect on each gradient is computed with its sign
    # (ConvertedInputs) instead of u_in (sum |.| + |sum .|) / 2; the majorant keeps the worst case
    conv = None
    if (kind == "probabilistic" and M.trunc and M.u_in > 0 and precision.input == "float32"
            and precision.hardware.tf32_operand == "truncate"):
        conv = _ConvertedInputs.of(F.qf, kf, vf, dof)
        M_exact_in = dataclasses.replace(M, u_in=0.0)
    elif kind == "probabilistic" and M.fma_logits and F.parts.qk[4] is not None:
        # the known FMA-chain logits (Precision.ieee_fma_chain): their error e_s = logits._Logits.conv enters the
        # gradients signed through the same sums; nothing else is converted
        conv = _ConvertedInputs.known_logits(F.qf, kf, vf, dof)
    n_dv = _within_dot(M, dv)  # accumulator roundings of the dv-long dot dO.v
    dP_kw = (1 + M.u_in) ** 2 * (1 + gamma(n_dv, M.u_dacc)) - 1.0

    def _t(x):  # (B, Hq, rows, Nk) -> (B, Hq, Nk, rows)
        return np.swapaxes(x, -1, -2)

    def _kv(x):  # sum the group's query heads into their kv head
        return x.reshape(pr.B, pr.Hkv, group, *x.shape[2:]).sum(axis=2)

    abs_vT, vT = _t(np.abs(vf)), _t(vf)
    abs_k = np.abs(kf)
    # sums over query rows (dV, dK), accumulated block by block; dQ is per row
    groups = _RowGroups.of(F.qf, dof, precision, group)
    keys = _KeyGroups.of(kf, vf, precision)
    dv_sums = dk_sums = conv_sums = None
    # round-to-nearest accumulations over the query rows (dK, dV), as dQ's over the keys: they need every
    # row's products at once, so the row blocks' dS, P and their error bounds are kept until after the loop
    rn_rows = kind == "probabilistic" and not M.tensor_core
    tc_rows = M.tensor_core and M.recursive  # tensor-core steps over the query rows from the partial sums
    row_blocks, dS_blocks, iv_blocks = [], [], []

    dq_blocks, dQ_blocks, dq_terms = [], [], []
    sub = {"dK": {}, "dV": {}}  # instrumentation only: det sub-parts summed over the row blocks

    def _add_sub(grad, name, x):
        sub[grad][name] = x if name not in sub[grad] else sub[grad][name] + x
    # every term below belongs to one query row i, except the sums over i of dV and dK: blocks of rows
    # keep the (rows, Nk) temporaries small; dV and dK add up the blocks' products
    # The kernels visit a query block's partial key tiles (any masked entry in the block x tile) first, then
    # its full tiles in ascending order: a row that sees every key can still meet its tiles out of order (a
    # causal block's diagonal tile). The forward's tiles (Delta's P.V) come in ascending order for every row only
    # where nothing of the head is masked; the backward's own chains follow each outer block's order where the
    # precision states the blocks (proofs/bounds/visits.py; Precision.block_q_dq, block_k_dkdv, tile_lists)
    head_full = F.vis.all(axis=(-2, -1), keepdims=True)
    # the forward's query blocks in their own orders on heads with masked entries (bounds.md sec. 6c): the order of
    # the P.V chain whose O Delta reads (its tensor-core steps, tc_D below)
    fwd_blocks = (_forward_module._query_block_orders(F.problem, given, causal, window, mask, F.vis)
                  if M.tensor_core and M.recursive and M.pv_products == 1 else None)
    band_cls = _band_visibility(pr.Nq, pr.Nk, causal, window)
    dq_order = dq_visits(band_cls, F.vis, precision, M_dq.recursive)  # a blocked dQ: order-free (none known)
    for r in _rows_chunks(Nq, Nk, 1, budget=_forward_module.ROW_BLOCK_ENTRIES):
        Fr = _forward_rows_view(F, r)
        vis, A, qf, o, empty = Fr.vis, Fr.A, Fr.qf, Fr.o, Fr.empty
        do_r = dof[:, :, r]
        abs_do = np.abs(do_r)
        lse0 = np.where(empty, 0.0, Fr.lse)
        eps_L = Fr.bound.lse  # error of the stored LSE

        # P_ij = exp2(fl(s c) - fl(LSE log2 e)): the logit errors with shift LSE, the LSE error, exp error
        lg = _logit_errors(qf, kf, Fr.s, lse0, vis, sc, M, d, bias is not None, qk=Fr.parts.qk)
        known_lg = conv is not None and conv.logits_only and lg.conv is not None  # e_s = lg.conv, signed below
        if known_lg and lg.wc_known is not None:  # the known FMA-chain logits: their own majorant
            lg = dataclasses.replace(lg, wc=lg.wc_known, lin=lg.lin_known)
        lg_det = lg.det
        if known_lg:  # c's rounding is in lg.conv; the float64 floor of lg.conv stays unsigned
            lg_det = lg.det - lg.det_conv + lg.conv_floor
        elif conv is not None:  # the non-random logit error without the input conversion (counted signed)
            lg_det = _logit_errors(qf, kf, Fr.s, lse0, vis, sc, M_exact_in, d, bias is not None,
                                   qk=Fr.parts.qk).det
        e_lse = _lse2_rounding(lse0, eps_L, precision.accumulate)  # rounding of LSE * log2(e), in natural units
        e_wc = lg.wc + (e_lse + eps_L)[..., None]
        b_wc = np.where(vis, _exp_err(e_wc, M.eps_exp), 0.0)

        def log_a(Fr=Fr, vis=vis):
            return np.where(vis, Fr.s - Fr.m[..., None] - np.log(Fr.parts.l)[..., None], -np.inf)

        _, Ab1_wc, bad = _weighted_exp_err(A, b_wc, e_wc, M.eps_exp, vis, log_a)
        b_lin = np.where(vis, lg.lin + (e_lse + eps_L)[..., None] + M.eps_exp, 0.0)
        # probabilistic: the stored LSE's error (and the rounding of LSE log2 e) splits into its
        # round-to-nearest part (variance sig_L^2: l's sum over its groups of equal summands, the final roundings;
        # the logit roundings are not random, bounds.md sec. 3; independent between rows that do not compute alike, which
        # the row groups' weights w_q account for: it joins this entry's Azuma sum) and the rest (det_L)
        lr = _lse_random(Fr, M, kf, sc, d, bias is not None, precision)
        sig_L2, det_L = lr.var, lr.det
        # tf32 that truncates: the stored LSE's conversion part c_i = sum_j A_ij e_ij is known with its sign
        # (the forward holds |c_i| in its det where its bound is not capped): in dK and dV it enters signed,
        # -A_ij c_i per P_ij, summed over the rows with the other conversion effects (sec. 8, "input conversions")
        lse_signed = np.zeros_like(det_L)
        if conv is not None and lg.conv is not None and kind == "probabilistic":
            lse_signed = np.where(Fr.parts.lse_capped, 0.0, (A * lg.conv).sum(-1))
            det_L = np.maximum(det_L - np.abs(lse_signed), 0.0)
        # the stored LSE as an interval of known values (Precision.lg2_known): its error lies in [lo, hi] whatever the
        # parts above say: centre signed, half-width not random (the interval is not mean-zero), and of the random part
        # only the backward's own rounding of LSE log2 e
        iv_h = None
        iv = Fr.parts.lse_iv
        if iv is not None and conv is not None and lg.conv is not None and kind == "probabilistic":
            iv_ok = iv[2] & ~empty
            iv_h = np.where(iv_ok, 0.5 * (iv[1] - iv[0]), np.nan)
            lse_signed = np.where(iv_ok, 0.5 * (iv[0] + iv[1]), lse_signed)
            det_L = np.where(iv_ok, iv_h, det_L)
            sig_L2 = np.where(iv_ok, e_lse**2, sig_L2)
        rg = groups.rows(r)
        w_q, w_do, w_qdo = rg.by_q[..., None], rg.by_do[..., None], rg.by_q_do[..., None]
        b_det = np.where(vis, lg_det + det_L[..., None] + M.eps_exp, 0.0)
        floor_P = np.where(vis, M.floor_w * (1 + nu_q_wc) + M.floor_p * (1 + gamma(n_q, M.u_dacc)), 0.0)
        # P rounded to nearest into the operand format: its subnormal floor is part of that rounding (as dS's,
        # _dS_errors): first order, charged worst case with the relative part, max(u_p P, floor_p) (det below)
        f_P = np.where(vis, _rounding_floor(M), 0.0)

        dodo = do_r * do_r
        dv_sums = _accumulate(dv_sums, _DVSums(
            A_absdO=_t(A) @ abs_do,
            wc=_t(_fix_bad(A * ((1 + b_wc) * (1 + nu_q_wc) - 1.0), bad,
                           lambda: Ab1_wc * (1 + nu_q_wc) - A) + floor_P) @ abs_do,
            lin=_t(A * (b_lin + nu_q_lin) + f_P) @ abs_do,
            var_P=_t(w_q * (A * A * sig_L2[..., None])) @ dodo,
            var_ops=_t(A * A * (r_in**2 * w_do)) @ dodo,
            # P's rounding into the operand format, <= max(u_p P, floor_p) per entry: worst case (the logits set
            # its residue, bench/adversaries/p_residue_dv.py; bounds.md sec. 6)
            det=_t(A * b_det + np.maximum(r_p * A, f_P)) @ abs_do,
            exact=_t(A) @ do_r))
        if rn_rows:  # the bound on P's error as the kernel computes it (exp underflow floor included)
            P_wc = _fix_bad(A * b_wc, bad, lambda: Ab1_wc - A) + np.where(vis, M.floor_w, 0.0)
            tolP = (1 + M.u_p) * (A + P_wc) - A

        # dP = dO V^T (dv-long dot), g = dP - Delta, dS = P o g in fp32, rounded to the operand format
        dP = do_r @ vT
        absdov = abs_do @ abs_vT
        dP_wc = dP_kw * absdov
        dP_lin = (2 * M.u_in + n_dv * M.u_dacc) * absdov
        # no round-to-nearest part modelled as random (as for the logits, logits.py): the dv roundings of the dot
        # (lost small products are one-signed) and dO's, V's conversions (u_in, rounded) charged worst case
        dP_det = (n_dv * M.u_dacc + 2.0 * r_in) * absdov
        if d_in:  # dO and V truncated to tf32, one-sided: u_in (sum_c |dO_c v_jc| + |dP_j|), not random
            dP_det = dP_det + (d_in * (absdov + np.abs(dP)) if conv is None else 0.0)
        e_dp = None
        if known_lg:  # dP as the kernel computes it, ascending fp32 FMA chains like the logits (Precision.ieee_fma_chain:
            # tl.dot(do, vT) and tl.dot(v, trans(do)) are the probe's qk and kq_bwd patterns): its error is known,
            # e_dp = fl(dO.v) - dO.v, and enters dS signed (effects); where a chain leaves fp32's normal range, the model
            e_dp = _fma_dp_error(do_r, vT, dP)
            if e_dp is not None:
                dP_det = np.where(e_dp[2], 0.0, dP_det)
        g = np.where(vis, dP - (do_r * o).sum(-1)[..., None], 0.0)
        absg = np.abs(g)
        acc_D = None
        if kind == "probabilistic" and not M.tensor_core and M.pv_products == 1:
            acc_D = _delta_accumulation(Fr, M, do_r, kf, vf, sc, d, bias is not None, precision, head_full)
        tc_D = None
        if M.tensor_core and M.recursive and M.pv_products == 1:
            # the P.V accumulation of O (normalized products A_j v_jc), weighted by |dO_c| in Delta
            # the tiles in the stated order (_visiting: our kernel's ragged tile first); "any" (flash-attn visits key
            # blocks from the last one): order-free. The FORWARD's key tiles (block_k): Delta reads its O
            idx = _visiting(Nk, precision.block_k, precision.tile_order)
            ordered = (idx is not False) & vis.all(axis=-1) & _heads_unmasked(head_full)
            tc_D = M.u_dacc * np.concatenate(
                [(np.abs(do_r[:, :, rr]) * _tensor_core_steps(p, precision.block_k, M.k_step,
                                                              ordered[:, :, rr, None])).sum(-1)
                 for rr, p in _product_chunks(_take_visiting(A, idx, -1),
                                              _take_visiting(np.swapaxes(vf, -1, -2), idx, -1))], axis=2)
            if fwd_blocks is not None:  # masked heads: each query block's own order, where smaller
                tc_D = np.minimum(tc_D, M.u_dacc * _block_tc_steps(A, vf, abs_do, fwd_blocks, r, given.block_k,
                                                                   M.k_step))
        lg_conv = (lg.det_conv, lg.conv, lg.conv_floor) if conv is not None and lg.conv is not None else None
        lr_D = lr if kind == "probabilistic" else None
        model_D = _delta_error_model(Fr, M, do_r, dP, g, absdov, vf, kind, acc_D, tc_D, lr_D, lg_conv,
                                     precision.accumulate)
        eps_D, sig_D, det_D, delta_signed = _delta_error(Fr, M, do_r, vf, kind, model_D, lr_D, precision.accumulate)
        eD = eps_D[..., None]
        # dQ reads the same Delta error as dK and dV (the known accumulator's where smaller). It kept the modelled one
        # while its accumulation was the grouped round-to-nearest model, which coherent residues exceeded 7x once the
        # accumulator's Delta removed its slack (bench/adversaries/constant_residue_dq.py); the fp32 chain is now
        # evaluated on the data (_rn_chain_on_data)
        eD_q = eD
        # Delta_hat - Delta lies in delta_c +- (eD - |delta_c|): its conversion part, signed (tf32), where eps_D is
        # the uncapped sum of its parts (whose det holds |delta_signed| and its float64 evaluation); else 0 +- eD
        delta_c = np.where(eps_D >= Fr.parts.lam * sig_D + det_D, delta_signed, 0.0)[..., None]
        dS_abs = A * absg
        dS = A * g
        if conv is not None:
            ce = conv.effects(r, qf, kf, vf, do_r, sc, A, g, dS, e_s=lg.conv if known_lg else None, e_dp=e_dp)
            conv_sums = _accumulate(conv_sums, _ConversionSums(
                dK=_t(ce.dk_rows) @ qf + _t(dS) @ (ce.dq_in),
                dK_abs=_t(ce.dk_rows_abs) @ np.abs(qf) + _t(np.abs(dS)) @ ce.dq_in_abs,
                dV=_t(A * ce.e_s) @ do_r + _t(A) @ ce.ddo,
                dV_abs=_t(A * ce.e_s_abs) @ abs_do + _t(A) @ ce.ddo_abs))
            # the row-common conversion parts, signed: the stored LSE's (-c_i on every P_ij) and Delta's
            # (-d_i on every dS_ij); det_L and det_D no longer hold their absolute values
            cl, cd = lse_signed[..., None], delta_signed[..., None]
            conv_sums = conv_sums + _ConversionSums(
                dK=-(_t(A * (cl * g + cd)) @ qf), dK_abs=_t(A * (np.abs(cl) * absg + np.abs(cd))) @ np.abs(qf),
                dV=-(_t(A * cl) @ do_r), dV_abs=_t(A * np.abs(cl)) @ abs_do)
            det_D = np.maximum(det_D - np.abs(delta_signed), 0.0)

        dP_err = _DPError(wc=dP_wc, lin=dP_lin, det=dP_det)

        # the LSE and Delta errors of row i come from the same forward roundings: (a + b)^2 <= 2a^2 + 2b^2
        dSe = _dS_errors(M, vis, A, absg, _PError(wc=b_wc, A_wc1=Ab1_wc, bad=bad, lin=b_lin, det=b_det),
                         dP_err, eD=eD, dD=det_D[..., None],
                         extra_var=2 * A * A * w_q * (sig_L2[..., None] * absg**2 + sig_D[..., None] ** 2),
                         w_S=w_qdo)
        dS_wc, dS_lin, dS_var, dS_det = dSe.wc, dSe.lin, dSe.var, dSe.det
        # dK = scale dS^T Q: its pieces summed over the query rows (finished after the loop, _grad)
        aq, qq = np.abs(qf), qf * qf
        dk_sums = _accumulate(dk_sums, _DKSums(
            base=_t(dS_abs) @ aq, wcS=_t(dS_wc) @ aq, lin=_t(dS_lin) @ aq, var=_t(dS_var) @ qq,
            SS=_t(w_q * dS * dS) @ qq, det=_t(dS_det) @ aq, exact=_t(dS) @ qf))
        if detail is not None:  # the det parts of P (b_det), dP and Delta, each through dK and dV
            b_parts = (("logits", lg_det), ("stored LSE", det_L[..., None]), ("exp", M.eps_exp))
            for name, x in b_parts:
                _add_sub("dK", "dS det: P " + name, _t(np.where(vis, A * x * absg, 0.0)) @ aq)
                _add_sub("dV", "P det: " + name, _t(np.where(vis, A * x, 0.0)) @ abs_do)
            _add_sub("dK", "dS det: dP", _t(np.where(vis, A * dP_det, 0.0)) @ aq)
            _add_sub("dK", "dS det: Delta", _t(np.where(vis, A * det_D[..., None], 0.0)) @ aq)
            # the row-common random parts (their variance proxies; shown as lam sqrt(.) alone)
            _add_sub("dK", "dS var: LSE, Delta (rows)", _t(np.where(vis, 2 * A * A * w_q * (
                sig_L2[..., None] * absg**2 + sig_D[..., None] ** 2), 0.0)) @ qq)
            _add_sub("dV", "P var: stored LSE (rows)", _t(np.where(vis, w_q * A * A * sig_L2[..., None], 0.0)) @ dodo)

        # For dQ_i the LSE error is one factor (1 + c_i) on the whole row i of P, and sum_j dS_ij = 0
        # (Lemma 9), so it costs c_i |dQ_i| instead of c_i sum_j |dS_ij||k_j|: dQ_hat = (1 + c_i) dQ'_hat,
        # where dQ' has P' = A (1 + b') with the LSE part removed from b.
        c_row = (np.exp(e_lse + eps_L) - 1.0)[..., None]
        b_wc_row = np.where(vis, _exp_err(lg.wc, M.eps_exp), 0.0)
        _, Ab1_row, bad_row = _weighted_exp_err(A, b_wc_row, lg.wc, M.eps_exp, vis, log_a)
        b_lin_row = np.where(vis, lg.lin + M.eps_exp, 0.0)
        b_det_row = np.where(vis, lg_det + M.eps_exp, 0.0)
        # Likewise the Delta error is one number per row: it adds -delta_i sum_j P_ij k_j, bounded with
        # |sum_j A_ij k_jc| (dq_delta), so dQ's dS errors leave it out.
        # dQ sums over the keys: keys that compute alike repeat their roundings (_KeyGroups)
        fmt = _DOT_OPERAND[precision.dot]
        # dS's rounding on the data (the slices below) reads the kernel's dS = fl(P~ fl(dP^ - Delta^)), P~ = exp2(S2 -
        # LSE2), and takes a known entry's whole error from it: only for a kernel that states its arithmetic (a known
        # tile order, Precision.tile_order). torch-sdpa-efficient (tile_order "any", bf16, d 192) exceeded it 1.9x on
        # the GPU (bench/results/h200-2026-11-26b/key); the model's worst-case rounding charge holds there.
        on_data = (kind == "probabilistic" and (r_p or (d_p and M.conv_exact)) and fmt in _SIGNIFICAND_BITS
                   and precision.tile_order != "any")
        P_row = _PError(wc=b_wc_row, A_wc1=Ab1_row, bad=bad_row, lin=b_lin_row, det=b_det_row)
        dSe = _dS_errors(M, vis, A, absg, P_row, dP_err, eD=0.0, dD=0.0, w_S=keys.by_k_v)
        wcS, linS, varS, detS = dSe.wc, dSe.lin, dSe.var, dSe.det
        # the computed dS differs from dS by <= dS_wc (and its operand rounding): products closer
        # than that could be equal as computed, and are grouped
        tolS = (1 + M.u_p) * (dS_abs + dS_wc) - dS_abs
        # the float64 dS's own error (the accumulation on the data needs the kernel's summands within an interval)
        rel_A = _float64_rel_A(Fr.s, vis, sc * (np.abs(qf) @ np.swapaxes(abs_k, -1, -2)), d)
        f64 = _float64_dS_error(A, g, rel_A, vis, absdov, abs_do, o, A @ np.abs(vf))
        acc_sq, partial, tc_steps, acc_det = _dq_accumulation(
            M_dq, kind, dS, kf, tolS, vis, precision.dq_key_tile, head_full, precision.tile_order,  # the dQ tiles
            precision.accumulate, f64, dq_order.rows(r), tile_chain=precision.dq_accumulation == "blocked")
        if rn_rows:
            row_blocks.append((dS, tolS, tolP, f64, A * rel_A))
        if tc_rows:
            dS_blocks.append(dS)
        kk = kf * kf
        base, wcS_k, SS_k, dS_k = dS_abs @ abs_k, wcS @ abs_k, (keys.by_k * dS * dS) @ kk, dS @ kf
        W_delta = _fix_bad(A * ((1 + kap_k) * (1 + b_wc_row) * (1 + rho_wc) - 1.0), bad_row,
                           lambda: Ab1_row * ((1 + kap_k) * (1 + rho_wc)) - A)

        def dq_bound(unknown=None, eps=eD_q, trunc_S=None, known=None, own: "_DqOwn | None" = None, acc=None):
            """dQ_i's bound before the store: the errors of dS's entries `unknown` (None: all) bounded by the terms of
            sec. 8 (P, dP, the fp32 roundings, the operand rounding, or its truncation on the data: trunc_S = (centre,
            half-width) of theta), the stored LSE's factor c_i and Delta's error |delta_i| <= eps on them alone; the
            other entries' errors known = (mask, signed error, its uncertainty) (bounds.md sec. 6); the products'
            magnitudes (accumulation, conversion of K) over every entry. own (_DqOwn, every entry): dS's error terms
            and the row-common LSE factor in place of this row block's (the recomputed P known, _DqOwn). Returns
            (bound, _GradError, dq_delta, the combined terms, the LSE part, the known part, the LSE factor). acc: (acc_sq,
            acc_det) in place of the row block's (the accumulation on the data for one candidate of the stored LSE)."""
            a_sq, a_det = (acc_sq, acc_det) if acc is None else acc
            c_r = c_row if own is None else own.c_row
            if own is not None:
                wc_o, lin_o, det_o, Wd_o, S_o, A_o = (own.wcS @ abs_k, own.linS @ abs_k, own.detS @ abs_k,
                                                      own.W_delta @ abs_k, dS_k, A @ kf)
                var_o = own.varS @ kk
                conv_o = (own.rows @ kf, own.rows_abs @ abs_k)
                wc_all, trunc_k, known_k = wc_o, None, 0.0
            elif unknown is None:
                wc_o, lin_o, det_o, Wd_o, S_o, A_o = wcS_k, linS @ abs_k, detS @ abs_k, W_delta @ abs_k, dS_k, A @ kf
                var_o = varS @ kk
                conv_o = None if conv is None else (ce.dk_rows @ kf, ce.dk_rows_abs @ abs_k)
                wc_all, trunc_k, known_k = wcS_k, None, 0.0
            else:
                def z(x):
                    return np.where(unknown, x, 0.0)
                ak = [z(wcS), z(linS), z(detS), z(W_delta)]
                sk = [z(dS), z(A)]
                if trunc_S is not None:  # sum_j dS_ij theta_ij k_jc: its signed centre, half-width, float64 evaluation
                    tS = z(A * g * trunc_S[0])
                    ak += [z(A * absg * trunc_S[1]), np.abs(tS)]
                    sk += [tS]
                if conv is not None:
                    ak += [z(ce.dk_rows_abs)]
                    sk += [z(ce.dk_rows)]
                ak, sk = _products_over(unknown, ak, abs_k), _products_over(unknown, sk, kf)
                (var_o,) = _products_over(unknown, [z(varS)], kk)
                wc_o, lin_o, det_o, Wd_o = ak[:4]
                S_o, A_o = sk[:2]
                trunc_k = None
                if trunc_S is not None:
                    trunc_k = np.abs(sk[2]) + ak[4] + float(gamma(Nk + 1, 2.0**-53)) * ak[5]
                conv_o = None if conv is None else (sk[-1], ak[-1])
                # the known entries: |sum_j e_ij k_jc| + sum_j (e_abs_ij + gamma |e_ij|) |k_jc|
                # (common._signed_sum_bound), and |dS^ - dS| <= |e| + e_abs, which bounds their products' errors
                mask, e, e_abs = known
                ea, e_sum = _products_over(mask, [e_abs, np.abs(e)], abs_k)
                (e_k,) = _products_over(mask, [e], kf)
                known_k = np.abs(e_k) + ea + float(gamma(Nk + 1, 2.0**-53)) * e_sum
                wc_all = wc_o + ea + e_sum
            ge = _grad(M_dq, sc, n_k, base, wc_all, lin_o, var_o, SS_k, det_o, dS_k, acc_sq=a_sq, acc_det=a_det,
                       trunc_S=trunc_k,
                       tc_steps=tc_steps, partial=partial,
                       conv_known=None if conv is None else (
                           conv_o[0] + dS @ conv.dk_in, conv_o[1] + np.abs(dS) @ conv.dk_in_abs, conv.n_ops),
                       wcS_own=None if unknown is None else wc_o, S_own=None if unknown is None else S_o)
            dq_delta = sc * eps * (np.abs(A_o) + Wd_o)
            comb = _combine(ge.wc, ge.rem, ge.var, ge.det, lam, kind)
            c_part = c_r * np.abs(sc * S_o)
            return (1 + c_r) * (comb + dq_delta) + c_part + sc * known_k, ge, dq_delta, comb, c_part, known_k, c_r

        def dq_terms_of(res):
            err, ge, dq_delta, comb, c_part, known_k, c_r = res
            return _terms(ge, lam, kind) + [
                Term("Delta error (row-common)", "other", (1 + c_r) * dq_delta),
                Term("LSE error (row-common)", "other", c_r * (comb + dq_delta) + c_part),
                Term("dS entries known on the data (signed)", "other", sc * known_k * np.ones_like(err))]

        res0 = dq_bound()
        dq_err, dQ_exact = res0[0], res0[1].exact
        row_terms = dq_terms_of(res0) if detail is not None else None
        p_known_at = False  # instrumentation: the entries whose bound takes the recomputed P known
        kp_iv, kp_ok = None, None  # the kernel's dS and P~ over the stored LSE's candidates (dK, dV enclosed)
        enc_at, enc_max = False, 0.0  # (and those where the enclosure of the kernel's dQ chain is the bound)
        if M.bwd_p_known and known_lg and iv_h is not None and e_dp is not None:
            # the recomputed P known (Precision.bwd_p_known, bounds.md sec. 8): for each fp32 value z the stored LSE
            # may hold (the forward's interval), every P~ = ex2(min(fl32(qk c - fl32(z log2 e)), 0)) is a known
            # number, so dS's error from P is evaluated with its sign and the row's LSE factor is gone; the stored
            # LSE is one of them, so the largest bound over the candidates holds (rows where a candidate cannot be
            # evaluated keep the bound above)
            kp_ok, kp_P = _recomputed_p_known(Fr.parts.qk[4][3:5], sc, vis, A, iv)
            if kp_ok.any():
                worst_k = _Largest(dq_terms_of if detail is not None else None)
                chain_ok = (rn_rows and M.fma_logits and _rn_binade(M, precision.accumulate) is not None
                            and precision.accumulate == "float32")
                enc_max = None
                ops = (_dS_operands(dP, e_dp, dP_wc, absdov, eD_q[..., 0], delta_c[..., 0], Fr, do_r, vf, rel_A)
                       if chain_ok else None)
                for Pt in kp_P:
                    acc_k = None
                    if chain_ok:  # the kernel's dS for this candidate within [lo, hi]: the chain on the data reads it
                        lo_S, hi_S = _dS_candidate_interval(Pt, ops, tolS, dS, f64, vis)
                        # dK, dV: the kernel's dS and P~ lie in the union over the candidates (one holds)
                        kp_iv = ((lo_S, hi_S, Pt, Pt) if kp_iv is None else
                                 (np.minimum(kp_iv[0], lo_S), np.maximum(kp_iv[1], hi_S), np.minimum(kp_iv[2], Pt),
                                  np.maximum(kp_iv[3], Pt)))
                    if chain_ok and M_dq.recursive:  # dQ's own chain (a blocked dQ keeps its order-free bound)
                        a_sq, _, _, a_det = _dq_accumulation(
                            M_dq, kind, 0.5 * (lo_S + hi_S), kf,
                            0.5 * (hi_S - lo_S) + 2.0**-52 * (np.abs(lo_S) + np.abs(hi_S)),
                            vis, precision.dq_key_tile, head_full, precision.tile_order, precision.accumulate,
                            np.zeros_like(A), dq_order.rows(r))
                        acc_k = (a_sq, a_det)
                        # the kernel's dQ accumulator enclosed (every step of the chain on the data), against the exact dQ
                        enc = sc * _dq_chain_enclosure(lo_S, hi_S, kf, vis, dS, f64, precision.dq_key_tile,
                                                       precision.tile_order, head_full, M.u_dacc, dq_order.rows(r))
                        enc_max = enc if enc_max is None else np.maximum(enc_max, enc)
                    worst_k.add(dq_bound(own=_DqOwn.of(M, vis, A, g, absg, Pt, f64, dP_err, keys.by_k_v, kap_k,
                                                       rho_wc, e_dp, conv.n_ops), acc=acc_k))
                bound_k = np.where(kp_ok[..., None], worst_k.bound, np.inf)
                p_known_at = bound_k < dq_err
                row_terms = worst_k.where_smaller(row_terms, p_known_at)
                dq_err = np.minimum(dq_err, bound_k)
                if enc_max is not None:
                    enc_max = np.where(kp_ok[..., None], enc_max, np.inf)
                    enc_at = enc_max < dq_err
                    dq_err = np.minimum(dq_err, enc_max)
        if rn_rows:
            # dK, dV enclosed (bounds.md sec. 8, "dK and dV enclosed"): the kernel's dS_ij and P~_ij per entry, within
            # the candidates' union where the row has them, else within their bounds about the float64 dS and A
            w_S, w_P = (tolS + f64) * (1.0 + 2.0**-50), (tolP + A * rel_A) * (1.0 + 2.0**-50)
            S_lo, S_hi, P_lo, P_hi = dS - w_S, dS + w_S, A - w_P, A + w_P
            if kp_iv is not None:
                claim = kp_ok[..., None]
                S_lo, S_hi, P_lo, P_hi = (np.where(claim, x, y) for x, y in zip(kp_iv, (S_lo, S_hi, P_lo, P_hi)))
            iv_blocks.append((np.where(vis, S_lo, 0.0), np.where(vis, S_hi, 0.0), np.where(vis, P_lo, 0.0),
                              np.where(vis, P_hi, 0.0), kp_iv is not None))
        if detail is not None:  # (every row block has this term: 0 where the enclosure is not the bound)
            row_terms = _enclosed_terms(row_terms, "dQ", enc_at, enc_max, dq_err)
        if on_data:
            # dS's operand rounding on the data (bounds.md sec. 6, "roundings on the data"). The dS the kernel rounds
            # holds the stored LSE's error and Delta's, delta_i in [-eD_i, eD_i], ONE number per row: for delta_i in
            # each slice [d0, d1] of that range, dP^ - Delta^ lies in [g - d1 - dP_wc, g - d0 + dP_wc] (tf32: around
            # the exactly converted dO~.v~, within the tensor core's steps) and the roundings are evaluated on it.
            # Where the rounded value R is known, the kernel's dS_ij IS sign(g) R: its whole error R - dS is known,
            # charged signed (known_k), and the entry leaves every other dS term (P, dP, the fp32 roundings, c_i,
            # delta_i); the others keep them, their rounding unknown (tf32: their truncation on the data, signed).
            # The bound is the largest over the slices, since delta_i lies in one of them.
            e_lse_row, c_lse = e_lse + eps_L, None
            if conv is not None and lg.conv is not None:  # the stored LSE errs by its conversion part c_i (signed,
                # lse_signed; 0 where its bound is capped) + a rest within eps_L - |c_i| (the forward's det holds |c_i|
                # and the float64 evaluation of c_i, gamma_{Nk+1}(2^-53) sum_j A_j |e_j|, which also covers the gap
                # between this evaluation of c_i and the forward's: charged twice)
                c_lse = lse_signed
                e_lse_row = (e_lse_row - np.abs(lse_signed)
                             + 2.0 * float(gamma(Nk + 1, 2.0**-53)) * np.abs(A * lg.conv).sum(-1))
                if iv_h is not None:  # the interval's rows: c_i +- h_i (and the rounding of LSE log2 e)
                    e_lse_row = np.where(np.isnan(iv_h), e_lse_row, e_lse + np.nan_to_num(iv_h))
            p_lo, p_hi = _recomputed_p_interval(M, lg, Fr.s, lse0, e_lse_row, vis, c_lse)
            g_c, g_neg, g_pos = g, dP_wc, dP_wc  # dP^ - Delta in [g_c - g_neg, g_c + g_pos]
            rest = 0.0
            if conv is not None:  # dP^ = dO~.v~ (exact conversions, e_dp) + the tensor core's steps
                g_c = g + ce.e_dp
                rest = ce.e_dp_floor + float(gamma(2 * dv + 2, 2.0**-53)) * ce.e_dp_abs
                g_neg = g_pos = float(gamma(n_dv, M.u_dacc)) * absdov + rest
            if M.tensor_core and M.mma is not None and (conv is not None or not M.u_in):
                # the tensor core's steps of dO.v on the data, by sign, as the logits' (logits._mma_dot_error, sec. 2a:
                # its operands exact, dO~ and v~; the computed partial sums and products are within wc_dp of the exact
                # ones, which moves each step's bound by <= (u_dacc + 2^(-22-F)) wc_dp); elsewhere the majorant
                from .logits import _mma_dot_error

                M0 = dataclasses.replace(M, u_in=0.0)
                ops = (conv.do[:, :, r], conv.v) if conv is not None else (do_r, vf)
                wc_dp = float(gamma(n_dv, M.u_dacc)) * absdov
                total, neg, pos = _mma_dot_error(*ops, 1.0, M0)
                second = n_dv * (M.u_dacc + 2.0 ** (-22 - M.mma.extra_bits)) * wc_dp
                won = total + second < wc_dp
                g_neg = np.where(won, neg + second, wc_dp) + rest
                g_pos = np.where(won, pos + second, wc_dp) + rest
            worst = _Largest(dq_terms_of if detail is not None else None)
            for a in range(DELTA_SLICES):
                d0, d1 = (delta_c + (eD - np.abs(delta_c)) * (-1.0 + 2.0 * x / DELTA_SLICES) for x in (a, a + 1))
                g_lo = g_c - g_neg - d1
                centre, half, known, R_lo, R_hi, bounded = _dS_rounding_on_data(
                    M, fmt, vis, p_lo, p_hi, g_lo, g_c + g_pos - d0, truncate=not r_p)
                # the kernel's |dS| lies in [R_lo, R_hi] (R_lo = R_hi: known); where that is no wider than the rounding
                # the other terms would charge, the entry's whole error is taken from it
                R_half = 0.5 * (R_hi - R_lo)
                known = bounded & (R_half <= np.maximum(M.u_p * dS_abs, M.floor_p))
                unknown = vis & ~known
                # the known entries' whole error: the kernel's dS is R with the sign of its dP^ - Delta^ (known: the
                # range does not hold 0; tf32: not always g's, the range is centred on the converted dO~.v~)
                R_mid = 0.5 * (R_lo + R_hi)  # exact in float64: both are operand-format numbers
                e = np.where(known, np.where(g_lo > 0, R_mid, -R_mid) - A * g, 0.0)
                e_abs = np.where(known, R_half + f64 + 2.0**-52 * (dS_abs + np.abs(e)), 0.0)
                trunc_S = None if r_p else (centre, half)  # the unknown entries' truncation, theta in [-u_p, 0]
                worst.add(dq_bound(unknown, np.maximum(np.abs(d0), np.abs(d1)), trunc_S, (known, e, e_abs)))
            row_terms = worst.where_smaller(row_terms, worst.bound < dq_err)
            dq_err = np.minimum(dq_err, worst.bound)
        # a blocked dQ's tile additions (the fused dQ's TMA reduce-adds), where not measured, may flush subnormals:
        # an absolute floor (a scalar: 0 for every other dQ and for the measured add)
        flush = abs(sc) * dq_flush
        dq_err = dq_err + flush
        if detail is not None:
            dq_terms.append(row_terms + [
                Term("dQ tile adds' subnormal flush", "other", np.full_like(dq_err, flush)),
                Term("store and scale", "other", _store(dq_err, np.abs(dQ_exact), g2, M) - dq_err)]
                + [Term("dS var: " + name, "sub", lam * sc * np.sqrt(np.where(vis, A * A * x, 0.0) @ (kf * kf)))
                   for name, x in (("dS roundings", (2 * u**2 + r_p**2) * absg**2),)]
                + [Term("dS det: " + name, "sub", np.where(p_known_at, 0.0, sc * (np.where(vis, A * x, 0.0) @ abs_k)))
                   for name, x in (("P logits", lg_det * absg), ("P exp", M.eps_exp * absg), ("dP", dP_det),
                                   ("operand rounding", np.maximum(r_p * absg, f_P / np.maximum(A, 1e-300))))])
        dq_err = _store(dq_err, np.abs(dQ_exact), g2, M)
        dq_blocks.append(np.where(empty[..., None], 0.0, dq_err))
        dQ_blocks.append(dQ_exact)

    AabsdO = dv_sums.A_absdO
    acc_dk = acc_dv = det_dk = None
    det_dv = 0.0
    partial_dk = tc_dk = None
    tc_dv = n_q * AabsdO if M.tensor_core else 0.0 * AabsdO
    rows_order = rows_visits(band_cls, F.vis, precision, M.recursive, group) if tc_rows or rn_rows else None
    if tc_rows:
        dS_all = np.concatenate(dS_blocks, axis=2)
        del dS_blocks
        tc_dk = _rows_tensor_core(M, dS_all, F.qf, F.vis, precision.block_q, group, n_q, precision.tile_order,
                                  rows_order)
        tc_dv = _rows_tensor_core(M, F.A, dof, F.vis, precision.block_q, group, n_q, precision.tile_order, rows_order)
        del dS_all
        partial_dk = tc_dk
    enc_dk = enc_dv = None
    if rn_rows:
        dS_all, tolS_all, tolP_all, f64_S, f64_A = (np.concatenate(x, axis=2) for x in zip(*row_blocks))
        del row_blocks
        acc_dk, partial_dk, det_dk = _rows_accumulation(M, dS_all, F.qf, tolS_all, F.vis, precision.block_q, group,
                                                        precision.tile_order, precision.accumulate, f64_S, rows_order)
        acc_dv, _, det_dv = _rows_accumulation(M, F.A, dof, tolP_all, F.vis, precision.block_q, group,
                                               precision.tile_order, precision.accumulate, f64_A, rows_order)
        del tolS_all, tolP_all
        # dK and dV enclosed (bounds.md sec. 8, "dK and dV enclosed"): where some row's recomputed P~ is known
        # (the stored LSE's candidates) and the chains are the kernel's (fp32 ieee FMA chains, the rows' order stated:
        # rows_order, every key block's own where Precision.block_k_dkdv states them)
        if (any(b[4] for b in iv_blocks) and M.fma_logits and M.recursive
                and _rn_binade(M, precision.accumulate) is not None and precision.accumulate == "float32"):
            S_lo, S_hi, P_lo, P_hi = (np.concatenate(x, axis=2) for x in list(zip(*iv_blocks))[:4])
            enc_dk = sc * _rows_chain_enclosure(S_lo, S_hi, dS_all, f64_S, F.qf, F.vis, precision.block_q, group,
                                                precision.tile_order, M.u_dacc, rows_order)
            enc_dv = _rows_chain_enclosure(P_lo, P_hi, F.A, f64_A, dof, F.vis, precision.block_q, group,
                                           precision.tile_order, M.u_dacc, rows_order)
            del S_lo, S_hi, P_lo, P_hi
        del dS_all, f64_S, f64_A, iv_blocks
    # systematic parts (sec. 6): a partial sum s of the accumulation is C_s dV + F_s, C_s in [0, 1],
    # |F_s| <= sum_i A_ij |dO_ic| + |dV_jc|; the part along dV (and P's rounding along dV) worst case
    abs_dV = np.abs(dv_sums.exact)
    n_rn_q = 0 if M.tensor_core else n_q
    # the accumulation: grouped round to nearest (acc_dv, no part along dV), else the split along dV
    dv_acc_var = n_rn_q * u**2 * (AabsdO + abs_dV)**2 if acc_dv is None else acc_dv
    dv_along = n_rn_q * u * abs_dV if acc_dv is None else 0.0 * abs_dV
    dv_var = dv_sums.var_P + dv_sums.var_ops + dv_acc_var
    dv_det = (dv_sums.det + M.u_dacc * tc_dv
              + dv_along + r_in * abs_dV + det_dv)
    if M.trunc:  # P and dO truncated to tf32, one-sided: (u_p + u_in) (sum_i A_ij |dO_ic| + |dV_jc|) / 2
        dv_det = dv_det + (d_p + (d_in if conv is None else 0.0)) * 0.5 * (AabsdO + np.abs(dv_sums.exact))
    if conv is not None:  # the input conversions' first-order effect, signed (sec. 8, "input conversions")
        dv_det = dv_det + np.abs(conv_sums.dV) + float(gamma(conv.n_ops, UNIT_ROUNDOFF["float64"])) * conv_sums.dV_abs
    dV_exact = _kv(dv_sums.exact)
    dv_err = _combine(_kv(dv_sums.wc), _kv(dv_sums.wc - dv_sums.lin), _kv(dv_var), _kv(dv_det), lam, kind)
    dv_enc_at = False if enc_dv is None else enc_dv < dv_err
    if enc_dv is not None:
        dv_err = np.minimum(dv_err, enc_dv)
    if detail is not None:
        dv_parts = _GradError(dv_sums.wc, dv_sums.lin, dv_sums.wc - dv_sums.lin, (
            ("P", dv_sums.var_P), ("operands", dv_sums.var_ops),
            ("accumulation", dv_acc_var)), (
            ("P", dv_sums.det), ("tensor core", M.u_dacc * tc_dv), ("accumulation on the data", det_dv * np.ones_like(abs_dV)),
            ("accumulation along R", dv_along), ("dO conversion along R", r_in * abs_dV),
            ("tf32 truncation", (d_p + d_in) * 0.5 * (AabsdO + abs_dV) if M.trunc else 0.0 * abs_dV)), dv_sums.exact)
        detail.append(("dV", _enclosed_terms(_terms(dv_parts, lam, kind, _kv), "dV", dv_enc_at, enc_dv, dv_err)
                       + [Term("store", "other", _store(dv_err, np.abs(dV_exact), 0.0, M) - dv_err)]
                       + [Term(name, "sub", lam * np.sqrt(_kv(x)) if " var: " in name else _kv(x))
                          for name, x in sub["dV"].items()]))
    dv_err = _store(dv_err, np.abs(dV_exact), 0.0, M)

    ge = _grad(M, sc, n_q, dk_sums.base, dk_sums.wcS, dk_sums.lin, dk_sums.var, dk_sums.SS, dk_sums.det,
               dk_sums.exact, acc_sq=acc_dk, acc_det=det_dk, tc_steps=tc_dk, partial=partial_dk, conv_known=None if conv is None else (conv_sums.dK, conv_sums.dK_abs, conv.n_ops))
    dK_exact = ge.exact
    dk_err = _combine(_kv(ge.wc), _kv(ge.rem), _kv(ge.var), _kv(ge.det), lam, kind)
    dk_enc_at = False if enc_dk is None else enc_dk < dk_err
    if enc_dk is not None:
        dk_err = np.minimum(dk_err, enc_dk)
    if detail is not None:
        detail.append(("dK", _enclosed_terms(_terms(ge, lam, kind, _kv), "dK", dk_enc_at, enc_dk, dk_err)
                       + [Term("store and scale", "other", _store(dk_err, np.abs(_kv(dK_exact)), g2, M) - dk_err)]
                       + [Term(name, "sub", sc * (lam * np.sqrt(_kv(x)) if " var: " in name else _kv(x)))
                          for name, x in sub["dK"].items()]))
        detail.append(("dQ", [Term(t.name, t.kind, np.concatenate([b[i].value for b in dq_terms], axis=2))
                              for i, t in enumerate(dq_terms[0])]))
    dk_err = _store(dk_err, np.abs(_kv(dK_exact)), g2, M)
    dq_err = np.concatenate(dq_blocks, axis=2)
    dQ_exact = np.concatenate(dQ_blocks, axis=2)
    bound = BackwardBound(dq=dq_err, dk=dk_err, dv=dv_err, kind=kind, precision=given)
    return bound, (dQ_exact, _kv(dK_exact), dV_exact)


def _enclosed_terms(terms, grad: str, at, enc, err) -> list:
    """Instrumentation: the terms of a gradient's bound where the enclosure of its kernel accumulator (`enc`, the
    bound at `at`) is not the bound, and that enclosure as one term where it is (0 elsewhere)."""
    return [Term(t.name, t.kind, np.where(at, 0.0, t.value)) for t in terms] + [
        Term(f"{grad}'s chain enclosed on the data", "other",
             np.where(at, 0.0 if enc is None else enc, 0.0) * np.ones_like(err))]


class _Largest:
    """The largest of several dQ bounds per entry (each holds where its case does, and one case does): `bound`; with
    terms_of (dq_terms_of; None: no instrumentation), the terms of the largest per entry."""

    def __init__(self, terms_of=None):
        self.bound, self.terms, self.terms_of = None, None, terms_of

    def add(self, res):
        if self.terms_of is not None:
            terms = self.terms_of(res)
            new = self.bound is None or res[0] > self.bound
            self.terms = terms if self.terms is None else [
                Term(t.name, t.kind, np.where(new, t.value, w.value)) for t, w in zip(terms, self.terms)]
        self.bound = res[0] if self.bound is None else np.maximum(self.bound, res[0])

    def where_smaller(self, row_terms, smaller):
        """row_terms with this bound's terms where `smaller` (row_terms unchanged without instrumentation)."""
        if self.terms is None:
            return row_terms
        return [Term(t.name, t.kind, np.where(smaller, w.value, t.value)) for t, w in zip(row_terms, self.terms)]


class _Summable:
    """A record of arrays that add field by field (sums over blocks of query rows)."""

    def __add__(self, other):
        return type(self)(*(getattr(self, f.name) + getattr(other, f.name) for f in dataclasses.fields(self)))


def _accumulate(total, block):
    return block if total is None else total + block


@dataclass(frozen=True)
class _DVSums(_Summable):
    """dV's pieces summed over the query rows i (each (B, Hq, Nk, dv)): sum_i A_ij |dO_ic| (A_absdO), the
    majorant (wc) and its linear part (lin), the variance proxies of P's random error (var_P) and of the
    operand roundings (var_ops = sum_i A_ij^2 dO_ic^2 (r_p^2 w_q + r_in^2 w_do)), the non-random P error
    (det), and dV itself (exact); variance terms weighted by the row groups (_RowGroups)."""

    A_absdO: np.ndarray
    wc: np.ndarray
    lin: np.ndarray
    var_P: np.ndarray
    var_ops: np.ndarray
    det: np.ndarray
    exact: np.ndarray


@dataclass(frozen=True)
class _DKSums(_Summable):
    """dK's pieces summed over the query rows (the arguments of _grad): |dS|^T |Q| (base), the dS errors
    (wcS, lin, var, det) contracted with |Q| (Q^2 for var), (dS^2)^T Q^2 (SS), dS^T Q (exact)."""

    base: np.ndarray
    wcS: np.ndarray
    lin: np.ndarray
    var: np.ndarray
    SS: np.ndarray
    det: np.ndarray
    exact: np.ndarray


@dataclass(frozen=True)
class _ConversionSums(_Summable):
    """The input conversions' signed first-order effect on dK and dV summed over the query rows, and the
    same with absolute values (their float64 evaluation error)."""

    dK: np.ndarray
    dK_abs: np.ndarray
    dV: np.ndarray
    dV_abs: np.ndarray


@dataclass(frozen=True)
class _GradError:
    """The error of scale * S @ other (sec. 8) in the pieces of sec. 6: the majorant wc and its linear
    part lin, a bound rem on the nonlinear remainder (wc - lin, or smaller from the accumulation's partial
    sums, _grad), and the first-order part split into named variance proxies (var_parts, random) and
    non-random terms (det_parts); var and det are their sums. `exact` = scale * S @ other."""

    wc: np.ndarray
    lin: np.ndarray
    rem: np.ndarray
    var_parts: tuple
    det_parts: tuple
    exact: np.ndarray

    @property
    def var(self):
        return _total(self.var_parts)

    @property
    def det(self):
        return _total(self.det_parts)


def _terms(ge: _GradError, lam, kind, reduce=lambda x: x) -> list:
    """The named pieces of one gradient's bound before the store: lam sqrt(var part) for each variance
    proxy, each det part, and the majorant remainder wc - lin (probabilistic kind)."""
    out = [Term(name, "var", lam * np.sqrt(np.maximum(reduce(x), 0.0))) for name, x in ge.var_parts]
    ones = np.ones_like(reduce(ge.exact))
    out += [Term(name, "det", reduce(x) * ones) for name, x in ge.det_parts]
    if kind == "probabilistic":
        out.append(Term("majorant remainder wc - lin", "det", np.maximum(reduce(ge.rem), 0.0)))
    return out


@dataclass(frozen=True)
class Term:
    """One named piece of a bound (instrumentation, bench/backward_terms.py): `kind` "var" (a variance
    proxy: it costs lam * sqrt(value) alone), "det" / "other" (added linearly) or "sub" (a part of a
    det term, shown for where it comes from)."""

    name: str
    kind: str
    value: np.ndarray


def _total(parts):
    total = 0.0
    for _, x in parts:
        total = total + x
    return total


def _grad(M: _Model, sc, n, base, wcS_ao, linS_ao, varS_oo, SS_oo, detS_ao, S_other, acc_sq=None,
          tc_steps=None, conv_known=None, partial=None, trunc_S=None, wcS_own=None, S_own=None,
          acc_det=None) -> _GradError:
    """scale * S @ other with S's error (wc, lin, var, det), the operand rounding of `other` (u_in) and
    the accumulation of n terms (tensor core or RN), from the products base = |S| @ |other|,
    wcS @ |other|, linS @ |other|, varS @ other^2, (S * S) @ other^2, detS @ |other| and S @ other
    (sums over the contraction index, which may be added up block by block). acc_sq: the variance proxy
    of the round-to-nearest accumulation, sum over groups of identical products of (sum of the steps'
    error bounds)^2 (_rn_accumulation_sq), which replaces the split along R; None: that split. acc_det (with
    acc_sq): the accumulation's roundings evaluated on the data where acc_sq is 0 (_rn_chain_on_data), non-random.
    tc_steps: sum over the tensor-core steps of (|acc| + |step's products|) (_tensor_core_steps), in
    place of n * base. conv_known: (signed first-order effect of the input conversions on S @ other,
    the same with absolute values, operations per entry) (_ConvertedInputs.effects), in place of the
    conversion of `other` in the one-sided truncation term; its float64 evaluation error is added.
    partial (recursive accumulations only): sum over the accumulation's n roundings of a bound on the exact
    partial sum each rounds (C1: _rn_accumulation_sq's, or tc_steps), which bounds the remainder rem
    (bounds.md sec. 8, "second order of the accumulations"); None: rem = wc - lin. trunc_S: |sum S theta other|
    for S's truncation theta evaluated on the data (tf32; in units of @|other|), in place of d_p (base + |R|) / 2
    where smaller. wcS_own, S_own (dQ's entries whose error is known on the data, bounds.md sec. 6): S's error
    majorant and S @ other over the entries whose error these terms still bound (linS, varS, detS are then theirs
    too); wcS_ao stays every entry's (the products' magnitudes, |S^| <= |S| + wcS, in the accumulation and the
    conversion of `other`). None: every entry's.

    wc = (1 + kappa) (wcS + |S|) @ |other| - base, evaluated as kappa (wcS_ao + base) + wcS_ao: the same
    number without the cancellation of the literal form (kappa ~ n u, so its rounding error was up to
    1e-16 / kappa of the result: ~1e-9 relative in fp32, ~10% for the fp64 reference bound)."""
    u = M.u_w
    kap_wc = (1 + M.u_in) * (1 + gamma(n, M.u_dacc)) - 1.0
    kap_lin = M.u_in + n * M.u_dacc
    wcS_own = wcS_ao if wcS_own is None else wcS_own
    wc = sc * (kap_wc * (wcS_ao + base) + wcS_own)
    lin = sc * (linS_ao + kap_lin * base)
    (r_in, _), (d_in, d_p) = _conv(M)
    # systematic parts (sec. 6): each partial sum of the accumulation is C_s R + F_s with R = S @ other,
    # C_s in [0, 1], |F_s| <= base + |R|; the part along R, and dS's two fp32 roundings along R, are charged
    # worst case (dS's rounding into the operand format: whole, in detS, _dS_errors)
    n_rn = 0 if M.tensor_core else n
    abs_r = np.abs(S_other)
    abs_r_own = abs_r if S_own is None else np.abs(S_own)
    sc2 = sc**2
    acc_var = n_rn * u**2 * (base + abs_r)**2 if acc_sq is None else acc_sq
    along_r = n_rn * u * abs_r if acc_sq is None else 0.0 * abs_r
    var_parts = (("dS", sc2 * varS_oo), ("operand", sc2 * r_in**2 * SS_oo), ("accumulation", sc2 * acc_var))
    tc = (n * base if tc_steps is None else tc_steps) if M.tensor_core else 0.0 * base
    det_parts = [("dS", sc * detS_ao), ("tensor core", sc * M.u_dacc * tc),
                 ("accumulation on the data", sc * (0.0 * abs_r if acc_det is None else acc_det)),
                 ("accumulation along R", sc * along_r),
                 ("dS conversions along R", sc * ((2 * u + r_in) * abs_r if S_own is None
                                                  else 2 * u * abs_r_own + r_in * abs_r))]  # operand rounding: in detS
    if M.trunc:  # dS and `other` (K or Q) truncated to tf32: sum_j dS_j o_j theta_j, theta in
        # [-(u_p + u_in), 0]: one-sided, (u_p + u_in) (|S| @ |other| + |S @ other|) / 2, not random
        p_part = d_p * 0.5 * (base + abs_r)
        if trunc_S is not None:
            p_part = np.minimum(p_part, trunc_S)
        det_parts.append(("tf32 truncation", sc * (p_part + (d_in if conv_known is None else 0.0) * 0.5 * (base + abs_r))))
    if conv_known is not None:
        signed, absolute, n_ops = conv_known
        det_parts.append(("input conversions (exact)",
                          sc * (np.abs(signed) + float(gamma(n_ops, UNIT_ROUNDOFF["float64"])) * absolute)))
    rem = wc - lin
    if partial is not None and M.recursive:
        # error = sum_s (p^_s - p_s) + sum_s e_s exactly, e_s = delta_s T_s with T_s = S_s + D_s + E_{s-1}
        # (exact partial sum, products' errors so far, roundings so far): beyond the first order (lin's
        # linear terms, delta_s S_s) remain the products' nonlinear part and u sum_s (|D_s| + |E_{s-1}|) with
        # |D_s| <= W = sum_s |p^_s - p_s| and sum_s |e_s| <= u (C1 + n W) / (1 - n u) (bounds.md sec. 8)
        ua = M.u_dacc
        W = (1 + M.u_in) * wcS_ao + M.u_in * base
        with np.errstate(divide="ignore", invalid="ignore"):
            E = np.where(n * ua < 1.0, ua * (partial + n * W) / max(1.0 - n * ua, 0.0), np.inf)
        rem = np.minimum(rem, sc * ((wcS_own - linS_ao) + M.u_in * wcS_ao + n * ua * (W + E)))
    return _GradError(wc, lin, rem, var_parts, tuple(det_parts), sc * S_other)



def reference_bound(q, k, v, do=None, *, scale=None, causal=False, window=None, mask=None, bias=None,
                    kind: str = "worst_case"):
    """Bound on the float64 references (reference/) against the mpmath oracle (reference/exact.py).

    The references compute in float64 with libm exp and an unspecified summation order; the same
    derivation applies with u = 2^-53, block size 1 (any blocking) and one extra half-ulp for the
    rounding of the mpmath value to float64 in the comparison. Returns a ForwardBound, or a
    BackwardBound when `do` is given."""
    kw = dict(scale=scale, causal=causal, window=window, mask=mask, bias=bias)
    u = UNIT_ROUNDOFF["float64"]
    if do is None:
        ref = _forward(q, k, v, scale, causal, window, mask, bias, REFERENCE_PRECISION, kind)
        fb = ref.bound
        o_abs = np.abs(ref.o)
        lse_abs = np.abs(np.where(ref.empty, 0.0, ref.lse))
        return ForwardBound(o=fb.o + u * o_abs, lse=fb.lse + u * lse_abs, kind=kind,
                            precision=REFERENCE_PRECISION)
    bb, exact = _backward(q, k, v, do, scale, causal, window, mask, bias, REFERENCE_PRECISION, kind)
    return BackwardBound(dq=bb.dq + u * np.abs(exact[0]), dk=bb.dk + u * np.abs(exact[1]),
                         dv=bb.dv + u * np.abs(exact[2]), kind=kind, precision=REFERENCE_PRECISION)


# ----------------------------------------------------------------------------------------------
# Round-to-nearest accumulation of the backward's dots: Azuma over groups of identical products
# ----------------------------------------------------------------------------------------------


def _grouped_square_sum(p, coef, tol):
    """A bound on sum over G of (sum_{s in G} coef_s)^2, per row of the (M, n) arrays p (the products
    added at the steps), coef (each step's error bound, >= 0) and tol (how far the computed product can be
    from p), over every partition G of the steps into classes of products that are EQUAL as computed.

    Equal products have intervals [p - tol, p + tol] sharing a point, so each class lies among the
    intervals that meet the interval of any of its members: (sum_G c)^2 = sum_{s in G} c_s sum_{t in G} c_t
    <= sum_{s in G} c_s N_s, N_s = sum of c_t over the intervals t meeting s's (s included). Hence the bound
    R = sum_s c_s N_s: sum_s c_s^2 when no intervals meet, (sum_s c_s)^2 when all products are equal, and no
    chaining through long runs of nearby products (which at N_k = 16k merged whole rows into one group).

    One sorted sweep: t meets s iff lo_t <= hi_s and hi_t >= lo_s, and sum_{s,t} c_s c_t [hi_t < lo_s] is,
    with s and t swapped, sum_{s,t} c_s c_t (1 - [lo_t <= hi_s]); so with U = sum_{s,t} c_s c_t [lo_t <= hi_s]
    and C = sum_s c_s, R = U - (C^2 - U) = 2 U - C^2. U is the sweep of the lo_t (weights c_t) and the hi_s
    (weights c_s) in one stable sort, lo before hi among equal keys (a touching pair meets). R >= sum c^2
    (every interval meets itself) guards the cancellation in 2 U - C^2 (float64: relative error of R of the
    order n^2 2^-53 at worst, below 10^-3 for n <= 4 10^6 products)."""
    M, n = p.shape
    if n == 0:
        return np.zeros(M)
    step = max(1, (1 << 15) // n)  # blocks of rows whose temporaries stay in cache (measured ~3x faster)
    if M > step:
        return np.concatenate([_grouped_square_sum(p[r:r + step], coef[r:r + step], tol[r:r + step])
                               for r in range(0, M, step)])
    row = np.arange(M)[:, None]

    def gather(x, idx):  # x[r, idx[r, j]] through flat indices (cheaper than take_along_axis)
        return x.ravel()[idx + row * x.shape[-1]]

    # the sum is over the steps, so their order is free: in ascending order of p, lo and hi are nearly
    # sorted and the stable sort of their concatenation (timsort merges runs) costs little beside this one
    order = np.argsort(p, axis=-1, kind="stable")
    lo, hi, c = gather(p - tol, order), gather(p + tol, order), gather(coef, order)
    pos = np.argsort(np.concatenate([lo, hi], axis=-1), axis=-1, kind="stable")
    w = gather(np.concatenate([c, c], axis=-1), pos)
    is_lo = pos < n
    upto = np.cumsum(np.where(is_lo, w, 0.0), axis=-1)  # sum of c_t over the lo_t up to here
    U = np.where(is_lo, 0.0, w * upto).sum(axis=-1)
    C = c.sum(axis=-1)
    return np.maximum(2.0 * U - C * C, (c * c).sum(axis=-1))


def _accumulation_coefficients(p, block: int, ordered: bool):
    """Bound on |partial sum| at each step of an accumulation of the (..., n) products p through
    tiles of `block` (any order inside a tile, any blocking: the running sum before the tile plus the
    tile's absolute sum); with ordered=False (tile order unknown) sum |p| over the whole row."""
    ap = np.abs(p)
    if not ordered:
        return np.broadcast_to(ap.sum(-1, keepdims=True), p.shape)
    n = p.shape[-1]
    block = max(1, min(block, n))  # a tile wider than the row is the row (no padding to its width)
    T = -(-n // block)
    pad = T * block - n
    widths = [(0, 0)] * (p.ndim - 1) + [(0, pad)]
    tiles = np.pad(p, widths).reshape(*p.shape[:-1], T, block)
    tile_abs = np.abs(tiles).sum(-1)
    before = np.cumsum(tiles.sum(-1), axis=-1) - tiles.sum(-1)  # exact sum of the earlier tiles
    c = np.abs(before) + tile_abs
    return np.repeat(c, block, axis=-1)[..., :n]


def _rn_binade(M: _Model, fmt: str):
    """The working format whose half-ulp-of-the-binade step bound (_half_ulp) the round-to-nearest accumulations
    may use, or None (keep u |partial sum|): only where each step is ONE round-to-nearest fp32 operation on exact
    operands (no tensor core, M.u_dacc == M.u_w: an FMA per product, not the interpreter's measured form, which
    covers a rounded product too; M.u_in == 0: the products' errors are all in the caller's tolerances)."""
    one_rounding = not M.tensor_core and M.u_dacc == M.u_w and M.k_step == 1 and M.u_in == 0.0
    return fmt if fmt == "float32" and one_rounding else None


def _rn_accumulation_sq(S, other, tolS, u, block: int, ordered, chain: bool = False, fmt: str | None = None,
                        s64=None, visits: Visits | None = None):
    # u: the step error relative to |accumulator| + |products| (M.u_dacc: u_w for an FMA; the interpreter's
    # measured-form step error covers a rounded product too, as does the (1 + u) on the second bound)
    """The round-to-nearest accumulation of S @ other (S: (B, H, rows, n), other: (B, H, n, d)) through tiles of
    `block` along n (bounds.md sec. 8, "round-to-nearest accumulations"), charged deterministically: its variance
    proxy is 0 everywhere since 2026-11-27b (kept as an array, not None: _grad then charges the accumulation through
    det alone, not through its own n_rn model), and det holds every chain's error bound (below).

    Step s adds the product p_s = S_is other_sc and rounds: an error e_s with |e_s| <= u |partial sum| and
    |e_s| <= |p_s as computed| (round to nearest is no farther than the accumulator, itself a float)
    (<= u (|sum of the earlier tiles| + sum of the tile's |p|) when the tiles come in ascending order,
    `ordered` (rows,), else u sum |p|), and the sum's error is exactly sum_s e_s. (Until 2026-11-27b the steps whose
    products could be equal as computed formed groups, Azuma over the groups; coherent residues of distinct products
    broke that model, below.) chain (Precision.
    ieee_fma_chain: every fp32 ieee tl.dot(a, b, acc) is one ascending FMA chain continuing from acc, bench/
    probe_fma_acc.py): on ordered rows the partial sums are those of the products in their own order, so
    |partial sum as computed|_s <= X_s + E_{s-1}, X_s = |sum_{t<=s} p_t| + sum_{t<=s} tol_t (the exact partial
    sum of the exact products and the products' errors) and E_s <= (1 + gamma_n) u sum_{r<=s} X_r (the chain's
    roundings so far), the smaller of that and the tile bound charged.

    fmt (_rn_binade: one round-to-nearest fp32 FMA per step; None: the above): a step's error is also at most half
    an ulp of the binade of the value it rounds, |e_s| <= _half_ulp(x_up) for any x_up >= |T_s| (T_s = the computed
    partial sum before its rounding), and the step is charged the smaller of that and u X_s. The tile/order-free
    bounds X_s bound the EXACT partial sum of the exact products only, so x_up = X_s + W + E with W = sum_s tol_s
    (the products' errors) and E = u (C1 + n W) / (1 - n u) >= sum_r |e_r| (the roundings so far; C1 = sum_s X_s,
    _grad's remainder), as |T_s| <= X_s + W + E; under the chain X_s already bounds |T_s| (the sum only adds).
    E >= u X_s also covers the float64 evaluation of X_s (relative error ~n 2^-53). Charging e_s whole instead of
    its first order delta_s S_s leaves the remainder a sub-sum of the nonlinear terms that _grad's rem bounds
    (bounds.md sec. 8), so rem stays as it is.

    On the data (chain, fmt "float32" and s64, a bound on the float64 S's own error per entry): on the ordered rows the
    chain's roundings are not modelled but evaluated (_rn_chain_on_data: the summands S_is other_sc within tolS + s64
    times |other_sc|), their bound returned as det and their proxy 0. Coherent residues (equal residues of distinct
    products, bench/adversaries/constant_residue_rows.py) exceeded the grouped model 7.5x. Returns, per
    (B, H, rows, d): the proxy (0), the sum over the steps of the partial sum bounds X_s (C1 of _grad's remainder),
    and det.

    Since 2026-11-27b no chain is charged the grouped model: where it is not evaluated on the data, det holds its worst
    case sum_s c_s and the proxy is 0 (coherent residues of distinct products exceeded the model 3.6x in the "any" order
    of a third-party fp32 kernel, bench/adversaries/constant_residue_rows.py; bounds.md sec. 8).

    visits (proofs/bounds/visits.py): each row's visiting order, in place of `ordered` (then visits.known): S, tolS,
    s64 and other are given in their own order and taken into each row's (the kernel walks every outer block's tiles
    its own way: heads with masked entries, bounds.md sec. 8); rows whose order is not known take the order-free
    coefficients (u sum |p| at every step) in that worst case."""
    B, H, R = S.shape[:3]
    proxy = np.zeros((B, H, R, other.shape[-1]))  # nothing modelled as random (docstring)
    partial = np.zeros_like(proxy)
    det = np.zeros_like(proxy)
    on_data = chain and fmt == "float32" and s64 is not None
    oT = np.swapaxes(other, -1, -2)  # (B, H, d, n)
    for r, p, S_r, oT_r, vr in _ordered_products(S, oT, visits):
        known = ordered if vr is None else vr.known
        ordr = np.broadcast_to(np.asarray(known)[..., r] if vr is None else known, S.shape[:2] + (r.stop - r.start,))
        take = (lambda x: x[:, :, r]) if vr is None else (lambda x: vr.take(x[:, :, r]))
        with np.errstate(invalid="ignore"):  # inf * 0 (a vacuous dS bound times k = 0): any value
            tol = take(tolS)[:, :, :, None, :] * np.abs(oT_r)
        tol = np.where(np.isnan(tol), np.inf, tol)
        # the steps' bounds (_rn_step_bounds) in two parts: the partial sums' C1 always; the steps' own bounds only
        # where the worst case reads them (rows whose chain is evaluated on the data do not)
        coef, partial[:, :, r] = _rn_partial_bounds(p, tol, u, block, ordr[..., None, None], chain)
        shape = p.shape[:-1]
        o_r = np.zeros(shape, dtype=bool)
        if on_data and ordr.any():
            with np.errstate(invalid="ignore"):
                w = tol + take(s64)[:, :, :, None, :] * np.abs(oT_r) + 2.0**-52 * np.abs(p)
            w = np.where(np.isnan(w), np.inf, w)
            chain_det = _rn_chain_on_data(p, w, u)
            o_r = ordr[..., None] & np.isfinite(chain_det)
            det[:, :, r] = np.where(o_r, chain_det, 0.0)
        # every chain not evaluated on the data: the worst case sum_s c_s (|sum_s e_s| <= sum_s |e_s|), in the tile
        # order where it is known (c_s from the partial sums), order-free elsewhere. Not the grouped model (Azuma over
        # groups of equal products): coherent residues of distinct products exceed it in any order
        # (bench/adversaries/constant_residue_rows.py: 7.5x in our kernel's order, 3.8x masked; a third-party fp32
        # kernel's "any" order, which contains ours, 3.6x at N_q 4096, 2.8x at 16384; bounds.md sec. 8)
        worst = ~o_r
        if not worst.any():
            continue
        coef = _rn_step_refine(coef, partial[:, :, r], S_r[:, :, :, None, :] == 0.0, p, tol, u, fmt)
        # (the float64 sum of L nonnegative bounds: relative error <= gamma_L(2^-53))
        total = coef.sum(axis=-1) * (1.0 + float(gamma(p.shape[-1], 2.0**-53)))
        det[:, :, r] = np.where(worst, total, det[:, :, r])
    return proxy, partial, det


def _ordered_products(S, oT, visits: Visits | None):
    """(r, p, S_r, oT_r, visits_r) over blocks of the rows of S (B, H, R, n) (_product_chunks): the products
    p = S_ir oT_cr (B, H, rows, d, L) in each row's visiting order (visits, proofs/bounds/visits.py; None: the axis as
    it is), S_r the rows' S (B, H, rows, L) and oT_r the column operand (B, H, rows|1, d, L) in that order."""
    if visits is None:
        for r, p in _product_chunks(S, oT):
            yield r, p, S[:, :, r], oT[:, :, None], None
        return
    L = visits.take_columns(oT[..., :1, :]).shape[-1]
    R = S.shape[-2]
    step = max(1, (1 << 16) // max(1, L * oT.shape[-2]))
    for r0 in range(0, R, step):
        r = slice(r0, min(R, r0 + step))
        vr = visits.rows(r)
        S_r, oT_r = vr.take(S[:, :, r]), vr.take_columns(oT)
        yield r, S_r[:, :, :, None, :] * oT_r, S_r, oT_r, vr


def _rn_step_bounds(zero, p, tol, u, block: int, ordered, chain: bool = False, fmt: str | None = None):
    """(c, C1) of _rn_accumulation_sq for the products p (..., n) added in that order (the last axis), tol their
    errors as computed, `zero` where the product is exactly 0 as computed (its operand is), `ordered` (broadcast
    against p) whether the tiles of `block` come in ascending order: c (..., n) each step's error bound (its
    docstring), C1 (...) the sum over the steps of the partial-sum bounds X_s."""
    coef, partial = _rn_partial_bounds(p, tol, u, block, ordered, chain)
    return _rn_step_refine(coef, partial, zero, p, tol, u, fmt), partial


def _rn_partial_bounds(p, tol, u, block: int, ordered, chain: bool = False):
    """_rn_step_bounds's first part: (u X_s, C1), the steps' partial-sum bounds times u and their sum over the steps
    (C1, which _grad's remainder reads whether or not the steps' roundings are then evaluated on the data)."""
    n = p.shape[-1]
    all_ordered = bool(np.all(ordered))
    coef_o = u * _accumulation_coefficients(p, block, True)
    if chain:  # the chain's own partial sums (docstring), where smaller than the tile bound
        with np.errstate(invalid="ignore"):
            X = np.abs(np.cumsum(p, axis=-1)) + np.cumsum(tol, axis=-1)
            # the roundings so far: E_s <= u sum_{r<=s} (X_r + E_{r-1}) <= (1 + gamma_n) u sum_{r<=s} X_r
            cs = X + (1.0 + gamma(n, u)) * u * np.cumsum(X, axis=-1)
        coef_o = np.fmin(coef_o, u * cs)
    # (the order-free bound only where some row's tiles are not in order: every row in order reads coef_o alone)
    coef = coef_o if all_ordered else np.where(ordered, coef_o, u * _accumulation_coefficients(p, block, False))
    coef = np.broadcast_to(coef, np.broadcast_shapes(coef.shape, np.shape(ordered)))
    return coef, coef.sum(-1) / u


def _rn_step_refine(coef, partial, zero, p, tol, u, fmt: str | None):
    """_rn_step_bounds's second part: each step's bound c_s from its partial-sum bound (_rn_partial_bounds), with
    half an ulp of the binade (fmt), 0 for an exact zero product and at most |p_s| + tol_s."""
    n = p.shape[-1]
    if fmt is not None:  # half an ulp of the binade of |T_s| <= X_s + W + E (docstring)
        with np.errstate(invalid="ignore", over="ignore"):
            W = tol.sum(-1, keepdims=True)
            E = u * (partial[..., None] + n * W) / (1.0 - n * u) if n * u < 1.0 else np.inf
            up = coef / u + W + E
        coef = np.fmin(coef, _half_ulp(np.where(np.isnan(up), np.inf, up), fmt))
    coef = np.where(p == 0.0, np.where(zero, 0.0, coef), coef)
    # round to nearest moves fl(acc + p) no farther than acc itself is: |e_s| <= |p_s as computed|
    return np.fmin(coef, (1 + u) * (np.abs(p) + tol))


def _rn_chain_on_data(xm, xw, u: float, enclosure: bool = False):
    """A bound on |sum_s e_s| for fp32 round-to-nearest chains along the last axis (bounds.md sec. 8, "The
    accumulation chains on the data"): acc_0 = 0, acc_s = RN(acc_{s-1} + x_s) = acc_{s-1} + x_s + e_s, one rounding
    per step (an FMA: the product x_s = a_s b_s is exact), the summand x_s anywhere in [xm_s - xw_s, xm_s + xw_s]
    (xw must hold the float64 evaluation of xm). Not a model of round to nearest: each step's error is evaluated
    from the data where its binade (and residue) are certain, else charged its worst case.

    T_s = acc_{s-1} + x_s, the value step s rounds, is within D_s = W_s + slack_s + E_{s-1} of Y_s = sum_{k<=s}
    xm_k (float64 cumsum), W_s = sum_{k<=s} xw_k, slack_s = (gamma_{n+1}(2^-53) + 2^-48) sum_{k<=s} |xm_k| (the
    cumsum's own error), E_s >= sum_{k<=s} |e_k|: |e_k| <= u |T_k| <= u (Z_k + E_{k-1}), Z_k = |Y_k| + W_k +
    slack_k, so by induction E_s <= (1 + u)^s u sum_{k<=s} Z_k <= (1 + 2 n u) u sum_{k<=s} Z_k (n u <= 1).
    |T_s| in [lo, hi] = |Y_s| -+ D_s. Step s:
    - x_s = 0 exactly (xm = xw = 0): T_s = acc_{s-1}, a float: e_s = 0;
    - binade: lo, hi in one binade [2^e, 2^(e+1)), e >= -126: |e_s| <= g / 2, g = 2^(e-23), and <= |x_s| (RN is no
      farther than acc_{s-1}, a float: lo >= 2^-126, no flush);
    - residue: moreover acc_{s-1} on g's grid (|acc_{s-1}| >= |Y_{s-1}| - D_s >= 2^e, or every earlier summand
      exactly 0: acc = 0) and x_s / g's interval inside one (k - 1/2, k + 1/2): e_s = g (round(x_s / g) - x_s / g)
      in ce +- he (forward._rn_residue); these steps enter signed, |sum ce| + sum he;
    - otherwise: T_s normal (lo >= 2^-126): |e_s| <= min(half an ulp of hi's binade, |x_s|); else also a subnormal
      T_s rounded (2^-150) or flushed (|T_s| <= min(hi, 2^-126)).
    Sums of nonnegative terms carry 2^-28 relative for their float64 evaluation (< 2^24 terms). Returns (...,);
    inf where n u > 1 or the data are not finite.

    enclosure: (centre, radius) with the chain's final acc_n in centre +- radius instead. A residue step adds exactly
    x_s + e_s = g round(x_s / g) = xm_s + ce_s to acc, whatever x_s in its interval (its e_s moves against x_s); any
    other step adds x_s + e_s within xm_s +- (xw_s + its charge). centre = sum_s xm_s + sum_residue ce_s (ce_s exact:
    a power of two times an exact difference), its float64 sums within (gamma_{n+1}(2^-53) + 2^-48)(sum |xm| + sum
    |ce|), which the radius holds."""
    from .forward import _rn_residue

    shape, n = xm.shape[:-1], xm.shape[-1]
    xm2 = np.ascontiguousarray(xm, dtype=np.float64).reshape(-1, n)
    xw2 = np.ascontiguousarray(np.broadcast_to(xw, xm.shape), dtype=np.float64).reshape(-1, n)
    out = np.zeros(len(xm2))
    centre = np.zeros(len(xm2))
    if n == 0:
        return (out.reshape(shape), out.reshape(shape)) if enclosure else out.reshape(shape)
    if n * u > 1.0:
        return (np.zeros(shape), np.full(shape, np.inf)) if enclosure else np.full(shape, np.inf)
    g64 = float(gamma(n + 1, 2.0**-53)) + 2.0**-48
    grow = 1.0 + 2.0 * n * u
    ev = 1.0 + 2.0**-28
    tiny = 2.0**-126
    step = max(1, (1 << 15) // n)  # rows per pass: ~2^15 steps, temporaries in cache (1.9x faster than 2^20)
    with np.errstate(invalid="ignore", over="ignore"):
        for r0 in range(0, len(xm2), step):
            x, w = xm2[r0:r0 + step], xw2[r0:r0 + step]
            ax = np.abs(x)
            xmax = ax + w
            Y = np.cumsum(x, axis=-1)
            aY = np.abs(Y)
            slack = g64 * np.cumsum(ax, axis=-1)
            W = np.cumsum(w, axis=-1) * ev
            Z = aY + W + slack
            E = grow * u * np.cumsum(Z, axis=-1) * ev  # E_s >= sum_{k<=s} |e_k|
            D = W + slack
            D[:, 1:] += E[:, :-1]
            lo = (aY - D) * (1.0 - 2.0**-50)
            hi = (aY + D) * (1.0 + 2.0**-50)
            blo = lo.view(np.int64) >> 52  # sign and exponent field: equal fields = one binade
            bhi = hi.view(np.int64) >> 52
            binade = (blo == bhi) & (blo >= 1023 - 126) & (blo < 2047)  # positive, normal, finite
            half_g = ((np.where(binade, blo, 1023 + 24) - 24) << 52).view(np.float64)  # g / 2 = 2^(e - 24)
            # half an ulp of hi's binade (common._half_ulp(hi, "float32"), read off the exponent field computed above):
            # hi >= 2^-126 finite: 2^(e - 24); 0 < hi < 2^-126: 2^-126; inf: inf; 0 or NaN: 0
            hnormal = (bhi >= 1023 - 126) & (bhi < 2047)
            hu = np.where(hnormal, ((np.where(hnormal, bhi, 1023 + 24) - 24) << 52).view(np.float64),
                          np.where(hi > 0, np.where(np.isinf(hi), np.inf, tiny), 0.0))
            other = np.where(lo >= tiny, np.minimum(hu, xmax),
                             np.maximum(np.minimum(hu, xmax), np.minimum(hi, tiny)))
            charge = np.where(binade, np.minimum(half_g, xmax), other)
            charge = np.where((x == 0.0) & (w == 0.0), 0.0, charge)
            charge = np.where(np.isnan(charge), np.inf, charge)
            # the residue: x's interval narrower than a grid step, the previous acc on the grid (whole-array masks,
            # not gathered indices: most steps qualify on real data)
            # acc = 0 before step s: every earlier summand exactly 0 (xm = xw = 0), s <= the row's first nonzero
            # (counted, not read off a float64 cumsum, which a large summand after a tiny one would round to 0)
            nz = xmax != 0.0
            first = np.where(nz.any(axis=-1), nz.argmax(axis=-1), n)
            prev = np.empty_like(aY)  # |Y_{s-1}| - D_s (Y_0 = 0)
            prev[:, 0] = 0.0
            prev[:, 1:] = aY[:, :-1]
            prev -= D
            residue = binade & (w + 2.0**-52 * ax < half_g)
            residue &= (np.arange(n) <= first[:, None]) | (prev * (1.0 - 2.0**-50) >= half_g * 2.0**24)
            known, ce, he = _rn_residue(x, (w + 2.0**-52 * ax) * (1.0 + 2.0**-50), half_g)
            residue &= known
            total = charge.sum(axis=-1)
            csum = np.zeros(len(x))
            extra = np.zeros(len(x))
            abs_ce = np.zeros(len(x))
            if residue.any():
                # the step's charge replaced by its half-width; the centre enters signed (summed in row-major order)
                ci = np.nonzero(residue)[0]
                ce = ce[residue]
                extra = np.bincount(ci, weights=he[residue] - charge[residue], minlength=len(x))
                csum = np.bincount(ci, weights=ce, minlength=len(x))
                abs_ce = np.bincount(ci, weights=np.abs(ce), minlength=len(x))
                extra = extra + 2.0**-28 * abs_ce
            finite = np.isfinite(Y[:, -1]) & np.isfinite(W[:, -1])
            if enclosure:  # the unknown steps' charges and widths; the residue steps' half-widths cancel
                rad = np.where(residue, 0.0, charge + w).sum(axis=-1) * ev + g64 * (ax.sum(axis=-1) + abs_ce)
                centre[r0:r0 + step] = Y[:, -1] + csum
                out[r0:r0 + step] = np.where(finite, rad, np.inf)
            else:
                out[r0:r0 + step] = np.where(finite, (np.abs(csum) + extra + total) * ev, np.inf)
    if enclosure:
        return centre.reshape(shape), out.reshape(shape)
    return out.reshape(shape)


def _delta_accumulation(F: _Forward, M: _Model, dof, kf, vf, sc, d: int, has_bias: bool, precision,
                        head_full=None):
    """(variance proxy, det, partial) of the first-order error that the kernel's round-to-nearest P.V accumulation
    (one rounding per product, tiles of block_k) and its rescales acc * alpha put into
    Delta_i = sum_c dO_ic O_ic (rows of F), in place of the split along O (bounds.md sec. 8).

    Accumulation: each step's error bound c_s = min(u |partial sum|, |product as computed|) in the final
    normalization (_accumulation_coefficients of A_j v_jc: the tiles' partial sums where the order is known, else
    sum |A v|), weighted by |dO_c| and summed worst case over the steps and columns into det; the variance proxy is
    0. (Until 2026-11-27b: Azuma over groups of equal products, which coherent residues of distinct products exceeded
    4.2x, bench/adversaries/delta_residue.py.) Rescales (_delta_rescales): one rounding u |acc| per tile that can move
    the running max
    (exp2(0) = 1 exactly otherwise), charged worst case (equal alphas round alike); with the tile order known
    (unmasked rows) |acc_c| <= the share of (A|V|)_c visited before that tile and only the tiles after which
    the max can still move count (forward._tile_changes), else u (A|V|)_c times the order-free count.
    partial (rows, dv): per column, the sum over the steps of the partial-sum bounds (C1 of
    _delta_accumulation_remainder)."""
    A0, vis0, s0, m = F.A, F.vis, F.s, F.m
    rows, Nk0 = A0.shape[-2:]
    bk = precision.block_k  # the forward's key tiles, which computed O (not the dQ loop's, Precision.block_k_dq)
    lgf = _logit_errors(F.qf, kf, s0, m, vis0, sc, M, d, has_bias, qk=F.parts.qk)
    # the keys in the kernel's visiting order (Precision.tile_order; our kernel's ragged tile first, padded at the
    # front with invisible zero keys to a full tile, _visiting): the running max, the kernel's P and the partial
    # sums are those of that order; "any" (flash-attn visits key blocks from the last one): order-free
    idx = _visiting(Nk0, bk, precision.tile_order)
    ordered = (M.recursive and idx is not False) & vis0.all(axis=-1) & _heads_unmasked(head_full)
    A, vis, wc = (_take_visiting(x, idx, -1) for x in (A0, vis0, lgf.wc))
    vf_v = _take_visiting(vf, idx, -2)
    Nk = A.shape[-1]
    with np.errstate(invalid="ignore", over="ignore"):
        e_run = np.max(np.where(vis, wc, 0.0), axis=-1, keepdims=True)  # error of the computed running max
        rel = np.where(vis, np.exp(wc + e_run) * (1 + M.eps_exp) * (1 + M.u_pv) - 1.0, 0.0)
    dvn = vf.shape[-1]
    absdo = np.abs(dof)
    var = np.zeros(A.shape[:-1])  # no part modelled as random (below)
    acc_det = np.zeros(A.shape[:-1])
    partial = np.zeros(A.shape[:-1] + (dvn,))  # sum over the steps of the partial-sum bounds, per column
    step = max(1, (1 << 21) // max(1, Nk * dvn))
    for r0 in range(0, rows, step):
        r = slice(r0, min(rows, r0 + step))
        vT = np.swapaxes(vf_v, -1, -2)[:, :, None]  # (B, H, 1, dv, Nk)
        normalized = A[:, :, r, None, :] * vT
        coef = _accumulation_coefficients(normalized, bk, True)
        coef_u = _accumulation_coefficients(normalized, bk, False)
        coef = np.where(ordered[:, :, r, None, None], coef, coef_u)
        partial[:, :, r] = np.where(vis[:, :, r, None, :], coef, 0.0).sum(-1)
        # |e_s| <= min(u |partial sum|, |product as computed|) (the accumulator itself is a float)
        with np.errstate(invalid="ignore"):
            tol_n = (A * rel)[:, :, r, None, :] * np.abs(vT)
        tol_n = np.where(np.isnan(tol_n), np.inf, tol_n)
        coef = np.fmin(M.u_dacc * coef, (1 + M.u_dacc) * (np.abs(normalized) + tol_n))
        coef = absdo[:, :, r, :, None] * np.where(vis[:, :, r, None, :], coef, 0.0)
        # the worst case sum over the columns and steps of |dO_c| c_s, not the grouped model (Azuma over groups of
        # equal products P_j v_jc): coherent residues of distinct products round alike at every step of O's chain
        # (V's column of constant_residue_dq.coherent_terms under uniform rows: 4.2x over at N_k 4096, read through
        # dQ's row-common Delta error; bounds.md sec. 8). The float64 sum of nonnegative terms: gamma(n, 2^-53).
        acc_det[:, :, r] = coef.sum(axis=(-2, -1)) * (1.0 + float(gamma(dvn * Nk, 2.0**-53)))
    return var, acc_det + _delta_rescales(A0, vis0, s0, lgf.wc, absdo, vf, bk, precision.tile_order, M), partial


def _delta_rescales(A0, vis0, s0, wc, absdo, vf, bk: int, tile_order: str, M: _Model):
    """The rescales' part of _delta_accumulation's det: one rounding u |acc| per tile that can move the running max
    (exp2(0) = 1 exactly otherwise), charged worst case (equal alphas round alike), weighted by |dO_c|."""
    from .forward import _keys_in_order, _rescale_changes, _tile_changes, _tile_order

    order = _tile_order(A0.shape[-1], bk, tile_order)
    if order is not None and vis0.all():
        # the visiting order known (unmasked rows, as forward._l_sum_error): the rescale at tile t rounds
        # acc_c * alpha, |acc_c| <= the share of (A|V|)_c visited before t, only where alpha can differ from 1
        change = _tile_changes(s0, wc, vis0, order, M.alpha_exact_at_zero)
        prefix = np.cumsum(np.add.reduceat(order.apply(A0)[..., None, :] * np.swapaxes(
            _keys_in_order(np.abs(vf), order), -1, -2)[:, :, None], order.starts, axis=-1), axis=-1)
        before = (change[..., None, 1:] * prefix[..., :-1]).sum(-1)  # (B, H, rows, dv)
        return M.u_w * (absdo * before).sum(-1)
    later = _rescale_changes(s0, wc, vis0, bk, M.alpha_exact_at_zero)
    n_change = np.max(np.where(vis0, later, 0.0), axis=-1) + (0.0 if M.alpha_exact_at_zero else 0.0)
    return M.u_w * n_change * (absdo * (A0 @ np.abs(vf))).sum(-1)


def _band_visibility(Nq: int, Nk: int, causal, window):
    """(1, 1, Nq, Nk): the band's visibility alone (causal, window: no dense mask), which decides our kernel's partial
    tiles under Precision.tile_lists "band" (proofs/bounds/visits.py)."""
    from flashcheck.reference.masks import visibility

    return visibility(1, 1, Nq, Nk, causal=causal, window=window)


def _heads_unmasked(head_full):
    """Per row (..., 1): whether the row's head has nothing masked (None: the caller vouches for it)."""
    return True if head_full is None else head_full[..., 0]


def _keys_shared_visits(Nk: int, block_k: int, tile_order: str, vis, head_full, recursive: bool = True) -> Visits:
    """The dQ chains' order where the caller states no per-block one: the stated order of every row (_visiting),
    known on rows that see every key of a head with nothing masked (`head_full`, _heads_unmasked), for a recursive
    accumulation."""
    idx = _visiting(Nk, block_k, tile_order)
    return shared_visits(Nk, block_k, tile_order,
                         (recursive and idx is not False) & vis.all(axis=-1) & _heads_unmasked(head_full))


def _rows_shared_visits(block_q: int, tile_order: str, vis, group: int, recursive: bool = True) -> Visits:
    """The dK/dV chains' order (one per key through the GQA group's heads, head g's rows at g * Nq) where the caller
    states no per-block one: the stated order (_visiting), known on kv heads where nothing of the group is masked
    (vis (B, Hq, Nq, Nk)), for a recursive accumulation."""
    B, Hq, Nq, Nk = vis.shape
    Hkv = Hq // group
    idx = _visiting(Nq, block_q, tile_order, group)
    known = (recursive and idx is not False) & vis.reshape(B, Hkv, group * Nq, Nk).all(axis=(-2, -1))
    return shared_visits(Nq, block_q, tile_order, np.broadcast_to(known[..., None], (B, Hkv, Nk)), group)


def _dq_accumulation(M: _Model, kind: str, dS, kf, tolS, vis, block_k: int, head_full=None,
                     tile_order: str = "any", fmt: str | None = None, s64=None, visits: Visits | None = None,
                     tile_chain: bool = False):
    """(acc_sq, partial, tc_steps, acc_det) of _grad for the accumulation dQ = dS @ K through key tiles of block_k: round to
    nearest grouped by products that can be equal as computed (probabilistic, no tensor core; tolS bounds
    the error of dS as computed), tensor-core steps from the partial sums (recursive tensor cores); None
    where the model has neither. The tiles come in the kernel's order: `visits` (proofs/bounds/visits.py dq_visits,
    these rows': every query block's own order where Precision.block_q_dq states the blocks, masked heads included;
    bounds.md sec. 8), or else the stated order for every row (Precision.tile_order, _visiting: our kernel's ragged
    tile first) where nothing of the head is masked (`head_full`, (..., 1, 1): a partial tile of a row's query block
    is visited first even when that row sees every key); "any" (a kernel that does not state it: flash-attn's dQ is
    atomically added over key blocks in no fixed order): the order-free bounds. s64 (the float64 dS's own error per
    entry): the fp32 FMA chain's roundings on the data where the order is known (acc_det, _rn_accumulation_sq).
    tile_chain (a blocked dQ stated by Precision.dq_accumulation, the fused dQ; M not recursive): each tile of block_k
    keys is one chain from zero, then the tiles' sums are added into the accumulator in ANY order; _blocked_tile_steps
    bounds its steps order-free from the tiles' own sums, as tc_steps on tensor cores, else (the probabilistic kind)
    times u_dacc as acc_det, nothing random (the per-product steps of _rn_accumulation_sq would not count the tiles'
    additions, nor is each such addition within the |product| its cap reads)."""
    if tile_chain and not M.recursive:
        steps = _blocked_tile_steps(dS, kf, block_k, M.k_step)
        if M.tensor_core:
            return None, None, steps, None
        if kind != "probabilistic":
            return None, None, None, None
        return np.zeros_like(steps), None, None, M.u_dacc * steps
    if visits is None:
        visits = _keys_shared_visits(kf.shape[-2], block_k, tile_order, vis, head_full, M.recursive)
    acc_sq = partial = tc_steps = acc_det = None
    if kind == "probabilistic" and not M.tensor_core:
        acc_sq, partial, acc_det = _rn_accumulation_sq(dS, kf, tolS, M.u_dacc, block_k, None, M.fma_logits,
                                                       _rn_binade(M, fmt), s64, visits)
    if M.tensor_core and M.recursive:
        tc_steps = np.concatenate([_tensor_core_steps(p, block_k, M.k_step, vr.known[..., None])
                                   for _, p, _, _, vr in _ordered_products(dS, np.swapaxes(kf, -1, -2), visits)],
                                  axis=2)
        partial = tc_steps  # each step's |accumulator| + sum |products| bound: C1 of the step model
    return acc_sq, partial, tc_steps, acc_det


def _blocked_tile_steps(S, other, block: int, k_step: int):
    """(..., R, c): a bound on sum over the roundings of a blocked accumulation of S @ other (S (..., R, n), other
    (..., n, c)) of the exact value each rounds, to first order (the quantity a step error u_dacc multiplies, as
    _tensor_core_steps'), whatever the order of the tiles: each tile of `block` entries is one chain from zero in steps
    of k_step products, ceil(min(n, block) / k_step) steps each <= the tile's sum |p|; then T = ceil(n / block)
    additions of the tiles' sums into the accumulator, each rounding a sum of some of the tiles' sums, <= sum_j |T_j|
    (T_j the exact sum of tile j; the first addition, into a zeroed accumulator, is exact: counted all the same). So
    ceil(min(n, block) / k_step) sum |p| + T sum_j |T_j| <= _dot_steps(tile_chain=True) sum |p| (|T_j| <= its sum |p|).
    The float64 tile sums err by <= gamma_{block}(2^-53) of their sum |p| (added), the sums of absolute values by
    gamma_{n + T + 1}(2^-53) (the factor)."""
    n = S.shape[-1]
    block = max(1, min(block, n))
    T = -(-n // block)
    pad = T * block - n
    base = np.abs(S) @ np.abs(other)
    Sp = np.pad(S, [(0, 0)] * (S.ndim - 1) + [(0, pad)])
    Op = np.pad(other, [(0, 0)] * (other.ndim - 2) + [(0, pad), (0, 0)])
    Sp = np.moveaxis(Sp.reshape(*S.shape[:-1], T, block), -2, -3)  # (..., T, R, block)
    Op = Op.reshape(*other.shape[:-2], T, block, other.shape[-1])  # (..., T, block, c)
    tiles = np.abs(Sp @ Op).sum(axis=-3) + float(gamma(block, 2.0**-53)) * base  # sum_j |T_j| (..., R, c)
    return (-(-min(n, block) // k_step) * base + T * tiles) * (1.0 + float(gamma(n + T + 1, 2.0**-53)))


def _rows_accumulation(M: _Model, S, other, tolS, vis, block_q: int, group: int, tile_order: str = "any",
                       fmt: str | None = None, s64=None, visits: Visits | None = None):
    """acc_sq of _grad for the accumulation over the query rows of S^T @ other (dK: dS^T Q; dV: P^T dO) in
    the dK/dV pass, the round-to-nearest model of dQ's over the keys (_rn_accumulation_sq) on the other axis.
    S, tolS, vis: (B, Hq, Nq, Nk); other: (B, Hq, Nq, c). One accumulator per key runs through the query
    heads of its GQA group in turn (head g, then its query tiles of block_q), so the group's rows are one
    contraction of group * Nq products in that order. The query tiles in the kernel's order: `visits`
    (proofs/bounds/visits.py rows_visits: every key block's own, partial tiles first, where Precision.block_k_dkdv
    states the blocks; bounds.md sec. 8), or else the stated order (Precision.tile_order, as its key tiles: our
    kernel's ragged query tile first, then the full ones, _visiting) only when no entry of the group is masked: a
    masked entry anywhere in a tile makes it partial, and partial tiles come first (kernels/triton_bwd.py); otherwise,
    or "any", the order-free coefficient u sum |p|. s64: the float64 S's own error per entry (the chain on the data,
    _rn_accumulation_sq). Returns (B, Hq, Nk, c) three times: the kv head's proxy, its partial-sum total C1 and its
    det (the chain on the data), spread evenly over its query heads (the callers sum them, _kv)."""
    B, Hq, Nq, Nk = S.shape
    Hkv = Hq // group

    def heads(x):  # (B, Hq, Nq, ...) -> (B, Hkv, group * Nq, ...): head g's rows at g * Nq ...
        return x.reshape(B, Hkv, group * Nq, *x.shape[3:])
    if visits is None:
        visits = _rows_shared_visits(block_q, tile_order, vis, group, M.recursive)
    s64 = None if s64 is None else np.swapaxes(heads(s64), -1, -2)
    acc, partial, det = _rn_accumulation_sq(np.swapaxes(heads(S), -1, -2), heads(other),
                                            np.swapaxes(heads(tolS), -1, -2), M.u_dacc, block_q, None, M.fma_logits,
                                            _rn_binade(M, fmt), s64, visits)
    return tuple(np.repeat(x / group, group, axis=1) for x in (acc, partial, det))


def _rows_tensor_core(M: _Model, S, other, vis, block_q: int, group: int, n_steps: int, tile_order: str = "any",
                      visits: Visits | None = None):
    """tc_steps of _grad for the tensor-core accumulation over the query rows of S^T @ other (dK: dS^T Q, dV:
    P^T dO) in the dK/dV pass: sum over the MMA steps of (|accumulator| + the step's sum |p|) bounded from the
    partial sums of the query tiles in the kernel's order (_tensor_core_steps, as dQ's over the keys) where the rows'
    order is known (`visits` or nothing of the kv head's group masked under a known Precision.tile_order:
    _rows_accumulation's condition), else n_steps sum |p| (n_steps: the accumulator's MMA steps through the group).
    (B, Hq, Nk, c): the kv head's value spread evenly over its query heads (the callers sum them, _kv)."""
    B, Hq, Nq, Nk = S.shape
    Hkv = Hq // group

    def heads(x):  # (B, Hq, Nq, ...) -> (B, Hkv, group * Nq, ...)
        return x.reshape(B, Hkv, group * Nq, *x.shape[3:])
    if visits is None:
        visits = _rows_shared_visits(block_q, tile_order, vis, group, M.recursive)
    St, oT = np.swapaxes(heads(S), -1, -2), np.swapaxes(heads(other), -1, -2)  # (B, Hkv, Nk, gNq), (B, Hkv, c, gNq)
    unordered = n_steps * (np.abs(St) @ np.abs(np.swapaxes(oT, -1, -2)))
    steps = np.concatenate([_tensor_core_steps(p, block_q, M.k_step, True)
                            for _, p, _, _, _ in _ordered_products(St, oT, visits)], axis=2)
    out = np.where(np.broadcast_to(visits.known[..., None], unordered.shape), np.minimum(steps, unordered), unordered)
    return np.repeat(out / group, group, axis=1)


def _product_chunks(S, oT):
    """(rows, p) over blocks of the rows of S (B, H, R, n): the products p = S_ir oT_cr as (B, H, rows,
    d, n), d = oT.shape[-2], blocks small enough for a few such arrays in memory."""
    R, n = S.shape[-2:]
    step = max(1, (1 << 16) // max(1, n * oT.shape[-2]))
    for r0 in range(0, R, step):
        r = slice(r0, min(R, r0 + step))
        yield r, S[:, :, r, None, :] * oT[:, :, None, :, :]


def _visiting(n: int, block: int, tile_order: str, repeats: int = 1):
    """Indices that put an axis of `repeats` runs of n entries (a GQA group's query heads, one after the other) into
    the order our kind of kernel visits their tiles of `block` (Precision.tile_order), each run's ragged tile padded
    at the front with -1 (a zero) to a full tile so that every tile is `block` wide ("partial_first": the ragged tile
    first, then the full ones ascending; "ascending" with repeats 1: None, the axis as it is, the ragged tile last);
    False for "any" (no order known: the order-free bounds)."""
    if tile_order == "any":
        return False
    full, tail = divmod(n, block)
    if tail == 0 or repeats == 1 and (tile_order == "ascending" or full == 0):
        return None  # every tile full, or one run whose ragged tile is last (the callees pad at the end)
    pad = -np.ones(block - tail, dtype=np.int64)
    run = (np.r_[pad, np.arange(full * block, n), np.arange(full * block)] if tile_order == "partial_first" and full
           else np.r_[np.arange(n), pad])  # a lone ragged tile is padded where it ends, as "ascending"
    return np.concatenate([np.where(run < 0, -1, run + g * n) for g in range(repeats)])


def _take_visiting(x, idx, axis: int):
    """x with `axis` taken at idx (_visiting), -1 reading a zero; x itself for idx None."""
    if idx is None or idx is False:
        return x
    axis = axis % x.ndim
    zero = np.zeros(x.shape[:axis] + (1,) + x.shape[axis + 1:], dtype=x.dtype)
    return np.take(np.concatenate([x, zero], axis=axis), np.where(idx < 0, x.shape[axis], idx), axis=axis)


def _block_tc_steps(A, vf, abs_do, blocks, r: slice, block_k: int, k_step: int):
    """sum_c |dO_c| (the tensor-core steps of the P.V chain A_j v_jc, _tensor_core_steps) for the rows r of A (B, H,
    rows, Nk), each row in its forward query block's visiting order (blocks: forward._query_block_orders, the
    tiles the block visits, partial ones first, each one MMA of block_k keys: a ragged or masked tile's missing
    products are exact zeros, its k steps still counted); inf on rows of a block with no stated order."""
    out = np.full(A.shape[:-1], np.inf)
    for a0, a1, order in blocks:
        lo, hi = max(a0, r.start), min(a1, r.stop)
        if lo >= hi or order is None:
            continue
        Ao = order.apply(A[:, :, lo - r.start:hi - r.start])  # (B, H, rows, L): the visited keys in order
        vT = np.swapaxes(_forward_module._keys_in_order(vf, order), -1, -2)  # (B, H, dv, L)
        starts = order.starts
        per_tile = -(-block_k // k_step)  # MMA steps of one tile
        L, T = Ao.shape[-1], len(order.sizes)
        step = max(1, (1 << 16) // max(1, L * vT.shape[-2]))
        for i0 in range(0, hi - lo, step):
            i1 = min(hi - lo, i0 + step)
            p = Ao[:, :, i0:i1, None, :] * vT[:, :, None]  # (B, H, rows, dv, L)
            ap = np.abs(p)
            tile_sum = np.add.reduceat(p, starts, axis=-1)
            before = np.cumsum(tile_sum, axis=-1) - tile_sum  # the exact sum of the tiles visited before
            c = np.abs(before) + np.add.reduceat(ap, starts, axis=-1)
            steps = np.minimum(per_tile * c.sum(-1), per_tile * T * ap.sum(-1))
            out[:, :, lo - r.start + i0:lo - r.start + i1] = (abs_do[:, :, lo - r.start + i0:lo - r.start + i1]
                                                                * steps).sum(-1)
    return out


def _tensor_core_steps(p, block: int, k_step: int, ordered):
    """sum over the MMA steps of an accumulation of the products p (..., n) through tiles of `block` of
    (|accumulator before the step| + sum of the step's |products|), the quantity the measured step error
    multiplies (proofs/hardware.py): each step of tile t is bounded by |sum of the tiles before t| +
    the tile's sum |p| (ascending tiles, `ordered` broadcastable to p.shape[:-1]); otherwise by sum |p|
    of the whole row at every step (the old n u_dacc sum |p|)."""
    n = p.shape[-1]
    per_tile = -(-min(n, block) // k_step)
    T = -(-n // block)
    c = _accumulation_coefficients(p, block, True)[..., ::block][..., :T]  # one value per tile
    ordered_sum = per_tile * c.sum(-1)
    unordered = per_tile * T * np.abs(p).sum(-1)
    return np.where(ordered, np.minimum(ordered_sum, unordered), unordered)


def _tf32_truncate(x):
    """fp32 values as Triton hands them to a tf32 tensor core on NVIDIA: the low 13 significand bits
    dropped (truncation toward zero, proofs/emulation._tf32), as float64."""
    b = np.ascontiguousarray(np.asarray(x, dtype=np.float32)).view(np.int32) & np.int32(~0x1FFF)
    return b.view(np.float32).astype(np.float64)


def _fma_dp_error(do_r, vT, dP):
    """(e_dp, basis, known) for dP = dO V^T as ascending fp32 FMA chains (flashcheck.proofs.fma_chain, exact): e_dp =
    fl(dO.v) - dO.v (dP: the float64 product, within gamma_dv(2^-53) basis of the exact one; basis = |fl(dO.v)| +
    sum |dO||v|, which the caller's gamma_{n_ops} evaluation floor multiplies), where every operand and step of the
    chain is 0 or normal (flush-to-zero or not: the same bits); elsewhere 0 and known False. None if dO or V are not
    fp32 values."""
    from flashcheck.proofs.fma_chain import fma_chain_dot

    if not (_fp32_exact(do_r) and _fp32_exact(vT)):
        return None
    x, known = fma_chain_dot(do_r, vT, return_normal=True)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.where(known, x - dP, 0.0)
    basis = np.where(known, np.abs(x) + np.abs(do_r) @ np.abs(vT), 0.0)
    return e, basis, known


@dataclass(frozen=True)
class _ConversionEffects:
    """For a block of query rows: the exact conversion errors of the logits (e_s = scale (q~.k~ - q.k))
    and of dP (e_dp = dO~.v~ - dO.v, evaluated in float64 from exact products: its error is
    <= gamma_{2 dv + 2}(2^-53) e_dp_abs), the resulting first-order change of dS per entry
    (dk_rows = A (g e_s + e_dp): what dQ and dK contract with K and Q), the conversion of dO (ddo), and
    the same with absolute values (for the float64 evaluation error); dq_in = q~ - q of these rows."""

    e_s: np.ndarray
    e_s_abs: np.ndarray
    e_dp: np.ndarray
    e_dp_abs: np.ndarray
    e_dp_floor: np.ndarray  # the subnormal dO, v (flushed or truncated: |dO_c| |v_jc| each), not in e_dp
    dk_rows: np.ndarray
    dk_rows_abs: np.ndarray
    ddo: np.ndarray
    ddo_abs: np.ndarray
    dq_in: np.ndarray
    dq_in_abs: np.ndarray


@dataclass(frozen=True)
class _ConvertedInputs:
    """q, k, v, dO as the tensor cores see them (tf32: truncated) beside the exact values; their
    differences are known exactly, so their first-order effect on a gradient is a computed signed sum
    (bounds.md sec. 8, "input conversions"), not u_in times a sum of absolute values."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    do: np.ndarray
    dk_in: np.ndarray  # k~ - k
    dk_in_abs: np.ndarray  # |k~| + |k|
    n_ops: int  # float64 operations behind one entry of an effect (its gamma_n evaluation error)
    logits_only: bool = False  # known_logits: no operand converted, the logits' known error passed to effects

    @staticmethod
    def known_logits(qf, kf, vf, dof) -> "_ConvertedInputs":
        """The operands as they are (fp32 through the fp32 FMA-chain dots: nothing converted), for the logits'
        known error e_s (Precision.ieee_fma_chain, logits._Logits.conv), given to `effects`."""
        z = np.zeros_like(kf)
        n_ops = 2 * (qf.shape[-1] + vf.shape[-1]) + kf.shape[-2] + qf.shape[-2] + 16  # as `of`
        return _ConvertedInputs(qf, kf, vf, dof, z, z, n_ops, logits_only=True)

    @staticmethod
    def of(qf, kf, vf, dof) -> "_ConvertedInputs":
        q, k, v, do = (_tf32_truncate(x) for x in (qf, kf, vf, dof))
        n_ops = 2 * (qf.shape[-1] + vf.shape[-1]) + kf.shape[-2] + qf.shape[-2] + 16
        return _ConvertedInputs(q, k, v, do, k - kf, np.abs(k) + np.abs(kf), n_ops)

    def effects(self, r, qf, kf, vf, do_r, sc, A, g, dS, e_s=None, e_dp=None) -> _ConversionEffects:
        def T(x):
            return np.swapaxes(x, -1, -2)

        if self.logits_only:  # e_s: the logits' known error (its float64 floor is in the logits' det); e_dp: dP's
            # known FMA-chain error (_fma_dp_error: value, |.| basis of its float64 evaluation), or None
            z = np.zeros_like(do_r)
            zq = np.zeros_like(qf)
            e_s = np.where(A > 0, e_s, 0.0)
            dk_rows, dk_rows_abs = A * g * e_s, A * np.abs(g * e_s)
            zs = np.zeros_like(A)
            if e_dp is not None:
                dk_rows, dk_rows_abs = dk_rows + A * e_dp[0], dk_rows_abs + A * e_dp[1]
            return _ConversionEffects(e_s=e_s, e_s_abs=np.abs(e_s), e_dp=zs if e_dp is None else e_dp[0],
                                      e_dp_abs=zs if e_dp is None else e_dp[1], e_dp_floor=zs, dk_rows=dk_rows,
                                      dk_rows_abs=dk_rows_abs, ddo=z, ddo_abs=z, dq_in=zq, dq_in_abs=zq)

        qt, dot = self.q[:, :, r], self.do[:, :, r]
        e_s = sc * (qt @ T(self.k) - qf @ T(kf))
        e_s_abs = sc * (np.abs(qt) @ T(np.abs(self.k)) + np.abs(qf) @ T(np.abs(kf)))
        e_dp = dot @ T(self.v) - do_r @ T(vf)
        e_dp_abs = np.abs(dot) @ T(np.abs(self.v)) + np.abs(do_r) @ T(np.abs(vf))
        tiny = 2.0**-126
        ado, av = np.abs(do_r), np.abs(vf)
        e_dp_floor = (ado * (ado < tiny)) @ T(av) + ado @ T(av * (av < tiny))
        return _ConversionEffects(
            e_s=np.where(A > 0, e_s, 0.0), e_s_abs=np.where(A > 0, e_s_abs, 0.0),
            e_dp=e_dp, e_dp_abs=e_dp_abs, e_dp_floor=e_dp_floor,
            dk_rows=A * (g * e_s + e_dp), dk_rows_abs=A * (np.abs(g) * e_s_abs + e_dp_abs),
            ddo=dot - do_r, ddo_abs=np.abs(dot) + np.abs(do_r),
            dq_in=qt - qf, dq_in_abs=np.abs(qt) + np.abs(qf))


# ----------------------------------------------------------------------------------------------
# Row-common errors of dK, dV: random over groups of rows (bounds.md sec. 8, "row-common errors in dK, dV")
# ----------------------------------------------------------------------------------------------


def _operand_rows(x, precision: Precision):
    """x as the dot's operands see it (the key by which two rows are equal as computed): truncated to tf32
    when the hardware truncates, rounded to 10 bits when it rounds (either is coarser than fp32), rounded to
    fp16/bf16 for those dots, unchanged otherwise; -0 made +0 (it computes like +0)."""
    x = np.asarray(x, dtype=np.float64) + 0.0
    dot = precision.dot
    if dot == "tf32":
        if precision.hardware.tf32_operand == "truncate":
            return _tf32_truncate(x) + 0.0
        b = np.ascontiguousarray(x.astype(np.float32)).view(np.int32)
        b = (b + np.int32(0xFFF) + ((b >> 13) & 1)) & np.int32(~0x1FFF)  # round to nearest even, 10 bits
        return b.view(np.float32).astype(np.float64) + 0.0
    if dot == "fp16" and precision.input != "float16":
        return x.astype(np.float16).astype(np.float64) + 0.0
    if dot == "bf16" and precision.input != "bfloat16":
        b = np.ascontiguousarray(x.astype(np.float32)).view(np.int32)
        b = (b + np.int32(0x7FFF) + ((b >> 16) & 1)) & np.int32(~0xFFFF)
        return b.view(np.float32).astype(np.float64) + 0.0
    return x


def _group_sizes(keys, group: int):
    """For every query row (B, Hq, Nq) the number of rows of its kv head (all `group` query heads sharing
    it) whose key rows (the last axes of each array in `keys`, concatenated) are bit-identical."""
    x = np.concatenate([np.ascontiguousarray(k, dtype=np.float64) for k in keys], axis=-1)
    B, Hq, Nq, w = x.shape
    flat = x.reshape(B * (Hq // group), group * Nq, w)
    out = np.empty(flat.shape[:2])
    for h, rows in enumerate(flat):  # rows as opaque byte strings: bit-identical, one sort
        _, inv, counts = np.unique(np.ascontiguousarray(rows).view(np.dtype((np.void, 8 * w))).reshape(-1),
                                   return_inverse=True, return_counts=True)
        out[h] = counts[inv.reshape(-1)]
    return out.reshape(B, Hq, Nq)


@dataclass(frozen=True)
class _RowGroups:
    """How many query rows compute like each row (B, Hq, Nq), counted over the kv head's query heads.

    A rounding of row i that a bit-identical row i' repeats (the same operands through the same operations)
    is one random variable, not two: the variance proxy of sum_{i in G} a_i delta is (sum_{i in G} a_i)^2
    <= |G| sum_{i in G} a_i^2 (Cauchy-Schwarz), so each row's variance term is weighted by its group's size
    (1 for distinct rows). by_q: rows with the same q (as the dot sees it): the logits, P, the stored LSE,
    O and Delta's O part; by_do: the same dO (dP = dO V^T); by_q_do: the same q and dO (dS's roundings)."""

    by_q: np.ndarray
    by_do: np.ndarray
    by_q_do: np.ndarray

    @staticmethod
    def of(qf, dof, precision: Precision, group: int) -> "_RowGroups":
        q, do = _operand_rows(qf, precision), _operand_rows(dof, precision)
        return _RowGroups(_group_sizes([q], group), _group_sizes([do], group), _group_sizes([q, do], group))

    def rows(self, r) -> "_RowGroups":
        return _RowGroups(self.by_q[:, :, r], self.by_do[:, :, r], self.by_q_do[:, :, r])


@dataclass(frozen=True)
class _KeyGroups:
    """For dQ's sum over the keys, how many keys of the head compute like each key, (B, Hq, 1, Nk). The dual of _RowGroups: for a fixed row i, two keys with the
    same k (as the dot sees it) give the same logit and its roundings (by_k), the same k and v the same
    dS = P (dP - Delta) and its roundings (by_k_v): one random variable per
    group, so each key's variance term is weighted by its group's size (Cauchy-Schwarz, as for rows). Without
    it, keys and values drawn from a pool of 3 (k, v) pairs exceeded the probabilistic dQ bound (fp16,
    N_k = 4096, seed 0: 0.92; 1.1 before the floor of _rounding_floor joined the variance; since 2026-11-25 dS's
    operand rounding, floor included, is charged worst case and the weights act on the remaining random parts)."""

    by_k: np.ndarray
    by_k_v: np.ndarray

    @staticmethod
    def of(kf, vf, precision: Precision) -> "_KeyGroups":
        """kf, vf: (B, Hq, Nk, .), the kv heads as each query head reads them."""
        k, v = _operand_rows(kf, precision), _operand_rows(vf, precision)
        return _KeyGroups(*(_group_sizes(keys, 1)[:, :, None, :] for keys in ([k], [k, v])))


@dataclass(frozen=True)
class _LseRandom:
    """The stored LSE's error of a block of rows, split for the sums over rows of dK and dV: `var`, the
    variance proxy of its round-to-nearest parts (l's sum over groups of equal summands, the two final roundings of
    the forward, the backward's rounding of LSE log2(e); the logit errors are not modelled as random, bounds.md
    sec. 3) and `det`, the rest (the forward's non-random terms and majorant remainder, the constant ln 2, lg2).
    l: the variance proxy of l's sum alone (relative, also in Delta through O = acc / l) where `l_ok`, and
    l_det the rescales l * alpha there (worst case: equal alphas round alike)."""

    var: np.ndarray
    det: np.ndarray
    l_var: np.ndarray
    l_det: np.ndarray
    l_ok: np.ndarray


def _lse2_rounding(lse0, eps_L, fmt: str):
    """The backward's rounding of LSE2 = fl(LSE log2 e) (kernels/triton_bwd.py) in the working format `fmt`, in
    natural-log units (P's relative error): half an ulp of the product's binade, the product's magnitude <= (|LSE|
    + eps_L) fl(log2 e) with fl(log2 e) <= log2 e (1 + 2^-23) (_half_ulp; <= u |LSE log2 e| ln 2 = u |LSE|)."""
    up = (np.abs(lse0) + eps_L) * (math.log2(math.e) * (1.0 + 2.0**-23))
    return _half_ulp(up, fmt) * math.log(2.0)


def _lse_random(Fr: _Forward, M: _Model, kf, sc, d: int, has_bias: bool, precision) -> _LseRandom:
    """_LseRandom of the rows of Fr (bounds.md sec. 8, "row-common errors in dK, dV").

    l = sum over tiles of l alpha + rowsum(P_tile): unmasked rows with the tile order known (as
    forward._l_sum_error): the rowsum's additions (any order, tl.sum's tree included) each err by <= u pi_t
    (pi_t the tile's share of l), one per key, grouped by the kernel's summands P_j = exp2(s_j - running max)
    within their error bound; the merge l alpha + rowsum by <= u_l L_t (L_t the share visited up to t; exact for
    the first tile), grouped by the tiles' rowsums as computed (equal values round alike, _grouped_square_sum,
    one sweep over both kinds of steps); the proxy is capped by the square of the worst case of those roundings
    (the forward's l_sum_det less its rescales). Rows whose LSE bound is the worst case keep l in det."""
    from .forward import _tile_changes, _tile_order

    A, vis, s, u = Fr.A, Fr.vis, Fr.s, M.u_w
    P = Fr.parts
    lse0 = np.where(Fr.empty, 0.0, Fr.lse)
    # the forward's LSE = fl(fl(m2 + log2 l) ln2): two roundings, each by half an ulp of its binade (P.lse_rn, in
    # lse_det); the backward's fl(LSE log2 e): one more. Single operations per row: random over rows.
    r_y, r_z = P.lse_rn
    var = r_y**2 + r_z**2 + _lse2_rounding(lse0, Fr.bound.lse, precision.accumulate) ** 2
    det = P.lse_det - r_y - r_z
    Nk = A.shape[-1]
    order = _tile_order(Nk, precision.block_k, precision.tile_order)  # the forward's tiles: it computed l
    zero = np.zeros(A.shape[:-1])
    l_ok = vis.all(-1) & ~P.lse_capped & ~Fr.empty
    if order is None or not l_ok.any() or Nk == 0:
        return _LseRandom(var, det, zero, zero, np.zeros_like(l_ok))
    lgf = _logit_errors(Fr.qf, kf, s, Fr.m, vis, sc, M, d, has_bias, qk=P.qk)
    st, sizes = order.starts, np.asarray(order.sizes)
    Ao, so, wco = order.apply(A), order.apply(s), order.apply(np.where(vis, lgf.wc, 0.0))
    share = np.add.reduceat(Ao, st, axis=-1)  # tile t's share of l
    L = np.cumsum(share, axis=-1)  # share of l after each tile
    run = np.repeat(np.maximum.accumulate(np.maximum.reduceat(so, st, axis=-1), axis=-1), sizes, axis=-1)
    with np.errstate(invalid="ignore", over="ignore"):
        pk = np.exp(so - run)  # the kernel's summands, in the units of the running max
        e_run = np.max(wco, axis=-1, keepdims=True)  # error of the computed running max
        tol = pk * (np.exp(wco + e_run) * (1 + M.eps_exp) - 1.0)
    tol = np.where(np.isnan(tol), np.inf, tol)
    # tile t's rowsum: size - 1 additions in any order (tl.sum's tree), each partial sum <= the tile's share
    # (charged once per key, grouped by the kernel's summands as before); then the merge l alpha + rowsum,
    # <= u L_t (exact for the first tile, l = 0), grouped by tiles whose rowsums can be equal as computed
    # (their summands' tolerances plus the rowsum's own rounding). One grouped sum over both kinds of steps:
    # a key's step and a merge meet only where their values can be equal, which only adds.
    T = share.shape[-1]
    rowsum = np.add.reduceat(pk, st, axis=-1)
    tol_sum = np.add.reduceat(tol, st, axis=-1)
    with np.errstate(invalid="ignore", over="ignore"):
        tol_r = tol_sum + gamma(sizes - 1, u) * (rowsum + tol_sum)
    tol_r = np.where(np.isnan(tol_r), np.inf, tol_r)
    coef = np.concatenate([u * np.repeat(share, sizes, axis=-1), M.u_l * np.where(np.arange(T) > 0, L, 0.0)],
                          axis=-1)
    vals, tols = np.concatenate([pk, rowsum], axis=-1), np.concatenate([tol, tol_r], axis=-1)
    l_var = _grouped_square_sum(vals.reshape(-1, Nk + T), coef.reshape(-1, Nk + T),
                                tols.reshape(-1, Nk + T)).reshape(zero.shape)
    change = _tile_changes(s, lgf.wc, vis, order, M.alpha_exact_at_zero)
    # the rescales l alpha (worst case: equal alphas round alike) and a wider l's one conversion at the end
    l_det = M.u_l * (change[..., 1:] * L[..., :-1]).sum(-1) + M.u_lconv * L[..., -1]
    rn_wc = np.maximum(P.l_sum_det - l_det, 0.0)  # the worst case of the roundings l_var models
    l_var = np.where(l_ok, np.minimum(l_var, rn_wc**2), 0.0)
    l_det = np.where(l_ok, l_det, 0.0)
    return _LseRandom(var + l_var, det - np.where(l_ok, rn_wc, 0.0), l_var, l_det, l_ok)


def _delta_claim(M: _Model, dv: int):
    """(depth, trees) of the Delta dot as stated (Precision.delta_depth, delta_trees), or (None, None): no tree known,
    or stated trees narrower than this call's dv (read for another head dim: the depth with them is not this call's)."""
    trees = M.delta_trees
    if M.delta_depth is None or (trees is not None and len(trees[0]) < dv):
        return None, None
    return M.delta_depth, trees


def _delta_tree_bound(dof, o, o_err, u: float, depth: int, trees=None, fmt: str | None = None):
    """A deterministic bound (rows) on the roundings of Delta_i = tl.sum(dO_i * O_hat_i) whose products each pass
    through at most `depth` roundings (Precision.delta_depth; bounds.md sec. 8, "The Delta dot's tree"), O_hat_c
    within o_err_c of o_c. Not a model: it holds whatever the products' residues.

    Every rounding adds its error to the result once (each node computes fl(T) = T + e), so Delta_hat - sum_c x_c =
    sum_nodes e, x_c = dO_c O_hat_c exact (the products the kernel rounds, or that enter an fma exact).
    - depth alone: Delta_hat = sum_c x_c prod_{<= depth} (1 + delta) + the underflow terms: |.| <= gamma_depth
      sum_c |x_c| <= gamma_depth S, S = sum_c (|p_c| + tol_c), p = dO o (float64), tol = |dO| o_err + 2^-52 |p| (p's
      own rounding); a product rounded into the subnormal range errs by <= 2^-150 absolute (an add with a subnormal
      result is exact), at most one such rounding per product: + dv 2^-150 (1 + gamma_depth).
    - trees (fmt "float32"; the complete binary tree over the pairs fl(x_a + fl(x_b)) in one of these leaf orders,
      columns past dv exact zeros; _delta_order_bound for each, the largest kept): node k rounds T_k = (sum of its leaves' x) + (the errors below it), |T_k| <= up_k = |Y_k| +
      W_k + E_k (Y_k the float64 sum of its leaves' p, W_k their tol, E_k the charges below; 2^-46 of their absolute
      sum and 2^-46 relative for these float64 sums), so |e_k| <= _half_ulp(up_k) (half an ulp of the binade; below
      2^-126 that binade's 2^-126 covers a subnormal result's rounding or an add's exactness); the rounded product b
      of a pair |e_b| <= _half_ulp(|p_b| + tol_b). The result: the sum of every node's charge (E at the root),
      computed bottom-up on the data; the smaller of the two bounds holds."""
    p = dof * o
    with np.errstate(invalid="ignore"):
        tol = np.abs(dof) * o_err + 2.0**-52 * np.abs(p)
    tol = np.where(np.isnan(tol), np.inf, tol)  # 0 * inf: an unbounded O^ (vacuous, never a 0)
    dv = p.shape[-1]
    ev = 1.0 + 2.0**-40  # float64 sums of <= 2^9 nonnegative terms
    g = float(gamma(depth, u))
    out = (g * (np.abs(p) + tol).sum(-1) + dv * 2.0**-150 * (1.0 + g)) * ev
    if trees is None or fmt != "float32":
        return out
    return np.fmin(out, np.max([_delta_order_bound(p, tol, tree, fmt) for tree in trees], axis=0) * ev)


def _delta_order_bound(p, tol, tree, fmt: str):
    """_delta_tree_bound's per-node charges for one leaf order (its docstring), before the final factor."""
    dv = p.shape[-1]
    pad = [(0, 0)] * (p.ndim - 1) + [(0, len(tree) - dv)]
    idx = np.asarray(tree)
    x, w = np.pad(p, pad)[..., idx], np.pad(tol, pad)[..., idx]
    with np.errstate(invalid="ignore", over="ignore"):
        c_b = _half_ulp(np.abs(x[..., 1::2]) + w[..., 1::2], fmt)  # the product rounded alone (mul.f32)
        Y, W, A = x[..., 0::2] + x[..., 1::2], w[..., 0::2] + w[..., 1::2], np.abs(x[..., 0::2]) + np.abs(x[..., 1::2])
        E = c_b
        while True:  # this level's nodes: the pairs (the fma), then each add above them
            up = (np.abs(Y) + W + E) * (1.0 + 2.0**-46) + 2.0**-46 * A  # float64 sums of <= 2^9 terms: < 2^-49 each
            E = E + _half_ulp(np.where(np.isnan(up), np.inf, up), fmt)
            if Y.shape[-1] == 1:
                return E[..., 0]
            Y, W, A, E = (v[..., 0::2] + v[..., 1::2] for v in (Y, W, A, E))


def _delta_dot(dof, o, o_err, u: float, dv: int, fmt: str | None = None, M: _Model | None = None):
    """Delta_i = tl.sum(dO_i * O_hat_i) in fp32: (variance proxy, det) of its roundings (bounds.md sec. 8).
    M with the Delta dot's tree stated (_delta_claim: Precision.delta_depth, delta_trees): (0, _delta_tree_bound), no
    random part. Otherwise the model below.
    Products p_c = dO_c O_c (as computed within |dO_c| o_err_c), each rounded (<= u |p_c|) and dv - 1
    additions in any order (each <= u S, S = sum_c |dO_c| (|O_c| + o_err_c)): one coefficient
    u (|p_c| + o_err part + S) per product, grouped by products that can be equal as computed
    (_grouped_square_sum), capped by (dv u S)^2 (the first-order worst case); det: gamma_dv's second order.
    fmt ("float32": the working format of these single round-to-nearest operations; None: the above): each
    rounding is also at most half an ulp of its value's binade (_half_ulp): a product's, whose value as computed
    is <= |p_c| + o_err part (<= u times that: replaces it), and an addition's, whose operands are rounded products
    and partial sums of a tree of depth <= dv - 1, so its value is <= S (1 + u)^dv <= S (1 + gamma_dv); that step
    is charged the smaller of u S (first order; its second order stays in det) and the half ulp (the whole error)."""
    depth, trees = _delta_claim(M, dv) if M is not None else (None, None)
    if depth is not None:
        return np.zeros(dof.shape[:-1]), _delta_tree_bound(dof, o, o_err, u, depth, trees, fmt)
    p = dof * o
    tol = np.abs(dof) * o_err
    S = (np.abs(p) + tol).sum(-1)
    if fmt is None:
        coef = u * (np.abs(p) + tol + S[..., None])
    else:
        add = np.fmin(u * S, _half_ulp(S * (1.0 + float(gamma(dv, u))), fmt))
        coef = np.fmin(u * (np.abs(p) + tol), _half_ulp(np.abs(p) + tol, fmt)) + add[..., None]
    lead = p.shape[:-1]
    proxy = _grouped_square_sum(p.reshape(-1, dv), coef.reshape(-1, dv), tol.reshape(-1, dv)).reshape(lead)
    return np.minimum(proxy, (dv * u * S) ** 2), (float(gamma(dv, u)) - dv * u) * S

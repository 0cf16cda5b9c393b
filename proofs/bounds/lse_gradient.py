"""The bound on the gradient of LSE alone (proofs/bounds.md sec. 8a)."""
from __future__ import annotations

import numpy as np

from .precision import (FAILURE_PROBABILITY, Precision, _check_kind, _conv, _dot_steps, _dq_model, _dq_tile_add_flush,
                         _model, gamma, hoeffding_lambda, _for_call)
from .common import (_exp_err, _fix_bad, _no_nan, _rows_chunks, _weighted_exp_err)
from .logits import (_logit_errors)
from . import forward as _forward_module
from .forward import (_forward)
from .backward import (_band_visibility, _combine, _dq_accumulation, _float64_rel_A, _forward_rows_view, _grad,
                       _lse2_rounding, _store)
from .visits import dq_visits


def lse_gradient_bound(q, k, *, scale=None, causal=False, window=None, mask=None, bias=None, dlse=None,
                       precision: Precision, kind: str = "probabilistic", dv: int | None = None) -> np.ndarray:
    """Elementwise bound (q's shape) on |dQ_kernel - dQ| for dQ = d(sum_i w_i LSE_i)/dq = scale w_i
    sum_j A_ij k_j, w = `dlse` (B, Hq, Nq) (default ones; values exact in fp32), and dO = 0
    (proofs/bounds.md, sec. 8a).

    The dQ kernel then has dP = 0, Delta = -w_i exactly, so dS = P_hat o w_i (one fp32 rounding):
    the dQ analysis of backward_bound with g_ij = w_i, no dP and no Delta error. P_hat is recomputed
    from the kernel's own stored LSE (error forward_bound(...).lse, one factor (1 + c_i) per row).
    "probabilistic": two events per entry (the row's LSE bound and the entry's Azuma sum).
    dv: the head dim of the V the kernel was called with (default: q's), which picks its dQ sum where the precision
    states a fused dQ for one dv only (FusedDq.value_dim)."""
    kind = _check_kind(kind)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # as in _forward
        return _no_nan(_lse_gradient_impl(q, k, scale, causal, window, mask, bias, dlse, precision, kind, dv)[0])


def _lse_gradient_impl(q, k, scale, causal, window, mask, bias, dlse, precision, kind, dv=None):
    qa, ka = np.asarray(q, dtype=np.float64), np.asarray(k, dtype=np.float64)
    if dv is not None and (not isinstance(dv, (int, np.integer)) or isinstance(dv, bool) or dv < 1):
        raise ValueError(f"dv must be a positive int (V's head dim) or None, got {dv!r}")
    # the call's tiles (long N, band) and its dQ sum (Precision.fused_dq, unmasked calls of the fused dv: the dK/dV
    # kernel's blocked dQ)
    nq = qa.shape[-2] if mask is None else None
    precision = _for_call(precision, causal, window, ka.shape[-2], nq, qa.shape[-1] if dv is None else int(dv),
                          qa.shape[1] // ka.shape[1] if qa.ndim == ka.ndim == 4 else None
                          ).fitted(qa.shape[-2], ka.shape[-2])
    M = _model(precision)  # after for_call: the tree depth of the call's forward tile (rowsum_depth, lg2_known)
    M_dq = _dq_model(M, precision)  # dQ's accumulation (Precision.dq_accumulation); the rest keeps M
    v = np.zeros((*ka.shape[:-1], 1))  # the LSE bound does not depend on v
    F = _forward(qa, ka, v, scale, causal, window, mask, bias, precision, kind, eta=FAILURE_PROBABILITY / 2)
    pr = F.problem
    w = np.ones((pr.B, pr.Hq, pr.Nq)) if dlse is None else np.asarray(dlse, dtype=np.float64)
    if w.shape != (pr.B, pr.Hq, pr.Nq):
        raise ValueError(f"dlse must have LSE's shape {(pr.B, pr.Hq, pr.Nq)}, got {w.shape}")
    lam = hoeffding_lambda(2.0)
    u, sc, kf = M.u_w, F.scale, F.kf
    blocked = precision.dq_accumulation == "blocked"  # the fused dQ: each tile one chain from zero (_dot_steps)
    n_k = _dot_steps(M_dq, pr.Nk, precision.dq_key_tile, tile_chain=blocked)  # the dQ loop's (Precision.block_k_dq)
    dq_flush = abs(sc) * _dq_tile_add_flush(precision, pr.Nk)  # a blocked dQ's adds' flushes, where not measured
    # dS = P_hat * w_i (gamma_2 kept from backward_bound: conservative, the kernel rounds once),
    # then converted to the operand format (u_p: rounded, or truncated for tf32)
    rho_wc = (1 + gamma(2, u)) * (1 + M.u_p) - 1.0
    rho_lin = 2 * u + M.u_p
    (r_in, r_p), _ = _conv(M)
    abs_k, kk = np.abs(kf), kf * kf
    out, exact = [], []
    head_full = F.vis.all(axis=(-2, -1), keepdims=True)  # ascending key tiles: nothing of the head masked
    # the dQ kernel's key order per query block, masked heads included (proofs/bounds/visits.py, bounds.md sec. 8)
    dq_order = dq_visits(_band_visibility(pr.Nq, pr.Nk, causal, window), F.vis, precision, M_dq.recursive)
    for r in _rows_chunks(pr.Nq, pr.Nk, 1, budget=_forward_module.ROW_BLOCK_ENTRIES):
        Fr = _forward_rows_view(F, r)
        vis, A, empty = Fr.vis, Fr.A, Fr.empty
        lse0 = np.where(empty, 0.0, Fr.lse)
        absg = np.where(vis, np.abs(w[:, :, r])[..., None], 0.0)
        g = np.where(vis, w[:, :, r][..., None], 0.0)
        # P_hat = A (1 + c_i)(1 + b_ij): c_i from the stored LSE and the rounding of LSE log2(e)
        # (one factor per row), b_ij from the logit error (shift LSE) and exp2, as in backward_bound
        lg = _logit_errors(Fr.qf, kf, Fr.s, lse0, vis, sc, M, pr.d, bias is not None, qk=Fr.parts.qk)
        c_row = (np.exp(_lse2_rounding(lse0, Fr.bound.lse, precision.accumulate) + Fr.bound.lse) - 1.0)[..., None]
        b_wc = np.where(vis, _exp_err(lg.wc, M.eps_exp), 0.0)

        def log_a(Fr=Fr, vis=vis):
            return np.where(vis, Fr.s - Fr.m[..., None] - np.log(Fr.parts.l)[..., None], -np.inf)

        _, Ab1, bad = _weighted_exp_err(A, b_wc, lg.wc, M.eps_exp, vis, log_a)
        b_lin = np.where(vis, lg.lin + M.eps_exp, 0.0)
        b_det = np.where(vis, lg.det + M.eps_exp, 0.0)
        # error of dS_hat: the _dS_errors of backward_bound with dP = 0 and no Delta error (X = |w_i|)
        wcS = np.where(vis, _fix_bad(A * ((1 + b_wc) * (1 + rho_wc) * absg - absg), bad,
                                     lambda: Ab1 * (1 + rho_wc) * absg - A * absg)
                       + M.floor_w * (1 + rho_wc) * absg + M.floor_p, 0.0)
        linS = np.where(vis, A * (b_lin + rho_lin) * absg, 0.0)
        varS = np.where(vis, A * A * ((2 * u**2 + r_p**2) * absg**2), 0.0)  # (the logit errors: none random, in b_det)
        detS = np.where(vis, A * b_det * absg, 0.0)
        dS = A * g
        # the dQ accumulation as in backward_bound: round to nearest grouped by equal products, tensor
        # cores from the partial sums (the stated tile order: nothing of the head masked)
        # (the summands the chain on the data reads are the kernel's, with the row's LSE factor: its tolerance
        # holds c_i; its bound is then multiplied by 1 + c_i below too, which only adds)
        tolS = (1 + M.u_p) * (1 + c_row) * (A * absg + wcS) - A * absg
        s64 = A * absg * _float64_rel_A(Fr.s, vis, sc * (np.abs(Fr.qf) @ np.swapaxes(abs_k, -1, -2)), pr.d)
        acc_sq, partial, tc_steps, acc_det = _dq_accumulation(M_dq, kind, dS, kf, tolS, vis, precision.dq_key_tile,
                                                              head_full, precision.tile_order, precision.accumulate,
                                                              np.where(vis, s64, 0.0), dq_order.rows(r),
                                                              tile_chain=blocked)
        ge = _grad(M_dq, sc, n_k, (A * absg) @ abs_k, wcS @ abs_k, linS @ abs_k,
                   varS @ kk, (dS * dS) @ kk, detS @ abs_k, dS @ kf, acc_sq=acc_sq, tc_steps=tc_steps,
                   partial=partial, acc_det=acc_det)
        dQ = ge.exact
        err = (1 + c_row) * _combine(ge.wc, ge.rem, ge.var, ge.det, lam, kind) + c_row * np.abs(dQ)
        err = err + dq_flush
        err = _store(err, np.abs(dQ), float(gamma(2, u)), M)
        out.append(np.where(empty[..., None], 0.0, err))
        exact.append(dQ)
    return np.concatenate(out, axis=2), np.concatenate(exact, axis=2)

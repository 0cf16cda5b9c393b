"""PROVISIONAL stand-ins, used only while `proofs.bounds` / `reference.attention_backward` /
`reference.merge_states` are not importable (they are other parts of the project, written in
parallel). Everything here is replaced by the real modules as soon as they import; `judge.py` says
which one it used in every failure message.

Forward bound (first order, probabilistic rounding model with lambda = 6, i.e. each length-n
accumulation errs by at most lambda*sqrt(n)*u with probability > 1 - 2 exp(-lambda^2/2) ~ 1 - 3e-8):

  logits  s = scale*q.k:  |ds_ij| <= scale*(2 u_op + g(d)) * sum_c |q_ic k_jc| + u |s_ij|
          (u_op: operand rounding of the dot format: tf32 2^-11, fp16/bf16/fp64/ieee 0 since the
          inputs already are in that format; g(n) = lambda sqrt(n) u, u the accumulation unit roundoff)
  weights p_ij = exp(s_ij - m_i)(1 + e_ij) + f_ij, |e_ij| <= |ds_ij| + 2u|s_ij - m_i| + u_exp,
          |f_ij| <= FLOOR (an exp result below the normal range may be flushed to zero)
          (the shift by m_i cancels in the ratio; exp argument rounding and the exp itself)
  O_ic = sum_j p_ij v_jc / sum_j p_ij:
     |dO_ic| <= sum_j A_ij |e_ij| |v_jc - O_ic| + (2 g(Nk) + 3u) sum_j A_ij |v_jc| + u_out |O_ic|
  LSE_i = m_i + log l_i:  |dLSE_i| <= sum_j A_ij |e_ij| + g(Nk) + 2u |LSE_i|

Backward bound (same model): with dP = dO V^T, Delta = rowsum(dO o O), dS = P o (dP - Delta),
  |d(dP)| <= g(dv) |dO||V|^T,  |d(Delta)| <= g(dv) rowsum(|dO||O|) + rowsum(|dO| |dO_fwd|),
  |d(P)| <= P o (|e| + |dLSE|), |d(dS)| <= |dP| o |dP - Delta| + P o (|d(dP)| + |d(Delta)|) + u|dS|,
  dV = P^T dO:      |d(dV)| <= |dP|^T |dO| + g(Nq) P^T |dO| + u_out |dV|
  dQ = scale dS K:  |d(dQ)| <= scale (|d(dS)| |K| + g(Nk) |dS||K|) + u_out |dQ|
  dK = scale dS^T Q: |d(dK)| <= scale (|d(dS)|^T |Q| + g(Nq) |dS|^T|Q|) + u_out |dK|
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

LAMBDA = 6.0
UNIT = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
FLOOR = {"float64": 2.0**-1022, "float32": 2.0**-126}  # exp results below it may be flushed to 0
OPERAND = {"tf32": 2.0**-11, "fp16": 0.0, "bf16": 0.0, "ieee": 0.0, "fp64": 0.0}


def _g(n, u):
    return LAMBDA * np.sqrt(n) * u


def _problem(q, k, v, scale, causal, window, mask):
    from reference import attention
    from reference.attention import expand_kv

    group = q.shape[1] // k.shape[1]
    o, lse = attention(q, k, v, scale=scale, causal=causal, window=window, mask=mask)
    ke, ve = expand_kv(k, group), expand_kv(v, group)
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    from reference.masks import visibility

    B, Hq, Nq, _ = q.shape
    vis = visibility(B, Hq, Nq, k.shape[2], causal=causal, window=window, mask=mask)
    s = scale * np.einsum("bhic,bhjc->bhij", q, ke)
    a = np.exp(np.where(vis, s - np.where(np.isfinite(lse), lse, 0.0)[..., None], -np.inf))
    return SimpleNamespace(o=o, lse=lse, ke=ke, ve=ve, s=s, a=a, vis=vis, scale=scale, group=group)


def _weight_error(q, p, precision):
    u = UNIT[precision.accumulate]
    u_exp = 4 * u if precision.exp == "ex2.approx" else 2 * u
    d = q.shape[-1]
    qk = p.scale * np.einsum("bhic,bhjc->bhij", np.abs(q), np.abs(p.ke))
    ds = (2 * OPERAND[precision.dot] + _g(d, u)) * qk + u * np.abs(p.s)
    m = np.max(np.where(p.vis, p.s, -np.inf), axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    return np.where(p.vis, ds + 2 * u * np.abs(p.s - m) + u_exp, 0.0)


def forward_bound(q, k, v, *, scale=None, causal=False, window=None, mask=None, bias=None,
                  precision, kind="probabilistic"):
    p = _problem(q, k, v, scale, causal, window, mask)
    u = UNIT[precision.accumulate]
    u_out = UNIT[precision.output or precision.input]
    e = _weight_error(q, p, precision)
    nk = p.vis.sum(-1)[..., None]
    ae = p.a * e
    dev = np.abs(p.ve[:, :, None, :, :] - p.o[:, :, :, None, :])  # (B,H,Nq,Nk,dv)
    o = (np.einsum("bhij,bhijc->bhic", ae, dev) + (2 * _g(nk, u) + 3 * u) * np.einsum("bhij,bhjc->bhic", p.a, np.abs(p.ve))
         + u_out * np.abs(p.o) + FLOOR[precision.accumulate] * np.einsum("bhij,bhjc->bhic", p.vis, np.abs(p.ve)))
    lse = np.where(np.isfinite(p.lse), ae.sum(-1) + _g(nk[..., 0], u) + 2 * u * np.abs(np.nan_to_num(p.lse, neginf=0.0)), 0.0)
    return SimpleNamespace(o=o, lse=lse)


def backward_bound(q, k, v, do, *, scale=None, causal=False, window=None, mask=None, bias=None,
                   precision, kind="probabilistic"):
    p = _problem(q, k, v, scale, causal, window, mask)
    u = UNIT[precision.accumulate]
    u_out = UNIT[precision.output or precision.input]
    fb = forward_bound(q, k, v, scale=scale, causal=causal, window=window, mask=mask, precision=precision)
    dv_ = q.shape[-1]
    e = _weight_error(q, p, precision) + fb.lse[..., None]
    dP = np.einsum("bhic,bhjc->bhij", do, p.ve)
    delta = np.sum(do * p.o, -1)
    ddP = _g(dv_, u) * np.einsum("bhic,bhjc->bhij", np.abs(do), np.abs(p.ve))
    ddelta = _g(dv_, u) * np.sum(np.abs(do) * np.abs(p.o), -1) + np.sum(np.abs(do) * fb.o, -1)
    dS = p.a * (dP - delta[..., None])
    dP_err = p.a * e + FLOOR[precision.accumulate] * p.vis
    ddS = dP_err * np.abs(dP - delta[..., None]) + p.a * (ddP + ddelta[..., None]) + u * np.abs(dS)
    nq, nk = q.shape[2], k.shape[2]
    dq = p.scale * (np.einsum("bhij,bhjc->bhic", ddS, np.abs(p.ke)) + _g(nk, u) * np.einsum("bhij,bhjc->bhic", np.abs(dS), np.abs(p.ke)))
    dk = p.scale * (np.einsum("bhij,bhic->bhjc", ddS, np.abs(q)) + _g(nq, u) * np.einsum("bhij,bhic->bhjc", np.abs(dS), np.abs(q)))
    dvv = np.einsum("bhij,bhic->bhjc", dP_err, np.abs(do)) + _g(nq, u) * np.einsum("bhij,bhic->bhjc", p.a, np.abs(do))
    ex_dq = p.scale * np.einsum("bhij,bhjc->bhic", dS, p.ke)
    ex_dk = p.scale * np.einsum("bhij,bhic->bhjc", dS, q)
    ex_dv = np.einsum("bhij,bhic->bhjc", p.a, do)
    B, Hkv = k.shape[:2]
    fold = lambda x: x.reshape(B, Hkv, p.group, *x.shape[2:]).sum(2)  # noqa: E731
    return SimpleNamespace(dq=dq + u_out * np.abs(ex_dq), dk=fold(dk) + u_out * np.abs(fold(ex_dk)),
                           dv=fold(dvv) + u_out * np.abs(fold(ex_dv)))


def attention_backward(q, k, v, o, lse, do, *, scale=None, causal=False, window=None, mask=None, bias=None, **_):
    p = _problem(q, k, v, scale, causal, window, mask)
    dP = np.einsum("bhic,bhjc->bhij", do, p.ve)
    delta = np.sum(do * o, -1)
    dS = p.a * (dP - delta[..., None])
    B, Hkv = k.shape[:2]
    fold = lambda x: x.reshape(B, Hkv, p.group, *x.shape[2:]).sum(2)  # noqa: E731
    dq = p.scale * np.einsum("bhij,bhjc->bhic", dS, p.ke)
    dk = fold(p.scale * np.einsum("bhij,bhic->bhjc", dS, q))
    dv = fold(np.einsum("bhij,bhic->bhjc", p.a, do))
    return dq, dk, dv


def merge_states(o1, lse1, o2, lse2):
    lse = np.logaddexp(lse1, lse2)
    safe = np.where(np.isfinite(lse), lse, 0.0)
    w1 = np.where(np.isfinite(lse1), np.exp(lse1 - safe), 0.0)[..., None]
    w2 = np.where(np.isfinite(lse2), np.exp(lse2 - safe), 0.0)[..., None]
    return w1 * o1 + w2 * o2, lse

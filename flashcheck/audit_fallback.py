"""TEMPORARY stand-ins used by the audit only while a contracted part is missing.

Each is used only when the real module cannot be imported, and the report says so in its header:
  - `reference.attention(_backward)` -> `fallback_reference` (torch float64 autograd, S and P
    materialized);
  - `proofs.bounds` -> `fallback_forward_bound` / `fallback_backward_bound` (first-order bound
    derived below; kind is ignored: it is a worst-case first-order bound), and `guess_precision`
    where a kernel's precision model (which needs proofs.bounds.Precision) cannot be built.
Delete this module once those parts have landed.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

UNIT_ROUNDOFF = {"float16": 2.0**-11, "fp16": 2.0**-11, "bfloat16": 2.0**-8, "bf16": 2.0**-8,
                 "tf32": 2.0**-11, "float32": 2.0**-24, "ieee": 2.0**-24, "float64": 2.0**-53,
                 "fp64": 2.0**-53}

# Absolute error of rounding into the format near zero (half the smallest subnormal): underflow.
UNDERFLOW = {"float16": 2.0**-25, "bfloat16": 2.0**-134, "float32": 2.0**-150, "float64": 2.0**-1075}


@dataclass(frozen=True)
class FallbackPrecision:
    """Mirror of proofs.bounds.Precision (ARCHITECTURE.md)."""
    input: str
    dot: str
    accumulate: str = "float32"
    output: str | None = None
    exp: str = "ex2.approx"
    block_k: int = 64
    block_q: int = 64


def guess_precision(dtype) -> FallbackPrecision:
    """Used only while proofs.bounds (hence the adapters' precision models) is missing: operands in
    the input format, fp32 accumulation, libm exp."""
    name = str(dtype).replace("torch.", "")
    dot = {"float16": "fp16", "bfloat16": "bf16", "float32": "ieee", "float64": "fp64"}[name]
    return FallbackPrecision(input=name, dot=dot, exp="libm")


def fallback_reference(q, k, v, do, *, backward):
    """float64 (o, lse, dq, dk, dv) through torch autograd on the materialized S and P."""
    import torch

    q, k, v = (torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (q, k, v))
    s = torch.einsum("bhid,bhjd->bhij", q, k) / np.sqrt(q.shape[-1])
    lse = torch.logsumexp(s, dim=-1)
    o = torch.exp(s - lse[..., None]) @ v
    grads = (None,) * 3
    if backward:
        o.backward(torch.tensor(do, dtype=torch.float64))
        grads = tuple(t.grad.numpy() for t in (q, k, v))
    return (o.detach().numpy(), lse.detach().numpy(), *grads)


def _gamma(n, u):
    return n * u / (1 - n * u)


def _ingredients(q, k, v, precision):
    """P, |P||V|, the logit perturbation bound δs and the relative error bound ε_P of P."""
    u_acc, u_dot = UNIT_ROUNDOFF[precision.accumulate], UNIT_ROUNDOFF[precision.dot]
    u_exp = 2 * 2.0**-23 if precision.exp == "ex2.approx" else 2.0**-24
    d, nk = q.shape[-1], k.shape[-2]
    scale = 1 / np.sqrt(d)
    s = np.einsum("bhid,bhjd->bhij", q, k) * scale
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    # δs[i,j] <= (γ_{d+2}(u_acc) + u_dot) · scale · Σ_k |q_ik||k_jk|   (dot, scaling, storage)
    ds = (_gamma(d + 2, u_acc) + u_dot) * scale * np.einsum("bhid,bhjd->bhij", abs(q), abs(k))
    # softmax is Lipschitz in the max-norm: |δP_ij| <= P_ij · 2 max_j |δs_ij|, then exp, the
    # normalizer sum (γ_Nk) and P stored in the dot format (u_dot) add relative errors.
    eps_p = 2 * ds.max(-1) + u_exp + _gamma(nk, u_acc) + u_dot + 2 * u_acc
    return p, ds, eps_p, u_acc, u_dot, u_exp


def fallback_forward_bound(q, k, v, *, precision, kind="worst_case", **_):
    """First-order bound of |O − O_ref| and |LSE − LSE_ref| (no masks/bias; kind ignored).

    |δO_i| <= (ε_P,i + γ_Nk(u_acc)) · (P|V|)_i + u_out |O_i|,
    |δLSE_i| <= max_j δs_ij + γ_Nk(u_acc) + u_exp + (u_out + u_acc) |LSE_i|; 1% margin for the
    second-order terms.
    """
    p, ds, eps_p, u_acc, _, u_exp = _ingredients(q, k, v, precision)
    u_out = UNIT_ROUNDOFF[precision.output or precision.input]
    nk = k.shape[-2]
    o = p @ v
    s = np.einsum("bhid,bhjd->bhij", q, k) / np.sqrt(q.shape[-1])
    lse = np.log(np.exp(s - s.max(-1, keepdims=True)).sum(-1)) + s.max(-1)
    eta_acc, eta_out = UNDERFLOW[precision.accumulate], UNDERFLOW[precision.output or precision.input]
    # Underflow adds absolute terms: each P_ij (exp may flush to 0) and the stored O.
    bo = ((eps_p[..., None] + _gamma(nk, u_acc)) * (p @ abs(v)) + u_out * abs(o)
          + 2 * eta_acc * abs(v).sum(-2, keepdims=True) + eta_out)
    bl = ds.max(-1) + _gamma(nk, u_acc) + u_exp + (u_out + u_acc) * abs(lse)
    return SimpleNamespace(o=1.01 * bo, lse=1.01 * bl)


def fallback_backward_bound(q, k, v, do, *, precision, kind="worst_case", **_):
    """First-order bound of |dQ|, |dK|, |dV| errors (FA2 backward with Δ = rowsum(dO ∘ O)).

    dV = Pᵀ dO:          |δdV| <= (ε_P + γ_Nq + u_dot) Pᵀ|dO| + u_out|dV|
    dP = dO Vᵀ:          |δdP| <= (γ_dv + u_dot) |dO||V|ᵀ
    (+ underflow: 2η_acc per P_ij / dS_ij term, η_out per stored element)
    Δ_i = dO_i · O_i:    |δΔ_i| <= |dO_i| · δO_i + γ_dv |dO_i|·|O_i|
    dS = P ∘ (dP − Δ):   |δdS| <= ε_P P|dP − Δ| + P(|δdP| + |δΔ|) + u_dot |dS|
    dQ = scale dS K:     |δdQ| <= scale(|δdS||K| + γ_Nk |dS||K|) + u_out|dQ|   (dK alike with Q)
    """
    p, _, eps_p, u_acc, u_dot, _ = _ingredients(q, k, v, precision)
    u_out = UNIT_ROUNDOFF[precision.output or precision.input]
    nq, nk, dv_dim = q.shape[-2], k.shape[-2], v.shape[-1]
    scale = 1 / np.sqrt(q.shape[-1])
    o = p @ v
    bo = fallback_forward_bound(q, k, v, precision=precision).o
    dp = do @ np.swapaxes(v, -1, -2)
    delta = (do * o).sum(-1)
    ds_ = p * (dp - delta[..., None])
    e_dp = (_gamma(dv_dim, u_acc) + u_dot) * (abs(do) @ np.swapaxes(abs(v), -1, -2))
    e_delta = (abs(do) * bo).sum(-1) + _gamma(dv_dim, u_acc) * (abs(do) * abs(o)).sum(-1)
    eta_acc, eta_out = UNDERFLOW[precision.accumulate], UNDERFLOW[precision.output or precision.input]
    e_ds = (eps_p[..., None] * p * abs(dp - delta[..., None]) + p * (e_dp + e_delta[..., None])
            + u_dot * abs(ds_) + 2 * eta_acc * abs(dp - delta[..., None]))
    pt = np.swapaxes(p, -1, -2)
    dvv = pt @ do
    b_dv = (eps_p.max(-1)[..., None, None] + _gamma(nq, u_acc) + u_dot) * (pt @ abs(do)) \
        + u_out * abs(dvv) + 2 * eta_acc * abs(do).sum(-2, keepdims=True) + eta_out
    b_dq = scale * (e_ds @ abs(k) + _gamma(nk, u_acc) * (abs(ds_) @ abs(k))) \
        + u_out * abs(scale * ds_ @ k) + eta_out
    dst = np.swapaxes(ds_, -1, -2)
    b_dk = scale * (np.swapaxes(e_ds, -1, -2) @ abs(q) + _gamma(nq, u_acc) * (abs(dst) @ abs(q))) \
        + u_out * abs(scale * dst @ q) + eta_out
    return SimpleNamespace(dq=1.01 * b_dq, dk=1.01 * b_dk, dv=1.01 * b_dv)

"""A correct blocked online-softmax attention in plain torch (CPU), the base of the catalog.

Forward (FA2, seeds 000/002): for each K/V tile of `block_k` keys,
  m_new = max(m, rowmax(S_tile));  alpha = exp(m − m_new)   (safe: m = −inf ⇒ shift 0)
  acc = alpha · acc + exp(S_tile − m_new) V_tile;  l = alpha · l + rowsum(exp(S_tile − m_new))
then O = acc / l and LSE = m + log l (fully masked rows: O = 0, LSE = −inf).
Backward (custom autograd.Function, seed 002): P = exp(S − LSE), Δ = rowsum(dO ∘ O),
  dV = Pᵀ dO, dP = dO Vᵀ, dS = P ∘ (dP − Δ), dQ = scale · dS K, dK = scale · dSᵀ Q.

Every step is a method, so a buggy kernel overrides exactly the step it gets wrong.
"""
from __future__ import annotations

import math

import torch

NEG_INF = float("-inf")


class Blocked:
    block_k = 64
    acc_dtype = torch.float32
    supports = "causal,scale,gqa,lse,backward,mask,window"
    alignment = "top_left"  # what causal=True means when Nq != Nk (declared as causal_alignment)
    domain: dict = {}  # declared Domain attributes (head_dims, seq_multiple, min_n, dtypes, ...)

    def check(self, q, k, v, causal, mask):
        """Raise on inputs the kernel does not take (restricted-domain kernels override it)."""

    # ---- masking ------------------------------------------------------------------------------
    def visible(self, Nq, Nk, j0, j1, causal, window, device):
        """(Nq, j1 − j0) bool: key j visible from query i (ARCHITECTURE.md conventions)."""
        i = torch.arange(Nq, device=device)[:, None]
        j = torch.arange(j0, j1, device=device)[None, :]
        off = Nk - Nq if causal and self.alignment == "bottom_right" else 0
        ok = torch.ones(Nq, j1 - j0, dtype=torch.bool, device=device)
        if causal:
            ok &= j <= i + off
        if window is not None:
            left, right = window
            if left is not None:
                ok &= j >= i + off - left
            if right is not None:
                ok &= j <= i + off + right
        return ok

    # ---- the recurrence -----------------------------------------------------------------------
    def tiles(self, Nk):
        return [(j0, min(j0 + self.block_k, Nk)) for j0 in range(0, Nk, self.block_k)]

    def kv_heads(self, Hq, Hkv):
        """Index of the kv head each query head reads."""
        return torch.arange(Hq) // (Hq // Hkv)

    def new_max(self, m, tile_max, first):
        return torch.maximum(m, tile_max)

    def shift(self, m):
        """Safe max: a row that has seen no key yet shifts by 0, so (−inf) − (−inf) never reaches exp."""
        return torch.where(torch.isinf(m), torch.zeros_like(m), m)

    def rescale(self, acc, l, alpha):
        return acc * alpha[..., None], l * alpha

    def accumulate(self, acc, p, v):
        return (acc + p.to(self.acc_dtype) @ v.to(self.acc_dtype)).to(self.acc_dtype)

    def finalize(self, acc, l, m):
        dead = l == 0
        o = acc / torch.where(dead, torch.ones_like(l), l)[..., None]
        lse = torch.where(dead, torch.full_like(m, NEG_INF), m + torch.log(torch.where(dead, torch.ones_like(l), l)))
        return torch.where(dead[..., None], torch.zeros_like(o), o), lse

    def forward(self, q, k, v, causal=False, scale=None, window=None, mask=None):
        B, Hq, Nq, d = q.shape
        Nk = k.shape[2]
        scale = 1.0 / math.sqrt(d) if scale is None else scale
        heads = self.kv_heads(Hq, k.shape[1]).to(q.device)
        k, v = k[:, heads].float(), v[:, heads].float()
        qf = q.float()
        m = torch.full((B, Hq, Nq), NEG_INF, device=q.device)
        l = torch.zeros(B, Hq, Nq, dtype=self.acc_dtype, device=q.device)
        acc = torch.zeros(B, Hq, Nq, v.shape[-1], dtype=self.acc_dtype, device=q.device)
        for n, (j0, j1) in enumerate(self.tiles(Nk)):
            s = scale * (qf @ k[:, :, j0:j1].transpose(-1, -2))
            ok = self.visible(Nq, Nk, j0, j1, causal, window, q.device)
            if mask is not None:
                ok = ok & mask.expand(B, Hq, Nq, Nk)[..., j0:j1]
            s = torch.where(ok, s, torch.full_like(s, NEG_INF))
            m_new = self.new_max(m, s.amax(-1), n == 0)
            alpha = torch.exp(m - self.shift(m_new))  # m = −inf (nothing seen yet) ⇒ alpha = 0
            p = torch.exp(s - self.shift(m_new)[..., None])
            acc, l = self.rescale(acc, l, alpha)
            l = (l + p.sum(-1).to(self.acc_dtype)).to(self.acc_dtype)
            acc = self.accumulate(acc, p, v[:, :, j0:j1])
            m = m_new
        o, lse = self.finalize(acc.float(), l.float(), m)
        return o.to(q.dtype), lse

    # ---- backward -----------------------------------------------------------------------------
    def delta(self, do, o):
        return (do * o).sum(-1)

    def dk_scale(self, scale):
        return scale

    def backward(self, q, k, v, o, lse, do, causal, scale, window, mask):
        B, Hq, Nq, d = q.shape
        Hkv, Nk = k.shape[1], k.shape[2]
        scale = 1.0 / math.sqrt(d) if scale is None else scale
        heads = self.kv_heads(Hq, Hkv).to(q.device)
        ke, ve = k[:, heads].float(), v[:, heads].float()
        qf, dof, of = q.float(), do.float(), o.float()
        ok = self.visible(Nq, Nk, 0, Nk, causal, window, q.device)
        if mask is not None:
            ok = ok & mask.expand(B, Hq, Nq, Nk)
        s = scale * (qf @ ke.transpose(-1, -2))
        shift = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
        p = torch.where(ok, torch.exp(s - shift[..., None]), torch.zeros_like(s))
        dv = p.transpose(-1, -2) @ dof
        dp = dof @ ve.transpose(-1, -2)
        ds = p * (dp - self.delta(dof, of)[..., None])
        dq = scale * (ds @ ke)
        dk = self.dk_scale(scale) * (ds.transpose(-1, -2) @ qf)
        fold = (torch.zeros(B, Hkv, Nk, d, device=q.device),
                torch.zeros(B, Hkv, Nk, v.shape[-1], device=q.device))
        dk = fold[0].index_add_(1, heads, dk)
        dv = fold[1].index_add_(1, heads, dv)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, impl, q, k, v, causal, scale, window, mask):
        o, lse = impl.forward(q, k, v, causal, scale, window, mask)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.args = (impl, causal, scale, window, mask)
        return o, lse

    @staticmethod
    def backward(ctx, do, dlse):
        q, k, v, o, lse = ctx.saved_tensors
        impl, causal, scale, window, mask = ctx.args
        dq, dk, dv = impl.backward(q, k, v, o, lse, do, causal, scale, window, mask)
        return None, dq, dk, dv, None, None, None, None


def kernel(impl: Blocked):
    """The user-facing function `attention(q, k, v, **kw) -> (O, LSE)` of an implementation."""

    def attention(q, k, v, *, causal=False, scale=None, window=None, mask=None):
        impl.check(q, k, v, causal, mask)
        return _Attention.apply(impl, q, k, v, causal, scale, window, mask)

    attention.supports = impl.supports
    attention.causal_alignment = impl.alignment
    for name, value in impl.domain.items():
        setattr(attention, name, value)
    return attention


attention = kernel(Blocked())

"""CORRECT: standard attention in float32 (S and P materialized, torch autograd for the backward),
taking and returning the (B, N, H, d) layout."""
import math

import torch


def attention(q, k, v, *, causal=False, scale=None):
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, N, H, d) -> (B, H, N, d)
    Nq, Nk, d = q.shape[2], k.shape[2], q.shape[-1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = scale * (q @ k.transpose(-1, -2))
    if causal:
        keep = torch.ones(Nq, Nk, dtype=torch.bool, device=q.device).tril()  # top-left
        s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, -1)
    dead = torch.isinf(lse)[..., None]  # fully masked rows: O = 0 instead of softmax's NaN
    p = torch.where(dead, torch.zeros_like(s), torch.softmax(s.masked_fill(dead, 0.0), -1))
    o = p @ v
    return o.transpose(1, 2), lse


attention.supports = "causal,scale,gqa,lse,backward"
attention.layout = "bnhd"

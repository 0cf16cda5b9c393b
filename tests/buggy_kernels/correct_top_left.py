"""CORRECT: attention written the way most kernels are: `fn(q, k, v, causal=False, scale=None) -> O`,
`causal` a bool with torch SDPA's top-left meaning; nothing declared (validated with
`--supports causal,scale`)."""
import math

import torch


def attention(q, k, v, causal=False, scale=None):
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = scale * (q.float() @ k.float().transpose(-1, -2))
    if causal:
        Nq, Nk = s.shape[-2:]
        s = s.masked_fill(~torch.ones(Nq, Nk, dtype=torch.bool).tril(), float("-inf"))
    return (torch.softmax(s, -1) @ v.float()).to(q.dtype)

"""BUG: declares nothing (so causal=True means top-left) but aligns the causal diagonal bottom-right;
the failure message says the other alignment explains the output."""
import math

import torch


def attention(q, k, v, causal=False, scale=None):
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = scale * (q.float() @ k.float().transpose(-1, -2))
    if causal:
        Nq, Nk = s.shape[-2:]
        s = s.masked_fill(~torch.ones(Nq, Nk, dtype=torch.bool).tril(Nk - Nq), float("-inf"))
    p = torch.softmax(s, -1).nan_to_num(0.0)  # rows with no key (Nq > Nk): O = 0
    return (p @ v.float()).to(q.dtype)

"""flashcheck's float64 NumPy references: one function per derivation step (ARCHITECTURE.md).

No torch or triton here. `reference.exact` (mpmath) is imported on demand, not from this package.
"""
from reference import masks, shapes
from reference.attention import attention
from reference.masks import causal_offset, visibility
from reference.shapes import Problem, check_attention_args
from reference.softmax import logsumexp, naive_softmax, online_softmax, safe_softmax, tiled_online_softmax

__all__ = [
    "Problem",
    "attention",
    "causal_offset",
    "check_attention_args",
    "logsumexp",
    "masks",
    "naive_softmax",
    "online_softmax",
    "safe_softmax",
    "shapes",
    "tiled_online_softmax",
    "visibility",
]

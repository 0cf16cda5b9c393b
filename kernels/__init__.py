"""Triton FlashAttention-2 kernel (forward and backward) with causal/window/dense/block-sparse masks.

`attention(q, k, v, *, scale, causal, window, mask, return_lse, dot_precision)` is the public entry;
`arithmetic(dtype, dot_precision)` states what it computes with (plain values; no other part imported).
"""
from kernels.block_mask import BlockSparseMask, build_block_mask, from_flex_block_mask
from kernels.attention import Arithmetic, arithmetic, attention, kernel_config

__all__ = ["attention", "arithmetic", "Arithmetic", "kernel_config", "BlockSparseMask", "build_block_mask",
           "from_flex_block_mask"]

"""Triton FlashAttention-2 kernel (forward and backward) with causal/window/dense/block-sparse masks.

`attention(q, k, v, *, scale, causal, window, mask, return_lse, dot_precision)` is the public entry;
`precision(dtype, dot_precision)` states its arithmetic for `proofs.bounds`.
"""
from kernels.block_mask import BlockSparseMask, build_block_mask, from_flex_block_mask
from kernels.attention import attention, kernel_config, precision

__all__ = ["attention", "precision", "kernel_config", "BlockSparseMask", "build_block_mask",
           "from_flex_block_mask"]

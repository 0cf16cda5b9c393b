"""Triton FlashAttention-2 kernel (forward and backward) with causal/window/dense/block-sparse masks.

`attention(q, k, v, *, scale, causal, window, mask, return_lse, dot_precision, precision, delta_from,
tiles)` is the public entry; `arithmetic(dtype, dot_precision, *, precision, delta_from, ...)` states what
it computes with (plain values; no other part imported); `KernelConfig`/`TileConfig` are tile choices.
"""
if __name__ != "flashcheck.kernels":  # one module object per file: ARCHITECTURE.md, "Import names"
    raise ImportError(f"import flashcheck.kernels, not {__name__} (the checkout's kernels/ is flashcheck.kernels)")
from flashcheck.kernels.block_mask import BlockSparseMask, build_block_mask, from_flex_block_mask
from flashcheck.kernels.attention import (Arithmetic, KernelConfig, TileConfig, arithmetic, attention,
                                          kernel_config)

__all__ = ["attention", "arithmetic", "Arithmetic", "kernel_config", "KernelConfig", "TileConfig",
           "BlockSparseMask", "build_block_mask", "from_flex_block_mask"]

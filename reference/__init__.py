"""flashcheck's float64 NumPy references: one function per derivation step (ARCHITECTURE.md).

No torch or triton here. `flashcheck.reference.exact` (mpmath) is imported on demand, not from this package.
"""
if __name__ != "flashcheck.reference":  # one module object per file: ARCHITECTURE.md, "Import names"
    raise ImportError(f"import flashcheck.reference, not {__name__} (the checkout's reference/ is flashcheck.reference)")
from flashcheck.reference import masks, shapes
from flashcheck.reference.attention import attention
from flashcheck.reference.backward import attention_backward, standard_attention_backward
from flashcheck.reference.block_sparse import block_sparse_attention, causal_block_mask, local_block_mask
from flashcheck.reference.flash_attention_1 import IOStats, algorithm1_hbm_accesses, flash_attention_1
from flashcheck.reference.flash_attention_2 import flash_attention_2_forward
from flashcheck.reference.masks import causal_offset, visibility
from flashcheck.reference.merge import merge_states
from flashcheck.reference.row_recurrence import RowState, row_recurrence, tiled_row_recurrence
from flashcheck.reference.shapes import Problem, check_attention_args
from flashcheck.reference.softmax import logsumexp, naive_softmax, online_softmax, safe_softmax, tiled_online_softmax

__all__ = [
    "IOStats",
    "Problem",
    "RowState",
    "algorithm1_hbm_accesses",
    "attention",
    "attention_backward",
    "block_sparse_attention",
    "causal_block_mask",
    "causal_offset",
    "check_attention_args",
    "flash_attention_1",
    "flash_attention_2_forward",
    "local_block_mask",
    "logsumexp",
    "masks",
    "merge_states",
    "naive_softmax",
    "online_softmax",
    "row_recurrence",
    "safe_softmax",
    "shapes",
    "standard_attention_backward",
    "tiled_online_softmax",
    "tiled_row_recurrence",
    "visibility",
]

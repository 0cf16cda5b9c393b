"""BUG: a float32 kernel whose accumulator (acc, l) is kept in bfloat16."""
import torch

from tests.buggy_kernels.blocked import Blocked, kernel


class Bf16Accumulation(Blocked):
    acc_dtype = torch.bfloat16


attention = kernel(Bf16Accumulation())

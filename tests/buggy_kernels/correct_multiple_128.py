"""CORRECT: N a multiple of 128 only (declared: seq_multiple = 128; raises otherwise)."""
from tests.buggy_kernels.blocked import kernel
from tests.buggy_kernels.restricted import Multiple128


class Kernel(Multiple128):
    pass


attention = kernel(Kernel())

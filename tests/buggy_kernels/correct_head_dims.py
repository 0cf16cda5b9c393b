"""CORRECT: head dims 64 and 128 only (declared: head_dims; raises otherwise)."""
from tests.buggy_kernels.blocked import kernel
from tests.buggy_kernels.restricted import HeadDims64And128


class Kernel(HeadDims64And128):
    pass


attention = kernel(Kernel())

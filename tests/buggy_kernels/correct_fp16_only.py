"""CORRECT: float16 only (declared: dtypes; raises otherwise)."""
from tests.buggy_kernels.blocked import kernel
from tests.buggy_kernels.restricted import Fp16Only


class Kernel(Fp16Only):
    pass


attention = kernel(Kernel())

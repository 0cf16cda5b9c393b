"""CORRECT: no N = 1 (declared: min_n = 2; raises otherwise)."""
from tests.buggy_kernels.blocked import kernel
from tests.buggy_kernels.restricted import NoSingleToken


class Kernel(NoSingleToken):
    pass


attention = kernel(Kernel())

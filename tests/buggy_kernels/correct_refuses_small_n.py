"""CORRECT where it runs: raises for N < 16, undeclared (refusals listed, exit 0)."""
from tests.buggy_kernels.blocked import kernel
from tests.buggy_kernels.restricted import RefusesSmallN


class Kernel(RefusesSmallN):
    pass


attention = kernel(Kernel())

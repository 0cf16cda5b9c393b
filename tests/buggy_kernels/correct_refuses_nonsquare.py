"""CORRECT where it runs: raises for Nq != Nk, undeclared (refusals listed, exit 0)."""
from tests.buggy_kernels.blocked import kernel
from tests.buggy_kernels.restricted import RefusesNonSquare


class Kernel(RefusesNonSquare):
    pass


attention = kernel(Kernel())

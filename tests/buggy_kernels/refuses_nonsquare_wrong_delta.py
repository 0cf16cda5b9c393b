"""BUG in a kernel that also refuses Nq != Nk: the backward's Delta is wrong."""
from tests.buggy_kernels.blocked import kernel
from tests.buggy_kernels.restricted import RefusesNonSquare
from tests.buggy_kernels.wrong_delta import WrongDelta


class Kernel(RefusesNonSquare, WrongDelta):
    pass


attention = kernel(Kernel())

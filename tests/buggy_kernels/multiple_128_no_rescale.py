"""BUG in a restricted-domain kernel (N a multiple of 128): the accumulator is not rescaled."""
from tests.buggy_kernels.blocked import kernel
from tests.buggy_kernels.no_rescale import NoRescale
from tests.buggy_kernels.restricted import Multiple128


class Kernel(Multiple128, NoRescale):
    pass


attention = kernel(Kernel())

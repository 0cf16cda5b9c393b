"""BUG in a restricted-domain kernel (no N = 1): the last partial key tile is dropped."""
from tests.buggy_kernels.blocked import kernel
from tests.buggy_kernels.drop_partial_tile import DropPartialTile
from tests.buggy_kernels.restricted import NoSingleToken


class Kernel(NoSingleToken, DropPartialTile):
    pass


attention = kernel(Kernel())

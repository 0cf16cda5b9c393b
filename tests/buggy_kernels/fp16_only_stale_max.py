"""BUG in a restricted-domain kernel (float16 only): the running max goes stale."""
from tests.buggy_kernels.blocked import kernel
from tests.buggy_kernels.restricted import Fp16Only
from tests.buggy_kernels.stale_max import StaleMax


class Kernel(Fp16Only, StaleMax):
    pass


attention = kernel(Kernel())

"""BUG in a bottom-right kernel: the causal mask hides the diagonal."""
from tests.buggy_kernels.blocked import kernel
from tests.buggy_kernels.causal_off_by_one import CausalOffByOne
from tests.buggy_kernels.restricted import BottomRight


class Kernel(BottomRight, CausalOffByOne):
    pass


attention = kernel(Kernel())

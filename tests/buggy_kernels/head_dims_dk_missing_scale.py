"""BUG in a restricted-domain kernel (head dims 64, 128): dK misses the softmax scale."""
from tests.buggy_kernels.blocked import kernel
from tests.buggy_kernels.dk_missing_scale import DkMissingScale
from tests.buggy_kernels.restricted import HeadDims64And128


class Kernel(HeadDims64And128, DkMissingScale):
    pass


attention = kernel(Kernel())

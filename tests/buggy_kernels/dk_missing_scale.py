"""BUG: dK = dSᵀ Q without the softmax scale."""
from tests.buggy_kernels.blocked import Blocked, kernel


class DkMissingScale(Blocked):
    def dk_scale(self, scale):
        return 1.0


attention = kernel(DkMissingScale())

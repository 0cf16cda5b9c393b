"""BUG: the accumulator is not rescaled when the running max grows (l is, acc is not)."""
from tests.buggy_kernels.blocked import Blocked, kernel


class NoRescale(Blocked):
    def rescale(self, acc, l, alpha):
        return acc, l * alpha


attention = kernel(NoRescale())

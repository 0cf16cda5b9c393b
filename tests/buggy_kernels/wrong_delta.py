"""BUG: the backward's Δ is rowsum(dO) instead of rowsum(dO ∘ O)."""
from tests.buggy_kernels.blocked import Blocked, kernel


class WrongDelta(Blocked):
    def delta(self, do, o):
        return do.sum(-1)


attention = kernel(WrongDelta())

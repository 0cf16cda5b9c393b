"""BUG: the returned LSE is in base 2 (log2 of the row sum, as kept inside an exp2 kernel)."""
import math

from tests.buggy_kernels.blocked import Blocked, kernel


class LseBase2(Blocked):
    def finalize(self, acc, l, m):
        o, lse = super().finalize(acc, l, m)
        return o, lse / math.log(2.0)


attention = kernel(LseBase2())

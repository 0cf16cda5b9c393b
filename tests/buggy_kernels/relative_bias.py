"""BUG: O carries a 1e-5 relative bias (e.g. a mis-rounded normalization constant) in float32."""
from tests.buggy_kernels.blocked import Blocked, kernel


class RelativeBias(Blocked):
    def finalize(self, acc, l, m):
        o, lse = super().finalize(acc, l, m)
        return o * (1 + 1e-5), lse


attention = kernel(RelativeBias())

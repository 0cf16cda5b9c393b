"""BUG: the `scale` argument is accepted but 1/sqrt(d) is always used."""
from tests.buggy_kernels.blocked import Blocked, kernel


class IgnoresScale(Blocked):
    def forward(self, q, k, v, causal=False, scale=None, window=None, mask=None):
        return super().forward(q, k, v, causal, None, window, mask)


attention = kernel(IgnoresScale())

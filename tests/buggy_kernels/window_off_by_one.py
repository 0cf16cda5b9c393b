"""BUG: the sliding window's right edge is exclusive (j < i + off + right)."""
from tests.buggy_kernels.blocked import Blocked, kernel


class WindowOffByOne(Blocked):
    def visible(self, Nq, Nk, j0, j1, causal, window, device):
        if window is not None and window[1] is not None:
            window = (window[0], window[1] - 1)
        return super().visible(Nq, Nk, j0, j1, causal, window, device)


attention = kernel(WindowOffByOne())

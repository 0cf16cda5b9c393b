"""BUG: no safe max: a fully masked row computes exp((−inf) − (−inf)) = NaN, and O = acc / 0."""
from tests.buggy_kernels.blocked import Blocked, kernel


class UnsafeMaskedRows(Blocked):
    def shift(self, m):
        return m

    def finalize(self, acc, l, m):
        import torch

        return acc / l[..., None], m + torch.log(l)


attention = kernel(UnsafeMaskedRows())

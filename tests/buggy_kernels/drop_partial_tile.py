"""BUG: the last partial K/V tile is dropped (the loop runs over Nk // block_k full tiles)."""
from tests.buggy_kernels.blocked import Blocked, kernel


class DropPartialTile(Blocked):
    block_k = 16

    def tiles(self, Nk):
        return [(j0, j0 + self.block_k) for j0 in range(0, Nk - self.block_k + 1, self.block_k)]


attention = kernel(DropPartialTile())

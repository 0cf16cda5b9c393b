"""BUG: the running max is taken from the first tile and never updated afterwards."""
from tests.buggy_kernels.blocked import Blocked, kernel


class StaleMax(Blocked):
    block_k = 16

    def new_max(self, m, tile_max, first):
        return tile_max if first else m


attention = kernel(StaleMax())

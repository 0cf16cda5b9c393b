"""CORRECT: the blocked kernel with 16-key tiles (many rescalings per row)."""
from tests.buggy_kernels.blocked import Blocked, kernel


class SmallTiles(Blocked):
    block_k = 16


attention = kernel(SmallTiles())

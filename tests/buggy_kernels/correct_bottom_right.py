"""CORRECT: causal=True means bottom-right alignment (declared: causal_alignment)."""
from tests.buggy_kernels.blocked import kernel
from tests.buggy_kernels.restricted import BottomRight


class Kernel(BottomRight):
    pass


attention = kernel(Kernel())

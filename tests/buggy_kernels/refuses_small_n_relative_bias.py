"""BUG in a kernel that also refuses N < 16: a relative-position bias is added to the logits."""
from tests.buggy_kernels.blocked import kernel
from tests.buggy_kernels.relative_bias import RelativeBias
from tests.buggy_kernels.restricted import RefusesSmallN


class Kernel(RefusesSmallN, RelativeBias):
    pass


attention = kernel(Kernel())

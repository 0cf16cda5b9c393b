"""BUG: the causal mask hides the diagonal (j < i + off instead of j <= i + off)."""
from tests.buggy_kernels.blocked import Blocked, kernel


class CausalOffByOne(Blocked):
    def visible(self, Nq, Nk, j0, j1, causal, window, device):
        ok = super().visible(Nq, Nk, j0, j1, False, window, device)
        if causal:
            import torch

            i = torch.arange(Nq, device=device)[:, None]
            j = torch.arange(j0, j1, device=device)[None, :]
            off = Nk - Nq if self.alignment == "bottom_right" else 0
            ok &= j < i + off
        return ok


attention = kernel(CausalOffByOne())

"""BUG: query head h reads kv head h % Hkv instead of h // (Hq // Hkv)."""
import torch

from tests.buggy_kernels.blocked import Blocked, kernel


class GqaHeadMapping(Blocked):
    def kv_heads(self, Hq, Hkv):
        return torch.arange(Hq) % Hkv


attention = kernel(GqaHeadMapping())

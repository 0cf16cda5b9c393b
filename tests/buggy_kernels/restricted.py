"""Correct kernels with a restricted domain: each raises on the inputs it does not take, declared (so
the suite generates inside the domain) or not (so the suite records refusals). The planted bugs of the
catalog combine with them (e.g. `class Bug(Multiple128, NoRescale)`) to show that a restricted domain
or a refusal never hides a wrong answer."""
import torch

from tests.buggy_kernels.blocked import Blocked


class Multiple128(Blocked):
    domain = {"seq_multiple": 128}

    def check(self, q, k, v, causal, mask):
        if q.shape[2] % 128 or k.shape[2] % 128:
            raise RuntimeError(f"sequence lengths must be multiples of 128, got Nq={q.shape[2]}, Nk={k.shape[2]}")


class HeadDims64And128(Blocked):
    domain = {"head_dims": (64, 128)}

    def check(self, q, k, v, causal, mask):
        if q.shape[-1] not in (64, 128):
            raise ValueError(f"head dim must be 64 or 128, got {q.shape[-1]}")


class Fp16Only(Blocked):
    domain = {"dtypes": ("float16",)}

    def check(self, q, k, v, causal, mask):
        if q.dtype != torch.float16:
            raise TypeError(f"expected float16 inputs, got {q.dtype}")


class NoSingleToken(Blocked):
    domain = {"min_n": 2}

    def check(self, q, k, v, causal, mask):
        if q.shape[2] == 1 or k.shape[2] == 1:
            raise RuntimeError("N = 1 is not supported")


class BottomRight(Blocked):
    alignment = "bottom_right"


class RefusesSmallN(Blocked):
    """Raises for N < 16, and does not declare it: the suite lists the refusals."""

    def check(self, q, k, v, causal, mask):
        if q.shape[2] < 16 or k.shape[2] < 16:
            raise RuntimeError(f"No available kernel for N < 16 (Nq={q.shape[2]}, Nk={k.shape[2]})")


class RefusesNonSquare(Blocked):
    """Raises for Nq != Nk, undeclared."""

    def check(self, q, k, v, causal, mask):
        if q.shape[2] != k.shape[2]:
            raise NotImplementedError("Nq != Nk is not implemented")

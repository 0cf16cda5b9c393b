"""The typed results of the bounds: `ForwardBound`, `BackwardBound`."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .precision import (Precision)


# ----------------------------------------------------------------------------------------------
# Results
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ForwardBound:
    """Elementwise bounds: .o has O's shape (B, Hq, Nq, dv), .lse is (B, Hq, Nq).
    A fully masked row has bound 0 (O = 0 and LSE = -inf are compared exactly)."""

    o: np.ndarray
    lse: np.ndarray
    kind: str
    precision: Precision


@dataclass(frozen=True)
class BackwardBound:
    """Elementwise bounds with the shapes of dq (B, Hq, Nq, d), dk (B, Hkv, Nk, d), dv (B, Hkv, Nk, dv)."""

    dq: np.ndarray
    dk: np.ndarray
    dv: np.ndarray
    kind: str
    precision: Precision

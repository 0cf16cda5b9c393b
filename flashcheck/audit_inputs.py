"""Inputs of the numerical-stability audit: the value distributions and the logit-scale grid.

Every generator works in float64 NumPy from a seed; the audit then rounds to the kernel's dtype and
reads the rounded values back, so the reference and the bounds see exactly what the kernel saw.
"""
from __future__ import annotations

import numpy as np

from flashcheck.strategies import Shape

# FA3-style outliers: 0.1% of the entries get an extra N(0, 100) term (variance 100, std 10).
OUTLIER_FRACTION = 1e-3
OUTLIER_STD = 10.0
# "peaked logits" (the FA3 paper's "large logits"; flashcheck.strategies' large_logits go up to the
# overflow edge instead): q and k multiplied by 4, so the logits scale * q.k have standard deviation 16
# (instead of 1): the softmax is far from uniform and the max-subtraction matters.
LARGE_LOGIT_FACTOR = 4.0

DISTRIBUTIONS = ("normal", "outliers", "peaked_logits")


def _outliers(rng: np.random.Generator, shape) -> np.ndarray:
    x = rng.standard_normal(shape)
    hit = rng.random(shape) < OUTLIER_FRACTION
    return x + hit * rng.normal(0.0, OUTLIER_STD, shape)


def make_inputs(shape: Shape, distribution: str, seed: int, logit_scale: float = 1.0):
    """(q, k, v, do) float64 arrays in (B, H, N, d) layout.

    `logit_scale` c multiplies q and k by sqrt(c) each, so the logits (with scale = 1/sqrt(d))
    have standard deviation c for normal inputs. `do` is the upstream gradient, always N(0, 1).
    """
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"distribution must be one of {DISTRIBUTIONS}, got {distribution!r}")
    rng = np.random.default_rng(seed)
    dims = (shape.B, shape.Hq, shape.Nq, shape.d)  # self-attention: Hkv = Hq, Nk = Nq
    draw = _outliers if distribution == "outliers" else (lambda r, s: r.standard_normal(s))
    q, k, v = draw(rng, dims), draw(rng, dims), draw(rng, dims)
    do = rng.standard_normal(dims)
    factor = np.sqrt(logit_scale) * (LARGE_LOGIT_FACTOR if distribution == "peaked_logits" else 1.0)
    return q * factor, k * factor, v, do


def max_abs_logit(q: np.ndarray, k: np.ndarray) -> float:
    """max |scale * q_i . k_j| with the default scale 1/sqrt(d)."""
    s = np.einsum("bhid,bhjd->bhij", q, k) / np.sqrt(q.shape[-1])
    return float(np.max(np.abs(s)))


def overflow_edge(dtype_max: float, unit_max_logit: float) -> float:
    """The logit scale c at which the largest |logit| reaches half the dtype's largest finite value.

    With q, k scaled by sqrt(c), the logits scale by c; `unit_max_logit` is max |logit| at c = 1 for
    the same seed. Past this edge an unfused path that stores the logits in the input dtype
    overflows (fp16: 65504); a fused kernel accumulating in fp32 should not care.
    """
    return 0.5 * dtype_max / unit_max_logit


def logit_scales(edge: float, extra_points: int = 2) -> list[float]:
    """1, 10, 100, ... below the edge, then `extra_points` geometric steps up to (and including) it."""
    decades = [10.0**p for p in range(0, 5) if 10.0**p < edge]
    top = decades[-1]
    tail = list(np.geomspace(top, edge, extra_points + 1)[1:]) if edge > top else []
    return [float(f"{c:.3g}") for c in decades + tail]

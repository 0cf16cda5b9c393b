"""Structured input families: the inputs on which error bounds built from random-rounding models break.

Random inputs make rounding errors look independent and mean-zero; these families make them
systematic instead (equal summands that round the same way every step, a running max that changes
every tile, accumulators that grow monotonically), which is what an a-priori bound must survive
(issue "Derived bounds that hold for the kernel as it really computes").

Every generator works in float64 NumPy from a `numpy.random.Generator`; callers round to the kernel's
dtype and read the rounded values back (as `flashcheck.strategies.materialize` and the audit do), so the
reference and the bounds see exactly what the kernel saw. Shapes follow ARCHITECTURE.md:
q (B, Hq, Nq, d), k (B, Hkv, Nk, d), v (B, Hkv, Nk, dv), do (B, Hq, Nq, dv).

Families:
- ``uniform_rows``: q = 0, so every logit is 0 and every row attends uniformly (P = 1/Nk, all equal);
- ``constant_v``: uniform rows and every column of V constant (O = that constant exactly), dO constant
  per column as well (dP − Δ = 0 exactly: dQ, dK are pure rounding);
- ``near_constant_v``: nearly uniform rows (logits ~1e-2) and V columns constant up to 2^-8 relative;
- ``v_large_mean``: random logits, V = 16 + 2^-4 · N(0, 1) (a large mean with a small spread: O is
  the mean plus a small correction, cancellation in V − O);
- ``rising_logits``: logits rising linearly along the keys (scale·q·k_j = R · j / Nk, R = 12), so the
  running max grows in every tile and every rescale factor alpha is below 1;
- ``repeated_keys``: the keys drawn from a pool of 3 distinct rows (many exactly equal logits).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FAMILIES = ("uniform_rows", "constant_v", "near_constant_v", "v_large_mean", "rising_logits",
            "repeated_keys")

RISE = 12.0  # total logit rise across the keys in ``rising_logits`` (exp(-12) ~ 6e-6: early keys still count)
V_MEAN, V_SPREAD = 16.0, 2.0**-4  # ``v_large_mean``
NEAR_CONSTANT_SPREAD = 2.0**-8  # relative spread of ``near_constant_v`` columns
NEAR_UNIFORM_LOGIT = 1e-2  # logit magnitude of ``near_constant_v`` rows
KEY_POOL = 3  # distinct key rows in ``repeated_keys``


@dataclass(frozen=True)
class Unrounded:
    """float64 q, k, v and the upstream gradient do, before rounding to any dtype (what
    `flashcheck.strategies.Inputs` holds after rounding, with the mask and scale)."""
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    do: np.ndarray


def structured_inputs(family: str, B: int, Hq: int, Hkv: int, Nq: int, Nk: int, d: int,
                      rng: np.random.Generator, *, dv: int | None = None,
                      scale: float | None = None) -> Unrounded:
    """One draw of `family` (see the module docstring) at this shape; `scale` is the logit scale the
    kernel will use (default 1/sqrt(d)), needed where the family fixes the logits themselves."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    dv = d if dv is None else dv
    scale = 1.0 / np.sqrt(d) if scale is None else float(scale)
    qs, ks, vs, dos = (B, Hq, Nq, d), (B, Hkv, Nk, d), (B, Hkv, Nk, dv), (B, Hq, Nq, dv)
    k = rng.standard_normal(ks)
    v = rng.standard_normal(vs)
    do = rng.standard_normal(dos)
    if family == "uniform_rows":
        q = np.zeros(qs)
    elif family == "constant_v":
        q = np.zeros(qs)
        v = np.broadcast_to(rng.uniform(0.05, 1.0, (B, Hkv, 1, dv)), vs).copy()
        do = np.broadcast_to(rng.uniform(-1.0, 1.0, (B, Hq, 1, dv)), dos).copy()
    elif family == "near_constant_v":
        q = rng.standard_normal(qs) * (NEAR_UNIFORM_LOGIT / (scale * np.sqrt(d)))
        base = rng.uniform(0.05, 1.0, (B, Hkv, 1, dv))
        v = base * (1.0 + NEAR_CONSTANT_SPREAD * rng.standard_normal(vs))
    elif family == "v_large_mean":
        q = rng.standard_normal(qs)
        v = V_MEAN + V_SPREAD * rng.standard_normal(vs)
    elif family == "rising_logits":
        # q_i = a u and k_j = t_j u for one unit direction u: scale q_i . k_j = scale a t_j = RISE j / Nk
        u = rng.standard_normal(d)
        u /= np.linalg.norm(u)
        a = np.sqrt(RISE / scale)
        t = np.sqrt(RISE / scale) * np.arange(Nk) / max(Nk, 1)
        q = np.broadcast_to(a * u, qs).copy()
        k = np.broadcast_to(t[:, None] * u, ks).copy()
    else:  # repeated_keys
        q = rng.standard_normal(qs)
        pool = rng.standard_normal((B, Hkv, KEY_POOL, d))
        k = np.take_along_axis(pool, rng.integers(0, KEY_POOL, (B, Hkv, Nk, 1)), axis=2)
    return Unrounded(q=q, k=k, v=v, do=do)

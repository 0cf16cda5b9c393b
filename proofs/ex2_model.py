"""The H100's ex2.approx.ftz.f32 (tl.math.exp2 on fp32) bit for bit: a measured table of its argument's fraction.

What was measured (bench/probe_mufu_tables.py on the H100, session 2026-11-26e; the report is
proofs/measurements/h100_ex2_table.json): on EVERY fp32 argument x in [-150, 8] (2,216,034,306 of them, the
range proofs/hardware_probe.py sweeps) the special-function unit returns

    ex2(x) = ftz(2^I T[k])   for x >= 0,      ex2(x) = ftz(2^-I N[k])   for x < 0,

where |x| 2^23 truncated toward zero is I 2^23 + k (0 <= k < 2^23: the magnitude in sign-magnitude fixed point
with 23 fraction bits), T[k] = ex2(k 2^-23) in [1, 2), N[k] = ex2(-k 2^-23) in [1/2, 1] (both measured: the
negative arguments take their own path, N[k] != T[2^23 - k] / 2 in general), and ftz flushes results below 2^-126
to 0. 0 mismatches. Every other fixed-point reading tried fails (two's complement floor / nearest / toward zero,
rounded magnitude, 24 fraction bits rounded: 88-934 million mismatches; the 24-bit truncated magnitude is the same
function, bit 24 is ignored).

So the exponentials our fp32 forward computes are known numbers wherever their arguments are
(Precision.exp_argument "fma"): Precision.ex2_known (proofs/bounds/precision.py) states it, and the bounds read
the values from here. The tables are stored as the first bit pattern and the int8 steps between consecutive
entries' bit patterns (the functions are monotone: steps 0..3 ulps), so nothing depends on a libm; the sha256 of
each reconstructed fp32 table is checked against the one the GPU run recorded."""
from __future__ import annotations

import hashlib
import os
from functools import lru_cache

import numpy as np

from .hardware import fp32_arguments, load_record, load_report

MEASUREMENTS = os.path.join(os.path.dirname(__file__), "measurements")
TABLE_NPZ = os.path.join(MEASUREMENTS, "h100_ex2_table.npz")
TABLE_JSON = os.path.join(MEASUREMENTS, "h100_ex2_table.json")
FRACTION_BITS = 23  # |x| is truncated to this many fraction bits before the table lookup
_FTZ = 2.0**-126  # results below the smallest normal fp32 are flushed to zero (ex2.approx.ftz.f32)


def _reconstruct(first, steps) -> np.ndarray:
    bits = np.concatenate([np.asarray(first, np.int64), np.int64(first[0]) + np.cumsum(steps, dtype=np.int64)])
    return bits.astype(np.int32).view(np.float32)


@lru_cache(maxsize=1)
def tables() -> tuple[np.ndarray, np.ndarray]:
    """(T, N): the fp32 tables of the positive and negative arguments' paths, 2^23 entries each, checked bit for
    bit against the sha256 the GPU run recorded (a reconstruction that differs raises)."""
    with np.load(TABLE_NPZ) as z:
        T = _reconstruct(z["pos_first"], z["pos_steps"])
        N = _reconstruct(z["neg_first"], z["neg_steps"])
    rec = load_report(TABLE_JSON)
    for name, t in (("pos", T), ("neg", N)):
        want = rec["tables"][name]["sha256"]
        got = hashlib.sha256(t.tobytes()).hexdigest()
        if t.size != 1 << FRACTION_BITS or got != want:
            raise RuntimeError(f"{TABLE_NPZ}: the {name} table reconstructs to sha256 {got}, the GPU run "
                               f"recorded {want}")
    return T, N


def measured() -> bool:
    """Whether the table and a GPU verification with 0 mismatches over the whole range are in the repo."""
    rec = load_record(TABLE_JSON)
    return (rec is not None and os.path.exists(TABLE_NPZ) and rec.get("mismatches") == 0 and rec.get("points", 0) >= 2_216_034_306
            and not rec.get("interpreter", True))


def ex2(x) -> np.ndarray:
    """ex2.approx.ftz.f32 of the fp32 values x (any float array holding fp32 values), bit for bit as the H100
    computes it, returned as float64. NaN stays NaN; arguments beyond [-150, 8] follow the same formula (not
    measured there: the kernels' exponents are <= 0 up to a few ulps)."""
    T, N = tables()
    x = fp32_arguments(x, "ex2_model.ex2")
    a = np.abs(x)
    with np.errstate(invalid="ignore", over="ignore"):
        K = np.floor(np.where(np.isfinite(a) & (a < 2.0**30), a, 0.0) * 2.0**FRACTION_BITS).astype(np.int64)
    whole, k = K >> FRACTION_BITS, K & ((1 << FRACTION_BITS) - 1)
    neg = x < 0
    tab = np.where(neg, N[k], T[k]).astype(np.float64)
    y = np.ldexp(tab, np.where(neg, -whole, whole).astype(np.int32))
    y = np.where(y < _FTZ, 0.0, y)
    y = np.where(np.isnan(x), np.nan, y)
    big = ~np.isfinite(a) | (a >= 2.0**30)
    return np.where(big & ~np.isnan(x), np.where(neg, 0.0, np.inf), y)

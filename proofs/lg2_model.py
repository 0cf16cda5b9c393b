"""The H100's lg2.approx.f32 (tl.math.log2 on fp32) bit for bit: a range reduction at sqrt(2), an fp32 table of the
reduced argument, one round to nearest. Measured (session 2026-11-26e).

For a positive normal x = 2^e (1 + m 2^-23):

    lg2(x) = RN32(e + R[m])         if 1 + m 2^-23 <  sqrt(2)   (m <  T = 3474676),
    lg2(x) = RN32((e + 1) + R[m])   if 1 + m 2^-23 >= sqrt(2)   (m >= T),

R[m] the fp32 the unit gives on the reduced argument r_m = 1 + m 2^-23 (m < T) or (1 + m 2^-23)/2 (m >= T), r_m in
[sqrt(2)/2, sqrt(2)); one round to nearest of the exact sum, ties to even. Found offline from whole binades dumped on
the GPU (bench/lg2_rule.py: 0 mismatches on 92,259,254 known values, the single rule RN32(e + lg2(1 + m 2^-23))
failing on 5,506,004 of them), then checked on the H100 on EVERY positive normal fp32 (2,130,706,432) with R measured
there: 0 mismatches (`bench/probe_mufu_tables.py --lg2-model`, proofs/measurements/h100_lg2_table.json; the table it
measured is proofs/measurements/h100_lg2_table.npz). R is correctly rounded on 88% of its entries, 1 ulp toward zero
on 11%, 1 ulp away on 1%. Not measured: subnormal x (the formula takes their true exponent; the kernels take lg2 of
l >= 1 only).

The table is stored as int8 steps of R's bit patterns from numpy's RN32(log2(r_m)) (float64 log2 rounded to fp32;
steps -1..1); the sha256 of the reconstructed fp32 table is checked on load, so a libm whose float64 log2 rounds
differently raises instead of giving other numbers."""
from __future__ import annotations

import hashlib
import os
from functools import lru_cache

import numpy as np

from .hardware import fp32_arguments, load_record

MEASUREMENTS = os.path.join(os.path.dirname(__file__), "measurements")
TABLE_NPZ = os.path.join(MEASUREMENTS, "h100_lg2_table.npz")  # the GPU check's lg2_table.npz
TABLE_JSON = os.path.join(MEASUREMENTS, "h100_lg2_table.json")  # the GPU check's lg2_model.json
N_M = 1 << 23
THRESHOLD = 3474676  # the first m with 1 + m 2^-23 >= sqrt(2)


def reduced_arguments() -> np.ndarray:
    """r_m in [sqrt(2)/2, sqrt(2)), float64 (exact fp32 values)."""
    m = np.arange(N_M)
    x0 = 1.0 + m * 2.0**-23
    return np.where(m >= THRESHOLD, x0 / 2, x0)


@lru_cache(maxsize=1)
def table() -> tuple[np.ndarray, np.ndarray]:
    """(R, measured): R fp32 over m < 2^23, and which entries a GPU measured (all, in the stored table)."""
    path = TABLE_NPZ
    with np.load(path) as z:
        if int(z["threshold"]) != THRESHOLD:
            raise RuntimeError(f"{path}: threshold {int(z['threshold'])}, expected {THRESHOLD}")
        ref = np.log2(reduced_arguments()).astype(np.float32)
        R = (ref.view(np.int32) + z["delta"].astype(np.int32)).view(np.float32)
        measured = z["measured"].astype(bool)
        want = str(z["sha256"])
    got = hashlib.sha256(R.tobytes()).hexdigest()
    if got != want:
        raise RuntimeError(f"{path}: the table reconstructs to sha256 {got}, the file records {want} (numpy's log2 "
                           "rounds differently here)")
    return R, measured


def measured() -> bool:
    """Whether the GPU-measured table and its exhaustive check with 0 mismatches are in the repo."""
    rec = load_record(TABLE_JSON)
    return (rec is not None and os.path.exists(TABLE_NPZ) and rec.get("measured_R", {}).get("mismatch") == 0
            and rec.get("points", 0) >= 2_130_706_432 and not rec.get("interpreter", True))


def lg2(x) -> np.ndarray:
    """lg2.approx.f32 of the fp32 values x, bit for bit as the H100 computes it (by the rule above), returned as
    float64. 0 -> -inf, negative -> NaN, +inf -> +inf, NaN -> NaN."""
    R, _ = table()
    x = fp32_arguments(x, "lg2_model.lg2")
    pos = np.isfinite(x) & (x > 0)
    xs = np.where(pos, x, 1.0)
    mant, ex = np.frexp(xs)  # xs = mant 2^ex, mant in [1/2, 1): exact, subnormals included
    e = ex.astype(np.int64) - 1
    m = np.rint((mant * 2 - 1) * 2.0**23).astype(np.int64)
    a = e + (m >= THRESHOLD)
    # RN32(a + R[m]) by one float64 sum: exact unless |a| >= 64 and |R| < 2^-23, and then both roundings give a
    y = (a.astype(np.float64) + R[m].astype(np.float64)).astype(np.float32).astype(np.float64)
    with np.errstate(invalid="ignore"):
        special = np.where(x == 0, -np.inf, np.where(x == np.inf, np.inf, np.nan))
    return np.where(pos, y, special)

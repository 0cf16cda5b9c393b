"""The H100's lg2.approx.f32 (tl.math.log2 on fp32) bit for bit: a range reduction at sqrt(2), an fp32 table of the
reduced argument, one round to nearest. DRAFT: found offline, the exhaustive GPU check is pending.

What was measured (bench/probe_mufu_tables.py on the H100, session 2026-11-26e; bench/results/h100-2026-11-26e/mufu):
lg2 at e = 0 on every fp32 of [1, 2), and on 10 whole binades e in {-126, -20, -2, -1, 1, 2, 7, 8, 20, 127}
(as int8 steps from RN32(e + L[m]), clamped: 15434 entries of e = -1 next to x = 1 are unknown).

What was found offline (bench/lg2_rule.py): for a positive normal x = 2^e (1 + m 2^-23),

    lg2(x) = RN32(e + R[m])         if 1 + m 2^-23 <  sqrt(2)   (m <  T = 3474676),
    lg2(x) = RN32((e + 1) + R[m])   if 1 + m 2^-23 >= sqrt(2)   (m >= T),

where R[m] is the fp32 the unit gives on the reduced argument r_m = 1 + m 2^-23 (m < T) or (1 + m 2^-23)/2 (m >= T),
r_m in [sqrt(2)/2, sqrt(2)): R = the e = 0 values below T, the e = -1 values from T on. One round to nearest of the
exact sum, ties to even. 0 mismatches on every known entry of the 11 binades (92,259,254 values; the 9 binades other
than e = 0 and e = -1, and e = -1 below T and e = 0 from T on, are predictions, not fits). The single rule
RN32(e + L[m]) fails on 5,506,004 of them (all from m = T on: the mirrored step counts of e and -e-1).
R itself is relatively accurate on both sides of 1: correctly rounded on 88% of the known entries, 1 ulp toward zero
on 11%, 1 ulp away from zero on 1% (those only where |R| >= 1/8).

Hypothesis, not yet measured: (1) the rule on the binades not dumped (the check: every positive normal fp32,
`probe_mufu_tables.py --lg2-model`); (2) the 15434 entries of R with m >= 8343346 (|R| < 0.0039) that the dump
clamped are filled by a smooth fit (held-out known entries: 18 of 25072 wrong), flagged `measured = False`; the GPU
check measures R directly and writes the complete table (lg2_table.npz), which replaces the candidate here as
proofs/measurements/h100_lg2_table.npz. (3) Subnormal x follow the same formula with their true exponent (not
measured; the kernels take lg2 of l >= 1 only).

The table is stored as int8 steps of R's bit patterns from numpy's RN32(log2(r_m)) (float64 log2 rounded to fp32;
steps -1..1); the sha256 of the reconstructed fp32 table is checked on load, so a libm whose float64 log2 rounds
differently raises instead of giving other numbers."""
from __future__ import annotations

import hashlib
import os
from functools import lru_cache

import numpy as np

MEASUREMENTS = os.path.join(os.path.dirname(__file__), "measurements")
TABLE_NPZ = os.path.join(MEASUREMENTS, "h100_lg2_table.npz")  # written from the GPU check's lg2_table.npz
CANDIDATE_NPZ = os.path.join(os.path.dirname(__file__), "..", "bench", "results", "h100-2026-11-26e", "mufu",
                             "lg2_model_candidate.npz")
N_M = 1 << 23
THRESHOLD = 3474676  # the first m with 1 + m 2^-23 >= sqrt(2)


def reduced_arguments() -> np.ndarray:
    """r_m in [sqrt(2)/2, sqrt(2)), float64 (exact fp32 values)."""
    m = np.arange(N_M)
    x0 = 1.0 + m * 2.0**-23
    return np.where(m >= THRESHOLD, x0 / 2, x0)


@lru_cache(maxsize=1)
def table() -> tuple[np.ndarray, np.ndarray]:
    """(R, measured): R fp32 over m < 2^23, and which entries a GPU measured (the candidate fills 15434 by a fit)."""
    path = TABLE_NPZ if os.path.exists(TABLE_NPZ) else CANDIDATE_NPZ
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
    """Whether the GPU-measured table (and with it the exhaustive check) is in the repo."""
    return os.path.exists(TABLE_NPZ)


def lg2(x) -> np.ndarray:
    """lg2.approx.f32 of the fp32 values x, bit for bit as the H100 computes it (by the rule above), returned as
    float64. 0 -> -inf, negative -> NaN, +inf -> +inf, NaN -> NaN."""
    R, _ = table()
    x = np.asarray(x, dtype=np.float64)
    if np.any(np.isfinite(x) & (x.astype(np.float32).astype(np.float64) != x)):
        raise ValueError("lg2_model.lg2: the arguments must be fp32 values (the hardware's input)")
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

"""lg2.approx.f32's rule (tl.math.log2 on fp32, H100), found offline from the measured dumps (session 2026-11-26e).

Data (bench/probe_mufu_tables.py on the H100, in bench/results/h100-2026-11-26e/mufu/): L[m] = lg2(1 + m 2^-23)
(lg2_table_e0.npz) and, for 10 binades e, lg2((1 + m 2^-23) 2^e) as int8 steps from RN32(e + L[m]) clamped to
+-127 (mufu_lg2_dump.npz; in e = -1, 15434 entries near x = 1 hit the clamp and are unknown).

The rule found (0 mismatches on every known entry of the 11 binades):

    x = 2^e (1 + m 2^-23):   lg2(x) = RN32(e + R[m])         for 1 + m 2^-23 <  sqrt(2)  (m <  T = 3474676),
                             lg2(x) = RN32((e + 1) + R[m])   for 1 + m 2^-23 >= sqrt(2)  (m >= T),

R[m] = the fp32 value lg2 gives on the reduced argument in [sqrt(2)/2, sqrt(2)): R[m] = L[m] for m < T (measured at
e = 0) and R[m] = lg2((1 + m 2^-23) / 2) for m >= T (measured at e = -1, where (e + 1) + R = R). The hardware
reduces the mantissa around 1 (m >= sqrt(2) goes to m/2, exponent + 1), evaluates an fp32 lg2 on [sqrt(2)/2,
sqrt(2)) -- relatively accurate near 1 on both sides: correctly rounded or 1 ulp toward zero -- and adds the
exponent with one round to nearest. Hence the mirrored step counts of e and -e-1 in the dump: RN32(e + RN32(1 + R))
against RN32((e + 1) + R).

The 15434 entries R[m] the e = -1 dump clamped (m >= 8343346, |R| < 0.0039) are filled by a smooth fit (relative
error of the measured R near x = 1 as a polynomial in the reduced fraction; held-out known entries: ~0.07% wrong)
and flagged `measured = False` in the candidate; the GPU check (probe_mufu_tables.py --lg2-model) measures R
directly and writes the complete table.

Writes bench/results/h100-2026-11-26e/mufu/lg2_model_candidate.npz: `delta` (int8, 2^23): R[m]'s bit pattern minus
that of RN32(log2(r_m)) (numpy float64 log2 rounded to fp32; r_m the reduced argument), `measured` (bool, 2^23),
`threshold` (T), `sha256` (of R as fp32 bytes, checked on load).

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 bench/lg2_rule.py
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys

import numpy as np

DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "h100-2026-11-26e", "mufu")
ES = [-126, -20, -2, -1, 1, 2, 7, 8, 20, 127]
N = 1 << 23
T = 3474676  # first m with 1 + m 2^-23 >= sqrt(2)


def key(e: int) -> str:
    return f"e{e}".replace("-", "m")


def load():
    m = np.arange(N)
    x0 = 1.0 + m * 2.0**-23
    with np.load(os.path.join(DIR, "lg2_table_e0.npz")) as z:
        L = (np.log2(x0).astype(np.float32).view(np.int32) + z["lg2_delta"]).view(np.float32)
    assert np.all(np.diff(L) >= 0), "L is not monotone"
    ys = {0: (L, np.ones(N, bool))}
    with np.load(os.path.join(DIR, "mufu_lg2_dump.npz")) as z:
        for e in ES:
            d = z[key(e)].astype(np.int32)
            ref = (e + L.astype(np.float64)).astype(np.float32)
            ys[e] = ((ref.view(np.int32) + d).view(np.float32), np.abs(d) < 127)  # (value, known)
    return x0, L, ys


def rn32_sum(a, r):
    """RN32(a + r), a integers (|a| <= 128), r fp32: the float64 sum is exact unless |a| >= 64 and |r| < 2^-23, and
    then both roundings give a (r is far below half an fp32 ulp of a)."""
    return (np.asarray(a, np.float64) + np.asarray(r, np.float32).astype(np.float64)).astype(np.float32)


def report(name, ys, pred_fn):
    """Mismatches of pred_fn(e) (fp32 over m) against every known entry, per binade."""
    counts = {}
    for e, (y, known) in ys.items():
        p = pred_fn(e)
        counts[e] = int(((p.view(np.int32) != y.view(np.int32)) & known).sum())
    tot = sum(counts.values())
    print(f"{name:58s} total {tot:10d} | " + " ".join(f"{e}:{c}" for e, c in sorted(counts.items())), flush=True)
    return counts


def ulp_gaps(y):
    y = y.astype(np.float32)
    up = np.nextafter(y, np.float32(np.inf)).astype(np.float64) - y
    dn = y.astype(np.float64) - np.nextafter(y, np.float32(-np.inf))
    return dn, up


def interval_test(ys, mode):
    """Is there, per m, ONE real G with lg2(2^e (1+m 2^-23)) = round_mode(e + G) in every binade? Returns the
    number of m whose intervals do not intersect (closed intervals: ties are not resolved), and (lo, hi)."""
    lo = np.full(N, -np.inf)
    hi = np.full(N, np.inf)
    for e, (y, known) in ys.items():
        dn, up = ulp_gaps(y)
        v = y.astype(np.float64)
        if mode == "nearest":
            a, b = v - dn / 2, v + up / 2
        elif mode == "toward zero":
            a, b = np.where(v >= 0, v, v - dn), np.where(v >= 0, v + up, v)
        elif mode == "down":
            a, b = v, v + up
        else:  # up
            a, b = v - dn, v
        lo = np.maximum(lo, np.where(known, a - e, -np.inf))
        hi = np.minimum(hi, np.where(known, b - e, np.inf))
    return int((lo > hi).sum()), lo, hi


def fill_unknown(x0, R, measured, deg=2, fit_from=1 << 16):
    """R for the entries the dump clamped: the measured relative error of R near x = 1 (m >= N - fit_from) as a
    polynomial of degree deg in the reduced fraction, RN32. Returns (filled R, held-out mismatch count, held out)."""
    idx = np.arange(N)
    r = x0 / 2
    t = np.log2(r)
    f = r - 1
    sel = (idx >= N - fit_from) & measured
    scale = np.abs(f[sel]).max()

    def fit(s):
        coef, *_ = np.linalg.lstsq(np.vander(f[s] / scale, deg + 1), (R[s] - t[s]) / t[s], rcond=None)
        return coef

    def pred(coef, s):
        return (t[s] * (1 + np.vander(f[s] / scale, deg + 1) @ coef)).astype(np.float32)

    odd, even = sel & (idx % 2 == 1), sel & (idx % 2 == 0)
    held = int((pred(fit(odd), even) != R[even]).sum())
    out = R.copy()
    miss = (idx >= T) & ~measured
    out[miss] = pred(fit(sel), miss)
    return out, held, int(even.sum())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args(argv)
    x0, L, ys = load()
    m = np.arange(N)
    hi_half = m >= T
    print("known entries per binade:", {e: int(k.sum()) for e, (_, k) in ys.items()})

    print("\n== H0: lg2(2^e m) = RN32(e + L[m]), L measured at e = 0 (the probe's hypothesis)")
    report("RN32(e + L[m])", ys, lambda e: rn32_sum(e, L))
    first = min(int(np.nonzero((ys[e][0] != rn32_sum(e, L)) & ys[e][1])[0].min()) for e in ES)
    print(f"   first mismatching m over all binades: {first} (1 + m 2^-23 = {x0[first]!r}; sqrt(2) = {np.sqrt(2)!r})")

    print("\n== H-real: one real G(m) per m, lg2 = round(e + G) in every known binade (count of m with no such G)")
    for mode in ("nearest", "toward zero", "down", "up"):
        c, lo, hi = interval_test(ys, mode)
        print(f"   {mode:12s}: {c:9d} m without a G")
        if mode == "nearest":
            lo_n, hi_n = lo, hi
    print("\n== H-fixed: G(m) a fixed-point number with K fraction bits (round to nearest; m without a multiple of 2^-K)")
    for K in (24, 26, 28, 30, 32, 34, 36, 38, 40, 44):
        bad = np.ceil(lo_n * 2.0**K) > np.floor(hi_n * 2.0**K)
        print(f"   K = {K}: {int(bad.sum()):9d}  (m < T: {int(bad[:T].sum())}, m >= T: {int(bad[T:].sum())})")
    print("   -> no fixed point: G needs relative precision (the failures halve with every bit; they sit near x = 1)")
    mid = (lo_n + hi_n) / 2
    ex = np.floor(np.log2(np.maximum(np.abs(mid), 1e-300)))
    print("== H-float: G(m) a float with p significant bits (m without one)")
    for p in (24, 26, 28, 32, 36, 38):
        q = 2.0 ** (ex - (p - 1))
        bad = np.ceil(lo_n / q) > np.floor(hi_n / q)
        print(f"   p = {p}: {int(bad.sum()):9d}  (m < T: {int(bad[:T].sum())}, m >= T: {int(bad[T:].sum())})")
    print("   -> below sqrt(2) an fp32 G (= L) suffices; above, G = 1 + R with R an fp32 of [-0.5, 0): the reduction")

    yq, kq = ys[-1]
    R = np.where(hi_half, yq, L)
    measured = np.where(hi_half, kq, True)

    def h1(R_, thr):
        hh = m >= thr
        return lambda e: np.where(hh, rn32_sum(e + 1, R_), rn32_sum(e, R_))

    print("\n== H1: range reduction at sqrt(2): RN32(e + R[m]) below T, RN32((e+1) + R[m]) from T on;"
          "\n   R = L below T, the e = -1 value from T on (entries with R unknown are skipped)")
    ys_k = {e: (y, k & measured) for e, (y, k) in ys.items()}
    report("H1, threshold T = 3474676 (1 + m 2^-23 >= sqrt 2)", ys_k, h1(R, T))
    for dT in (1, 16, 4096):
        report(f"H1, threshold T + {dT} (L used on [T, T + {dT}))", ys_k, h1(np.where(m < T + dT, L, R), T + dT))
    # below T, R = RN32(-1 + L) = -1 + L exactly, so the e = -1 data cannot move the threshold down; the e = 0 table
    # can: a reduced R in [-1, -0.5) is a multiple of 2^-24, so L = 1 + R would be too
    s = (m >= T - (1 << 18)) & (m < T)
    odd25 = int(((L[s].astype(np.float64) * 2.0**25) % 2 == 1).sum())
    print(f"   below T: {odd25} of {int(s.sum())} L[m] (m in [T - 2^18, T)) are odd multiples of 2^-25, impossible for "
          "1 + R with R in [-1, -0.5): no reduction below T")
    print("   e = 0 from T on: L = RN32(1 + R) on every known R:",
          int(((rn32_sum(1, R) != L) & hi_half & measured).sum()), "mismatches")

    t = np.log2(np.where(hi_half, x0 / 2, x0))
    cr = t.astype(np.float32)
    dd = R.view(np.int32).astype(np.int64) - cr.view(np.int32)
    vals, cnt = np.unique(dd[measured], return_counts=True)
    print("   R vs RN32(log2 r) in bit steps (known entries):", dict(zip(vals.tolist(), cnt.tolist())),
          "(negative steps = toward zero on both signs)")

    Rf, held, nheld = fill_unknown(x0, R, measured)
    print(f"\n== unknown R (e = -1 clamped): {int((~measured).sum())} entries, filled by a degree-2 fit of the relative "
          f"error near x = 1; held-out known entries wrong: {held} of {nheld}")
    report("H1 with the filled table, every entry (unknown e = -1 skipped)", ys, h1(Rf, T))
    if not a.no_write:
        ref = t.astype(np.float32)
        delta = Rf.view(np.int32).astype(np.int64) - ref.view(np.int32)
        assert np.abs(delta).max() < 127
        out = os.path.join(DIR, "lg2_model_candidate.npz")
        np.savez_compressed(out, delta=delta.astype(np.int8), measured=measured, threshold=np.int64(T),
                            sha256=np.array(hashlib.sha256(Rf.astype(np.float32).tobytes()).hexdigest()))
        print("wrote", out, "delta histogram", dict(zip(*[v.tolist() for v in np.unique(delta, return_counts=True)])))
    return 0


if __name__ == "__main__":
    sys.exit(main())

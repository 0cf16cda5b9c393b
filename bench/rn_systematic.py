"""When may round-to-nearest accumulation along O be modelled as random? (issue 8, bounds.md sec. 6)

Emulates the fp32 recursive sum S_s = fl(S_{s-1} + x_s) of summands x_s = A_s v_s step by step with
np.float32 (round to nearest even, as the kernel's fp32 accumulator) and records every rounding error
exactly: e_s = S_s - (S_{s-1} + x_s) in float64 (exact: S_{s-1} + x_s needs <= 24 + 29 bits whenever the
exponents of S_{s-1} and x_s differ by <= 29; a smaller x_s moves the result by < 2^-30 ulp(S), far below
what is measured). delta_s = e_s / (S_{s-1} + x_s) is the step's relative error, and its first-order
effect splits exactly (sec. 6) into the part along O and the fluctuation:

    sum_s delta_s S*_s = O sum_s delta_s C_s + sum_s delta_s F_s,   C_s = sum_{j<=s} A_j,  F_s = S*_s - C_s O

(S*_s the exact partial sums, sum A = 1). Reported per case, max over the rows (independent seeds):
    z = |O sum delta_s C_s| / (u |O| sqrt(sum C_s^2))   the random-model scale: Azuma gives z <= lambda = 6.56
    w = |O sum delta_s C_s| / (u |O| sum C_s)           the worst case (what forward.py charges now): w <= 1
    rho = spread of the summands / ulp(S_s), the candidate criterion's statistic: the summands' standard
          deviation around their trend (a centred window of 64 neighbours) over ulp of the running sum;
          "min rho" over the steps after the first 64; "frac<1" the share of the steps with rho < 1.
    zK = |along| / (lambda u |O| sqrt(sum_{rho_s >= 1} C_s^2) + u |O| sum_{rho_s < 1} C_s): the per-step form of
         the candidate (random where rho >= K = 1, worst case elsewhere); zK > 1 breaks the candidate.

    python bench/rn_systematic.py --n 512 4096 65536 --rows 8 --out /tmp/rn.jsonl
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np

U = 2.0**-24  # fp32 unit roundoff
LAMBDA = math.sqrt(2 * math.log(2 / 2.0**-30))  # the bound's confidence (sec. 6), 6.56
K_RHO = 1.0  # the candidate's threshold in ulps of the running sum (Poisson summation, see NOTES)
WINDOW = 64  # neighbours for the summands' local spread around their trend


@dataclass(frozen=True)
class Summands:
    """One family's rows: weights A (rows, n), sum 1 per row, and the fp32 summands x = fl(p v) the kernel adds
    (p the unnormalized weights; x / sum p = A v up to the product's rounding, which is not studied here)."""
    name: str
    weights: str
    r: float  # nominal relative spread of V (0: constant)
    A: np.ndarray
    x: np.ndarray
    x_nom: np.ndarray  # what the bound knows: p v exactly (float64)
    x_unknown: float  # |x - x_nom| <= x_unknown |x_nom|: relative uncertainty of each x_s for the bound (exp2's unknown low bits; 0: p = 1 exactly)


@dataclass(frozen=True)
class Result:
    family: str
    weights: str
    r: float
    n: int
    rows: int
    z_max: float
    w_max: float
    rho_min: float
    frac_below_k: float
    zk_max: float
    criterion_random: bool  # min rho >= K over the chain: the whole-chain form would call it random
    broken: bool  # the random model (whole chain or per-step form) claims less than observed
    ev_ratio: float  # max |along| / the data-evaluated bound (sound: <= 1)
    ev_w: float  # max data-evaluated bound / the worst case u |O| sum C_s (what would remain of the drift term)
    ev_z: float  # max data-evaluated bound / (u |O| sqrt(sum C_s^2))
    zf_max: float  # max |sum delta_s F_s| / (u sqrt(sum F_s^2)): the fluctuation against sec. 6's random model
    sec6_max: float  # max |sum delta_s S*_s| / (u |O| sum C_s + lambda u sqrt(sum F_s^2)): sec. 6's charge, > 1 over
    ev_total_ratio: float  # max |sum delta_s S*_s| / the data-evaluated bound of the whole first-order error
    ev_total_vs_sec6: float  # median data-evaluated bound of the whole error / sec. 6's charge


EPS_EXP = 2.0**-22  # a stand-in for ex2.approx's relative error: the bound knows p only to this


def _rows_product(p: np.ndarray, v: np.ndarray, rng=None, fmt=None):
    """(A, x, x_unknown): the kernel's x = fl(p^ v), p^ = p (1 + eta) with an exp2 error |eta| <= EPS_EXP that the
    bound does not know (none where p = exp2(0) = 1, uniform rows), then rounded to P's operand format fmt."""
    A = (p / p.sum(-1, keepdims=True)).astype(np.float64)
    v32 = v.astype(np.float32)
    if rng is None or np.all(p == 1.0):
        ph, unknown = p, 0.0
    else:  # p^ to fp32 and the product: 2 roundings; 2^-40 for the second-order terms
        ph = p * (1.0 + EPS_EXP * rng.uniform(-1, 1, p.shape))
        unknown = EPS_EXP + 2 * U + 2.0**-40
        if fmt is not None:  # which fp16/bf16 neighbour p^ rounds to is unknown
            ph = _astype(ph, fmt).astype(np.float64)
            unknown += 2.0 ** -(11 if fmt is np.float16 else 8)
    x = (ph.astype(np.float32) * v32).astype(np.float32)
    return A, x, p * v32.astype(np.float64), unknown


def _weights(kind: str, rows: int, n: int, rng) -> np.ndarray:
    if kind == "uniform":  # uniform rows: p = exp2(0) = 1 exactly in the kernel
        return np.ones((rows, n))
    g = rng.standard_normal((rows, n))  # softmax of N(0, 1) logits
    return np.exp(g - g.max(-1, keepdims=True)).astype(np.float32).astype(np.float64)


def _mean(rng, rows):  # a common mean with full fp32 significand (no short binary expansion)
    return (0.5 + rng.random((rows, 1))).astype(np.float32).astype(np.float64)


def spread_family(weights: str, r: float) -> Callable:
    def make(rows, n, rng):
        v = _mean(rng, rows) * (1.0 + r * rng.standard_normal((rows, n)))
        return Summands("spread", weights, r, *_rows_product(_weights(weights, rows, n, rng), v, rng))
    return make


def zero_mean(weights: str) -> Callable:
    """V ~ N(0, 1), the attack's random family: O ~ n^-1/2, the partial sums a random walk far below sum |x|."""
    def make(rows, n, rng):
        v = rng.standard_normal((rows, n))
        return Summands("zero_mean", weights, 1.0, *_rows_product(_weights(weights, rows, n, rng), v, rng))
    return make


def step_sign(weights: str) -> Callable:
    """v = +a for the first half, -a (1 + 2^-10) for the second (bench/adversaries/step_sign_o.py): O ~ 0, the partial
    sums climb to n a / 2 and come back, each half with its own constant residue."""
    def make(rows, n, rng):
        a = _mean(rng, rows)
        b = -(a.astype(np.float32) * np.float32(1 + 2.0**-10)).astype(np.float64)
        v = np.where(np.arange(n) < n // 2, a, b)
        return Summands("step_sign", weights, 1.0, *_rows_product(_weights(weights, rows, n, rng), v, rng))
    return make


def grid_offset(rows, n, rng):
    """v = 1 + (k + 1/4) G, k uniform integers in [-64, 64], G = ulp of the running sum in its last binade
    (uniform rows: S_s = s v on average): every summand has residue 1/4 ulp there, whatever its spread."""
    G = 2.0 ** (math.floor(math.log2(n - 1)) - 23)
    v = 1.0 + (rng.integers(-64, 65, (rows, n)) + 0.25) * G
    return Summands("grid_offset", "uniform", 64 * G / math.sqrt(3), *_rows_product(np.ones((rows, n)), v))


def pattern(period: int) -> Callable:
    def make(rows, n, rng):
        base = _mean(rng, rows) * (1.0 + 2.0**-4 * rng.standard_normal((rows, period)))
        v = np.tile(base, (1, -(-n // period)))[:, :n]
        return Summands(f"pattern{period}", "uniform", 2.0**-4, *_rows_product(np.ones((rows, n)), v))
    return make


def integers(rows, n, rng):
    v = rng.integers(1, 101, (rows, n)).astype(np.float64)
    return Summands("integers", "uniform", 0.58, *_rows_product(np.ones((rows, n)), v))


def low_precision(dtype, weights: str, r: float) -> Callable:
    """V with values of a coarse format (fp16 / bf16 inputs); softmax weights also rounded to it (P in fp16)."""
    def make(rows, n, rng):
        v = _astype(_mean(rng, rows) * (1.0 + r * rng.standard_normal((rows, n))), dtype).astype(np.float64)
        name = "fp16" if dtype is np.float16 else "bf16"
        return Summands(f"{name}_valued", weights, r, *_rows_product(_weights(weights, rows, n, rng), v, rng, dtype))
    return make


def sorted_v(weights: str) -> Callable:
    def make(rows, n, rng):
        v = np.sort(_mean(rng, rows) * (1.0 + 2.0**-4 * rng.standard_normal((rows, n))), axis=-1)
        return Summands("sorted_v", weights, 2.0**-4, *_rows_product(_weights(weights, rows, n, rng), v, rng))
    return make


def alternating(rows, n, rng):
    v = _mean(rng, rows) * np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
    return Summands("alternating", "uniform", 1.0, *_rows_product(np.ones((rows, n)), v))


def _bf16(x):
    b = np.asarray(x, np.float32).view(np.uint32)
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000  # round to nearest even, 8 significand bits
    return b.view(np.float32)


class _BF16:  # astype-compatible stand-in (numpy has no bfloat16)
    pass


def _astype(a, dtype):
    return _bf16(a) if dtype is _BF16 else a.astype(dtype)


def families():
    out = []
    for w in ("uniform", "softmax"):
        for e in (None, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2):
            out.append(spread_family(w, 0.0 if e is None else 2.0**-e))
    out += [zero_mean("uniform"), zero_mean("softmax"), step_sign("uniform"), step_sign("softmax"), grid_offset, pattern(2), pattern(3), pattern(4), pattern(16), integers, alternating,
            sorted_v("uniform"), sorted_v("softmax")]
    for dt in (np.float16, _BF16):
        for w, r in (("uniform", 2.0**-4), ("softmax", 2.0**-4), ("softmax", 0.0)):
            out.append(low_precision(dt, w, r))
    return out


def rn_chain(fam: Summands) -> Result:
    """Sum every row's x in fp32 step by step; the exact split of the first-order error (module docstring)."""
    A, x = fam.A, fam.x
    rows, n = x.shape
    xd = x.astype(np.float64)
    C = np.cumsum(A, axis=-1)
    exact = np.cumsum(xd, axis=-1)  # S*_s (float64: error ~ 2^-53 s |x|, far below the fp32 roundings)
    O = exact[:, -1]  # O sum p: the common factor sum p cancels in z, w, zK
    # the summands' local spread around their trend: std over a centred window
    k = np.ones(WINDOW) / WINDOW
    mean = np.stack([np.convolve(r_, k, mode="same") for r_ in xd])
    sq = np.stack([np.convolve(r_ * r_, k, mode="same") for r_ in xd])
    spread = np.sqrt(np.maximum(sq - mean * mean, 0.0))
    S = np.zeros(rows, np.float32)
    along = np.zeros(rows)
    fluct = np.zeros(rows)
    F = exact - C * O[:, None]  # the partial sums' fluctuation around O (sum p F_s of sec. 6)
    rho = np.empty((rows, n))
    for s in range(n):
        t = S.astype(np.float64) + xd[:, s]
        S = S + x[:, s]
        e = S.astype(np.float64) - t
        with np.errstate(divide="ignore", invalid="ignore"):
            delta = np.where(t != 0, e / t, 0.0)
        along += delta * C[:, s]
        fluct += delta * F[:, s]
        rho[:, s] = spread[:, s] / np.spacing(np.abs(S))
    total = np.abs(along * O + fluct)  # the whole first-order error, x units
    along, fluct = np.abs(along * O), np.abs(fluct)
    oabs = np.abs(O)
    rnd = rho >= K_RHO
    c2, c1 = (C * C).sum(-1), C.sum(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = along / (U * oabs * np.sqrt(c2))
        wv = along / (U * oabs * c1)
        zk = along / (LAMBDA * U * oabs * np.sqrt((C * C * rnd).sum(-1)) + U * oabs * (C * ~rnd).sum(-1))
    z, wv, zk = (np.nan_to_num(a, nan=0.0) for a in (z, wv, zk))
    f2 = np.sqrt((F * F).sum(-1))
    sec6 = U * oabs * c1 + LAMBDA * U * f2
    ev, ev_tot = data_evaluated(fam, C)
    with np.errstate(divide="ignore", invalid="ignore"):
        zf = np.nan_to_num(fluct / (U * f2), nan=0.0)
        s6 = np.nan_to_num(total / sec6, nan=0.0)
        evt = np.nan_to_num(total / ev_tot, nan=0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ev_ratio = np.nan_to_num(along / (ev * oabs), nan=0.0)
        ev_w, ev_z = ev / (U * c1), ev / (U * np.sqrt(c2))
    tail = rho[:, WINDOW:] if n > 2 * WINDOW else rho
    rho_min = float(tail.min())
    crit = rho_min >= K_RHO
    return Result(fam.name, fam.weights, fam.r, n, rows, float(z.max()), float(wv.max()), rho_min,
                  float((tail < K_RHO).mean()), float(zk.max()), crit,
                  bool((crit and z.max() > LAMBDA) or zk.max() > 1.0), float(ev_ratio.max()), float(ev_w.max()),
                  float(ev_z.max()), float(zf.max()), float(s6.max()), float(evt.max()),
                  float(np.median(ev_tot / sec6)))


def _saw_known(xl, xh, g):
    """Round-to-nearest error of (a value on the grid g) + x, x in [xl, xh]: g (k - x / g), k = round(x / g),
    as centre and half-width where no half-integer (a jump or a tie, whose direction depends on the sum's last
    bit) lies in [xl / g, xh / g]; known = False elsewhere."""
    rl, rh = xl / g, xh / g  # exact: g is a power of two
    k = np.floor(rl + 0.5)
    known = (rh + 0.5 < k + 1) & (rl + 0.5 > k)
    return known, g * (k - 0.5 * (rl + rh)), 0.5 * g * (rh - rl)


def data_evaluated(fam: Summands, C):
    """A deterministic bound on |sum_s delta_s C_s| (the along-O factor, per row) evaluated on the data, the way
    sec. 6a evaluates the tensor-core steps: not a model of delta but its value. Step s rounds S^_{s-1} + x_s to
    the grid g_s = ulp(S^_s); where S^_{s-1} lies on that grid (|S^_{s-1}| >= 2^e_s, same or higher binade) the
    error is g_s (k - x_s / g_s) whatever S^_{s-1} is: a function of x_s alone. The binades come from the exact
    partial sums S*_s of the bound's x_nom and the worst-case distance E_s of S^_s from them (accumulated
    roundings u sum |S*| (1 + 2 s u), plus x's unknown part); a step whose binade, grid or residue is not
    certain is charged u C_s (|delta| <= u). Returns (that bound, the same for the whole first-order error
    sum_s e_s, along and around O together)."""
    xn, unk = fam.x_nom, fam.x_unknown
    rows, n = xn.shape
    S = np.cumsum(xn, axis=-1)
    aS = np.abs(S)
    steps = np.arange(1, n + 1)
    E = U * np.cumsum(aS, axis=-1) * (1 + 2 * steps * U) + unk * np.cumsum(np.abs(xn), axis=-1)
    lo, hi = aS - E, aS + E
    with np.errstate(divide="ignore", invalid="ignore"):
        e_lo = np.floor(np.log2(np.where(lo > 0, lo, np.nan)))
        e_hi = np.floor(np.log2(np.where(hi > 0, hi, np.nan)))
    binade = np.isfinite(e_lo) & (e_lo == e_hi)
    e = np.where(binade, e_hi, 0.0)
    prev_lo = np.concatenate([np.full((rows, 1), np.inf), lo[:, :-1]], axis=-1)  # S^_{-1} = 0: x_0 exact
    on_grid = binade & ((prev_lo >= 2.0**e) | (steps == 1))
    g = 2.0 ** (e - 23)
    known, centre, half = _saw_known(xn - unk * np.abs(xn), xn + unk * np.abs(xn), g)
    known &= on_grid
    # delta_s = err_s / t_s, t_s = S^_{s-1} + x_s with |t_s - S*_s| <= E_s: centre / S* plus a first-order margin
    with np.errstate(divide="ignore", invalid="ignore"):
        d_c = np.where(known, centre / S, 0.0)
        d_w = np.where(known, (half + np.abs(centre) * E / lo) / lo, U)
    along = np.abs((C * d_c).sum(-1)) + (C * d_w).sum(-1)
    # the whole first-order error sum_s e_s: the known errors signed, the rest u |S^_s| <= u (|S*_s| + E_s)
    total = np.abs(np.where(known, centre, 0.0).sum(-1)) + np.where(known, half, U * hi).sum(-1)
    return along, total


def table(results):
    lines = ["| family | weights | r | n | max z | max w | min rho | frac rho<1 | max zK | K-criterion says | broken "
             "| data-eval: obs/bound | bound/wc | bound z | fluct z | obs/sec6 | data-eval total: obs/bound | bound/sec6 |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r.family} | {r.weights} | {r.r:.3g} | {r.n} | {r.z_max:.3g} | {r.w_max:.3g} | "
                     f"{r.rho_min:.3g} | {r.frac_below_k:.3g} | {r.zk_max:.3g} | "
                     f"{'random' if r.criterion_random else 'systematic'} | {'YES' if r.broken else ''} | "
                     f"{r.ev_ratio:.3g} | {r.ev_w:.3g} | {r.ev_z:.3g} | {r.zf_max:.3g} | {r.sec6_max:.3g} | "
                     f"{r.ev_total_ratio:.3g} | {r.ev_total_vs_sec6:.3g} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[512, 4096])
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", nargs="*", default=None, help="family names to run")
    ap.add_argument("--out", default=None)
    ap.add_argument("--table-from", default=None)
    a = ap.parse_args(argv)
    if a.table_from:
        print(table([Result(**json.loads(l)) for l in open(a.table_from)]))
        return
    results = []
    for n in a.n:
        for make in families():
            fam = make(a.rows, n, np.random.default_rng([a.seed, n]))
            if a.only and fam.name not in a.only:
                continue
            res = rn_chain(fam)
            results.append(res)
            if a.out:
                with open(a.out, "a") as f:
                    f.write(json.dumps(asdict(res)) + "\n")
            print(table([res]).splitlines()[-1], file=sys.stderr, flush=True)
    print(table(results))


if __name__ == "__main__":
    main()

"""Measure, on the GPU, the hardware constants the error bounds assume (proofs/hardware.py reads them).

    python3 -m flashcheck.proofs.hardware_probe --out proofs/measurements/h100.json [--raw FILE.npz] [--quick]

What is measured, and how (each section is written to --out as soon as it is done, so a run that is
killed still leaves what it measured):

- ex2: tl.math.exp2 on fp32, as kernels/triton_fwd.py calls it, on EVERY fp32 argument in the range
  the kernels use (all of [-150, 0] — down past the flush-to-zero limit — and [0, 8]: the backward's
  exp2(s c - LSE log2 e) may be a little positive). Each argument is generated inside the kernel
  from its bit pattern and compared with float64 exp2 (torch on the device: CUDA's double exp2,
  <= 1 ulp of float64; proofs/hardware.py adds that 2^-52 to every measured maximum). Relative error where 2^x >= 2^-126;
  absolute error below (subnormal / flushed results).
- lg2: tl.math.log2 on fp32 on every positive normal fp32 (the LSE takes log2 l with l in
  [1, N_k]); measured as |lg2(x) - log2 x| / (1 + |log2 x|), the form the LSE bound uses
  (bounds.py: log_err = eps (1 + |log2 l|) ln 2), plus the absolute and relative errors.
- div: fp32 '/' as Triton compiles it: every fp32 divisor significand in [1, 2) against a set of
  dividend significands (exhaustive in the divisor), plus random pairs over the exponent range the
  kernel meets (divisor l in [1, 2^24], dividends in [2^-100, 2^100]) to check scale invariance.
- mma: tl.dot(a, b, c) with fp16, bf16, tf32 and ieee operands on the tile shapes our kernel uses,
  in the manner of Fasi, Higham, Mikaitis & Pranesh (2021): random and crafted A·B + C whose exact
  value is known; every candidate model "blocks of k products summed with the accumulator after
  alignment to the largest exponent with F extra bits (truncated or rounded), then normalized into
  fp32 (truncated or rounded)" is emulated bit-exactly and kept if it reproduces every output.
- tf32 operand conversion: one nonzero product a·1, so the output is the converted operand itself;
  compared with truncation and round-to-nearest of a to 10 fraction bits.
- ptx: the conversion/arithmetic instructions in the PTX of the probe kernels and of our attention
  forward kernel (ex2.approx[.ftz], lg2.approx, div.full / div.rn, mma / wgmma).

Under TRITON_INTERPRET=1 (CPU) the same code runs on small ranges: it then measures NumPy, not the
GPU, and the output says so ("interpreter": true). It exists to debug the probe, not to measure.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch
import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
F64_REF_REL = 2.0**-52  # relative error of the float64 libdevice / numpy references (<= 1 ulp)


# ----------------------------------------------------------------------------------------------
# elementwise sweeps over bit patterns
# ----------------------------------------------------------------------------------------------
@triton.jit
def _unary_eval(y_ptr, start, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    """y[i] = op(x_i) in fp32, x_i the fp32 with bit pattern start + i (generated here, not loaded)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    valid = offs < n
    bits = (start + offs).to(tl.uint32).to(tl.int32, bitcast=True)
    x = bits.to(tl.float32, bitcast=True)
    if OP == 0:
        y = tl.math.exp2(x)  # as kernels/triton_fwd.py: p = tl.math.exp2(s - m)
    else:
        y = tl.math.log2(x)  # as kernels/triton_fwd.py: tl.math.log2(l_safe)
    tl.store(y_ptr + offs, y, mask=valid)


@triton.jit
def _div_eval(q_ptr, x, ystart, n, BLOCK: tl.constexpr):
    """q[i] = x / y_i in fp32 ('/' as the kernel writes acc / l), y_i the fp32 with bits ystart + i."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    valid = offs < n
    y = (ystart + offs).to(tl.uint32).to(tl.int32, bitcast=True).to(tl.float32, bitcast=True)
    tl.store(q_ptr + offs, x / y, mask=valid)


@triton.jit
def _div_pairs(x_ptr, y_ptr, q_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=1.0)
    y = tl.load(y_ptr + offs, mask=m, other=1.0)
    tl.store(q_ptr + offs, x / y, mask=m)


@triton.jit
def _dot_probe(a_ptr, b_ptr, c_ptr, d_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
               PREC: tl.constexpr):
    """D[t] = tl.dot(A[t], B[t], C[t]) for tile t, fp32 accumulator, as the kernel's P·V dot."""
    t = tl.program_id(0).to(tl.int64)
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    rk = tl.arange(0, K)
    a = tl.load(a_ptr + t * M * K + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + t * K * N + rk[:, None] * N + rn[None, :])
    c = tl.load(c_ptr + t * M * N + rm[:, None] * N + rn[None, :])
    d = tl.dot(a, b, c, input_precision=PREC)
    tl.store(d_ptr + t * M * N + rm[:, None] * N + rn[None, :], d)


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------
def _dev() -> str:
    return "cpu" if INTERPRET else "cuda"


def _f32_bits(x: float) -> int:
    return int(np.array([x], np.float32).view(np.uint32)[0])


def _bits_f32(b: float) -> float:
    return float(np.array([int(b) & 0xFFFFFFFF], np.uint32).view(np.float32)[0])


_PTX_OPS = re.compile(r"\b((?:ex2|lg2|div|rcp|sqrt|mma|wgmma\.mma_async|cvt\.rna\.tf32|cvt\.rn\.tf32)"
                      r"(?:\.[a-z0-9_]+)*)")


def _ptx_ops(compiled) -> list[str]:
    """Distinct arithmetic instructions of interest in a compiled kernel's PTX ([] in the interpreter)."""
    try:
        ptx = compiled.asm["ptx"]
    except Exception:  # interpreter: no compiled kernel
        return []
    return sorted(set(_PTX_OPS.findall(ptx)))


def _bits_range(a: int, n: int) -> torch.Tensor:
    """The fp32 values with bit patterns a .. a+n-1, as a float32 tensor on the device."""
    v = torch.arange(a, a + n, dtype=torch.int64, device=_dev())
    v = torch.where(v >= 2**31, v - 2**32, v).to(torch.int32)
    return v.view(torch.float32)


def _unary(op: int, lo_bits: int, hi_bits: int, chunk: int, block: int = 1024):
    """Every fp32 with bit pattern in [lo_bits, hi_bits] through op (Triton, fp32) and through the
    float64 reference (torch); maxima of metric 0 (with its argument), 1 and 2 (see the callers).
    A NaN where the reference is finite counts as an infinite error."""
    best = dict(points=hi_bits - lo_bits + 1, m0=0.0, arg0=None, m1=0.0, m2=0.0)
    kern = None
    for a in range(lo_bits, hi_bits + 1, chunk):
        n = min(chunk, hi_bits + 1 - a)
        y32 = torch.empty(n, dtype=torch.float32, device=_dev())
        kern = _unary_eval[(triton.cdiv(n, block),)](y32, a, n, OP=op, BLOCK=block)
        x = _bits_range(a, n).double()
        y = y32.double()
        if op == 0:
            ref = torch.exp2(x)
            err = (y - ref).abs()
            normal = ref >= 2.0**-126
            e0 = torch.where(normal, err / ref, 0.0)  # relative, normal results
            e1 = torch.where(normal, 0.0, err)  # absolute, results below 2^-126
            e2 = torch.zeros_like(err)
        else:
            ref = torch.log2(x)
            err = (y - ref).abs()
            e0 = err / (1.0 + ref.abs())  # the form bounds.py uses for the LSE
            e1 = err
            e2 = torch.where(ref != 0, err / ref.abs(), 0.0)
        bad = torch.isnan(y) & ~torch.isnan(ref)
        e0 = torch.where(bad, float("inf"), torch.nan_to_num(e0, nan=0.0))
        i = int(torch.argmax(e0))
        m0 = float(e0[i])
        if m0 > best["m0"] or best["arg0"] is None:
            best["m0"], best["arg0"] = m0, float(x[i])
        best["m1"] = max(best["m1"], float(torch.nan_to_num(e1, nan=0.0).max()))
        best["m2"] = max(best["m2"], float(torch.nan_to_num(e2, nan=0.0).max()))
    return best, kern


# ----------------------------------------------------------------------------------------------
# sections
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sizes:
    """How much of each range is swept: the full run, or a CPU/interpreter debugging run."""
    chunk: int
    exhaustive: bool
    div_nx: int
    div_pairs: int
    mma_tiles: int


FULL = Sizes(chunk=1 << 27, exhaustive=True, div_nx=512, div_pairs=1 << 24, mma_tiles=256)
QUICK = Sizes(chunk=1 << 23, exhaustive=False, div_nx=8, div_pairs=1 << 20, mma_tiles=32)
TINY = Sizes(chunk=1 << 12, exhaustive=False, div_nx=2, div_pairs=1 << 10, mma_tiles=2)


def _ranges(lo: float, hi: float, sz: Sizes) -> list[tuple[int, int]]:
    """Bit-pattern ranges covering every fp32 in [lo, hi] (exhaustive), or a few binades of it."""
    a, b = sorted((_f32_bits(lo), _f32_bits(hi)))
    if sz.exhaustive:
        return [(a, b)]
    width = 1 << (12 if INTERPRET else 23)  # about one binade per range when not exhaustive
    picks = np.linspace(a, max(a, b - width), 4).astype(np.int64)
    return [(int(p), int(min(b, p + width - 1))) for p in picks]


def probe_ex2(sz: Sizes) -> dict:
    res = {"call": "tl.math.exp2 (fp32), as kernels/triton_fwd.py", "ranges": []}
    worst_rel, worst_arg, worst_abs_sub, pts, ops = 0.0, None, 0.0, 0, []
    for lo, hi in ((-150.0, -0.0), (0.0, 8.0)):
        for a, b in _ranges(lo, hi, sz):
            r, k = _unary(0, a, b, sz.chunk)
            ops = ops or _ptx_ops(k)
            pts += r["points"]
            if r["m0"] > worst_rel:
                worst_rel, worst_arg = r["m0"], r["arg0"]
            worst_abs_sub = max(worst_abs_sub, r["m1"])
        res["ranges"].append([lo, hi])
    res.update(points=pts, exhaustive=sz.exhaustive, max_rel_error=worst_rel, worst_argument=worst_arg,
               max_rel_error_ulps_2m23=worst_rel / 2.0**-23,
               max_abs_error_below_2m126=worst_abs_sub, reference_rel_error=F64_REF_REL, ptx=ops)
    return res


def probe_lg2(sz: Sizes) -> dict:
    res = {"call": "tl.math.log2 (fp32), as the LSE in kernels/triton_fwd.py"}
    tot = dict(points=0, mixed=0.0, arg=None, abs=0.0, rel=0.0)
    ops: list[str] = []
    lo, hi = 2.0**-126, float(np.finfo(np.float32).max)
    abs_12 = 0.0
    a12, b12 = _f32_bits(0.5), _f32_bits(2.0) - 1
    if not sz.exhaustive:
        b12 = a12 + (1 << 12)
    for a, b in _ranges(lo, hi, sz) + [(a12, b12)]:
        r, k = _unary(1, a, b, sz.chunk)
        ops = ops or _ptx_ops(k)
        if (a, b) == (a12, b12):
            abs_12 = r["m1"]
            continue
        tot["points"] += r["points"]
        if r["m0"] > tot["mixed"]:
            tot["mixed"], tot["arg"] = r["m0"], r["arg0"]
        tot["abs"] = max(tot["abs"], r["m1"])
        tot["rel"] = max(tot["rel"], r["m2"])
    res.update(range=[lo, hi], points=tot["points"], exhaustive=sz.exhaustive,
               max_mixed_error=tot["mixed"], worst_argument=tot["arg"],
               mixed_error_form="|lg2(x) - log2 x| / (1 + |log2 x|)",
               max_abs_error=tot["abs"], max_abs_error_on_0p5_2=abs_12, max_rel_error=tot["rel"],
               reference_rel_error=F64_REF_REL, ptx=ops)
    return res


def probe_div(sz: Sizes, rng) -> dict:
    # dividend significands: 1, just below 2, and random ones; every divisor significand in [1, 2)
    xs = np.concatenate([[1.0, np.nextafter(np.float32(2), np.float32(0)), 1.5, 1.0 + 2.0**-23],
                         1.0 + rng.random(max(0, sz.div_nx - 4))]).astype(np.float32)[: max(sz.div_nx, 1)]
    ranges = _ranges(1.0, float(np.nextafter(np.float32(2), np.float32(0))), sz)
    worst, wy, wx, pts, ops = 0.0, None, None, 0, []
    for a, b in ranges:
        n = b - a + 1
        y = _bits_range(a, n)
        for x in xs:
            q = torch.empty(n, dtype=torch.float32, device=_dev())
            k = _div_eval[(triton.cdiv(n, 1024),)](q, float(x), a, n, BLOCK=1024)
            ops = ops or _ptx_ops(k)
            ref = float(x) / y.double()
            e = (q.double() - ref).abs() / ref.abs()
            e = torch.where(torch.isnan(q), float("inf"), e)
            i = int(torch.argmax(e))
            pts += n
            if float(e[i]) > worst or wy is None:
                worst, wy, wx = float(e[i]), float(y[i]), float(x)
    # scale invariance: random pairs over the exponents the kernel meets (l in [1, 2^24], any acc)
    n = sz.div_pairs
    x = (rng.uniform(1, 2, n) * 2.0 ** rng.integers(-100, 101, n) * rng.choice([-1, 1], n)).astype(np.float32)
    y = (rng.uniform(1, 2, n) * 2.0 ** rng.integers(0, 25, n)).astype(np.float32)
    q = torch.empty(n, dtype=torch.float32, device=_dev())
    _div_pairs[(triton.cdiv(n, 1024),)](torch.tensor(x, device=_dev()), torch.tensor(y, device=_dev()), q, n,
                                        BLOCK=1024)
    ref = x.astype(np.float64) / y.astype(np.float64)
    rel = np.abs(q.cpu().numpy().astype(np.float64) - ref) / np.abs(ref)
    if not np.all(np.isfinite(rel)):
        raise AssertionError("fp32 division returned NaN/inf on finite normal operands")
    return dict(call="fp32 '/' in a Triton kernel (acc / l in kernels/triton_fwd.py)",
                divisor_range=[1.0, 2.0], divisor_exhaustive=sz.exhaustive, dividends=len(xs), points=int(pts),
                max_rel_error=worst, worst_divisor=wy, worst_dividend=wx,
                random_pairs=int(n), random_pairs_max_rel_error=float(rel.max()),
                max_rel_error_ulps_2m23=max(worst, float(rel.max())) / 2.0**-23,
                reference_rel_error=2.0**-53, ptx=ops)


# ---- tensor cores -----------------------------------------------------------------------------
_OPERAND = {"fp16": (torch.float16, 11, -14), "bf16": (torch.bfloat16, 8, -126),
            "tf32": (torch.float32, 11, -126), "ieee": (torch.float32, 24, -126)}


def _operands(rng, shape, bits: int, emin: int, erange: int, zero_frac: float) -> np.ndarray:
    """Random numbers with `bits` significand bits, exponents in [-erange, erange] (>= emin), signs +-."""
    sig = rng.integers(1 << (bits - 1), 1 << bits, shape) / float(1 << (bits - 1))
    e = np.maximum(rng.integers(-erange, erange + 1, shape), emin)
    x = sig * np.exp2(e) * rng.choice([-1.0, 1.0], shape)
    x[rng.random(shape) < zero_frac] = 0.0
    return x


def _pow2_split(e: int, emin: int) -> tuple[float, float]:
    """a, b powers of two with a*b = 2^e, both normal in a format whose min exponent is emin."""
    ea = max(e // 2, emin)
    return 2.0**ea, 2.0 ** (e - ea)


def _crafted(K: int, emin: int, bits: int) -> list[tuple[float, np.ndarray, np.ndarray]]:
    """(c, a, b) probes that separate the models (Fasi et al. 2021, sec. 3): extra alignment bits,
    rounding of the normalization (both signs), block size; the leading 1 as a product or as c."""
    u = 2.0**-23
    out = []

    def probe(c, entries):
        a, b = np.zeros(K), np.zeros(K)
        for pos, (x, y) in entries.items():
            a[pos], b[pos] = x, y
        out.append((c, a, b))

    for j in range(1, 7):  # extra bits: 1 + (u - u 2^-j) + u 2^-j, exact 1 + u; kept iff F >= j
        if j >= bits or -23 - j < 2 * emin:
            continue
        pa, pb = _pow2_split(-23, emin)
        qa, qb = _pow2_split(-23 - j, emin)
        big, small = ((1.0 - 2.0**-j) * pa, pb), (qa, qb)
        for pos in (1, K // 2, K - 2):
            probe(0.0, {0: (1.0, 1.0), pos: big, pos + 1: small})
            probe(1.0, {pos - 1: big, pos: small})
    for frac in (0.75, 0.5, 0.25, 0.625):  # normalization: 1 + frac ulp, both signs
        for sgn in (1.0, -1.0):
            pa, pb = _pow2_split(-23, emin)
            small = (sgn * frac * pa * 2, pb / 2)
            probe(0.0, {0: (sgn, 1.0), 1: small})
            probe(sgn, {0: small})
            probe(sgn, {K - 1: small})
    pa, pb = _pow2_split(-24, emin)
    for n in range(1, K):  # block size: 1 followed (or preceded) by n half-ulps
        probe(0.0, {0: (1.0, 1.0), **{i: (pa, pb) for i in range(1, n + 1)}})
        probe(1.0, {i: (pa, pb) for i in range(n)})
        probe(0.0, {K - 1: (1.0, 1.0), **{i: (pa, pb) for i in range(K - 1 - n, K - 1)}})
    assert all(abs(c) + np.abs(a * b).sum() > 0 for c, a, b in out) and u > 0
    return out


def _to_f32(x: np.ndarray, mode: str) -> np.ndarray:
    """Round float64 values (exact sums) into fp32: "rn" to nearest even, "rz" toward zero."""
    r = x.astype(np.float32)
    if mode == "rz":
        over = np.abs(r.astype(np.float64)) > np.abs(x)
        r = np.where(over, np.nextafter(r, np.float32(0)), r)
    elif mode == "floor":
        over = r.astype(np.float64) > x
        r = np.where(over, np.nextafter(r, np.float32(-np.inf)), r)
    return r.astype(np.float64)


def _exponent(x: np.ndarray) -> np.ndarray:
    """floor(log2 |x|) (exact, via frexp); -2^30 for zeros so that they never set a maximum."""
    _, e = np.frexp(np.where(x != 0, x, 1.0))
    return np.where(x != 0, e - 1, -(2**30))


@dataclass(frozen=True)
class BlockFma:
    """A model of tensor-core accumulation (Fasi et al. 2021, generalised): the products are exact;
    every step adds k of them to the accumulator: the k + 1 terms are aligned to a reference exponent
    E keeping F bits below fp32's 24, i.e. to multiples of 2^(E - 23 - F) ("trunc": toward zero,
    "floor": toward -inf as a two's-complement shift would, "rn": to nearest), summed exactly, and the
    sum normalized into fp32 ("rz" | "rn" | "floor"). E is the largest exponent of the terms' values
    (ref="value"), or the largest of the accumulator's exponent and of e_a + e_b over the products
    (ref="operands": the product significand kept in [1, 4) before normalization, as a multiplier
    array computes it)."""

    k: int
    F: int
    align: str
    norm: str
    ref: str

    def emulate(self, c: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        P = a * b
        Ep = _exponent(a) + _exponent(b) if self.ref == "operands" else _exponent(P)
        Ep = np.where(P != 0, Ep, -(2**30))
        acc = c.astype(np.float64)
        for s in range(0, P.shape[1], self.k):
            terms = np.concatenate([acc[:, None], P[:, s:s + self.k]], axis=1)
            E = np.maximum(_exponent(acc), Ep[:, s:s + self.k].max(1))
            nonzero = np.abs(terms).max(1) > 0
            shift = np.exp2(np.where(nonzero, (23 + self.F) - E, 0).astype(np.float64))[:, None]
            aligned = {"trunc": np.trunc, "rn": np.rint, "floor": np.floor}[self.align](terms * shift)
            acc = np.where(nonzero, _to_f32(aligned.sum(1) / shift[:, 0], self.norm), 0.0)
        return acc

    @property
    def step_error(self) -> float:
        """delta with |step - exact step| < delta (|acc| + sum |p|): proofs/hardware.py, MmaBehaviour."""
        per_term = {"trunc": 1.0, "floor": 1.0, "rn": 0.5}[self.align] * 2.0 ** (-23 - self.F)
        return self.k * per_term + (2.0**-24 if self.norm == "rn" else 2.0**-23)


MODELS = [BlockFma(k, F, align, norm, ref) for k in (1, 2, 4, 8, 16, 32, 64) for F in range(0, 8)
          for align in ("trunc", "rn", "floor") for norm in ("rz", "rn", "floor") for ref in ("value", "operands")]


def fit_models(c: np.ndarray, a: np.ndarray, b: np.ndarray, D: np.ndarray) -> list[BlockFma]:
    """Every model of MODELS (k <= K) whose bit-exact emulation reproduces all outputs D."""
    live = [m for m in MODELS if m.k <= a.shape[1]]
    for rows in (slice(0, min(len(c), 256)), slice(0, len(c))):
        live = [m for m in live if np.array_equal(m.emulate(c[rows], a[rows], b[rows]), D[rows])]
    return live


def bound_ratio(c: np.ndarray, P: np.ndarray, D: np.ndarray, exact: np.ndarray, model: BlockFma) -> np.ndarray:
    """|D - exact| / (the recursive bound of `model`: sum over steps t of delta (1+delta)^t S_t, S_t =
    |c| + sum of |p| up to the end of step t); <= 1 wherever the model's constant holds."""
    k, delta = model.k, model.step_error
    bound = np.zeros(len(c))
    run = np.abs(c).astype(np.float64)
    for t, s in enumerate(range(0, P.shape[1], k)):
        run = run + np.abs(P[:, s:s + k]).sum(1)
        bound += delta * (1 + delta) ** t * run
    err = np.abs(D - exact)
    return np.where(bound > 0, err / np.where(bound > 0, bound, 1.0), np.where(err > 0, np.inf, 0.0))


def fit_entry(c: np.ndarray, a: np.ndarray, b: np.ndarray, D: np.ndarray) -> dict:
    """The consistent models of one tensor-core config and each one's constant checked on the data."""
    P = a * b
    exact = np.array([math.fsum([ci, *pi]) for ci, pi in zip(c, P)])
    fits = fit_models(c, a, b, D)
    return dict(fit_cases=int(len(c)),
                consistent_models=[dict(k_step=m.k, extra_bits=m.F, alignment=m.align, normalization=m.norm,
                                        reference=m.ref) for m in fits],
                bound_checks=[dict(k_step=m.k, extra_bits=m.F, reference=m.ref, delta=m.step_error,
                                   max_observed_over_bound=float(bound_ratio(c, P, D, exact, m).max()))
                              for m in fits])


def refit(report: dict, raw_path: str) -> dict:
    """Refit the tensor-core models of `report` from the raw GPU outputs saved by --raw (no GPU needed)."""
    z = np.load(raw_path)
    for name in sorted({k.split("__")[0] for k in z.files}):
        if name.startswith("ieee") or name not in report.get("mma", {}):
            continue
        c, a, b, d = (z[f"{name}__{f}"].astype(np.float64) for f in "cabd")
        report["mma"][name].update(fit_entry(c, a, b, d), fit_source=f"refit of {os.path.basename(raw_path)}")
    return report


def probe_mma(sz: Sizes, rng, raw: dict) -> dict:
    configs = [("fp16", 16, 16, 1), ("fp16", 16, 64, 1), ("fp16", 64, 64, 4), ("fp16", 64, 32, 4),
               ("bf16", 16, 16, 1), ("bf16", 64, 64, 4), ("tf32", 16, 16, 1), ("tf32", 64, 64, 4),
               ("tf32", 64, 32, 4), ("ieee", 64, 64, 4)]
    if INTERPRET:
        configs = [cfg for cfg in configs if cfg[0] != "bf16"]  # no bf16 in the interpreter
    results = {}
    for prec, M, K, warps in configs:
        name = f"{prec}_{M}x{M}x{K}_w{warps}"
        t0 = time.time()
        dt, bits, emin = _OPERAND[prec]
        T = sz.mma_tiles
        cases = T * M
        erange = 6 if prec == "fp16" else 10
        a = _operands(rng, (cases, K), bits, emin, erange, 0.15)
        b = _operands(rng, (cases, K), bits, emin, erange, 0.15)
        c = _operands(rng, (cases,), 24, -126, 12, 0.1)
        P = a * b
        # a quarter with massive cancellation: c = -fl32(sum p), so D is what the rounding left
        canc = rng.random(cases) < 0.25
        c[canc] = -P[canc].sum(1).astype(np.float32)
        crafted = _crafted(K, emin, bits)
        nc = min(len(crafted), cases // 2)
        for i, (cc, ca, cb) in enumerate(crafted[:nc]):
            c[i], a[i], b[i] = cc, ca, cb
        P = a * b
        A = a.reshape(T, M, K)
        B = np.transpose(b.reshape(T, M, K), (0, 2, 1))  # column r of B[t] = case (t, r)
        C = np.zeros((T, M, M))
        C[:, np.arange(M), np.arange(M)] = c.reshape(T, M)
        tt = torch.float32 if prec in ("tf32", "ieee") else dt
        At = torch.tensor(A, dtype=tt, device=_dev()).contiguous()
        Bt = torch.tensor(B, dtype=tt, device=_dev()).contiguous()
        if not (np.array_equal(At.double().cpu().numpy(), A) and np.array_equal(Bt.double().cpu().numpy(), B)):
            raise AssertionError(f"{name}: probe operands are not exact in {tt}")
        Ct = torch.tensor(C, dtype=torch.float32, device=_dev())
        Dt = torch.empty_like(Ct)
        # fp16/bf16 operands: the kernel passes "tf32", which has no effect on 16-bit operands
        dprec = prec if prec in ("tf32", "ieee") else "tf32"
        k = _dot_probe[(T,)](At, Bt, Ct, Dt, M=M, N=M, K=K, PREC=dprec, num_warps=warps)
        D = Dt.cpu().numpy().astype(np.float64)[:, np.arange(M), np.arange(M)].reshape(cases)
        exact = np.array([math.fsum([ci, *pi]) for ci, pi in zip(c, P)])
        keep = slice(0, min(cases, 2048))  # the returned files are capped at 16 MiB
        raw[name] = dict(c=c[keep].astype(np.float32), a=a[keep].astype(np.float32),
                         b=b[keep].astype(np.float32), d=D[keep].astype(np.float32))
        entry = {"M": M, "N": M, "K": K, "num_warps": warps, "cases": int(cases), "crafted": int(nc),
                 "ptx": _ptx_ops(k)}
        S = np.abs(c) + np.abs(P).sum(1)
        # model-free: max |D - exact| / (|c| + sum |p|), in units of 2^-23
        entry["max_err_over_S_units_2m23"] = float((np.abs(D - exact) / np.where(S > 0, S, 1)).max() / 2.0**-23)
        if prec != "ieee":
            entry.update(fit_entry(c, a, b, D))
            if prec == "tf32":
                entry["operand_conversion"] = _tf32_conversion(rng, M, K, warps, T)
        entry["seconds"] = round(time.time() - t0, 2)
        results[name] = entry
    return results


def _tf32_conversion(rng, M: int, K: int, warps: int, T: int) -> dict:
    """D = conv(a_0) * 1 + 0 (single nonzero product): compare with truncation and RN to 10 bits."""
    cases = T * M
    x = _operands(rng, (cases,), 24, -126, 20, 0.0)
    A = np.zeros((cases, K))
    A[:, 0] = x
    Bm = np.zeros((T, K, M))
    Bm[:, 0, :] = 1.0
    At = torch.tensor(A.reshape(T, M, K), dtype=torch.float32, device=_dev())
    Bt = torch.tensor(Bm, dtype=torch.float32, device=_dev())
    Ct = torch.zeros((T, M, M), dtype=torch.float32, device=_dev())
    Dt = torch.empty_like(Ct)
    _dot_probe[(T,)](At, Bt, Ct, Dt, M=M, N=M, K=K, PREC="tf32", num_warps=warps)
    D = Dt.cpu().numpy().astype(np.float64)[:, np.arange(M), np.arange(M)].reshape(cases)
    xb = x.astype(np.float32).view(np.uint32)
    trunc = (xb & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
    m, e = np.frexp(x)
    rn = np.ldexp(np.rint(m * 2.0**11), e - 11)
    return dict(cases=int(cases), match_truncation=int((D == trunc).sum()), match_round_nearest=int((D == rn).sum()),
                differ_trunc_rn=int((trunc != rn).sum()),
                max_rel_error=float((np.abs(D - x) / np.abs(x)).max()))


def probe_attention_ptx() -> dict:
    """Instructions in the PTX of our forward kernel as compiled for a small fp16 and fp32 call."""
    if INTERPRET:
        return {"note": "interpreter: no PTX"}
    out = {}
    try:
        from flashcheck import kernels
        from flashcheck.kernels import triton_fwd
        for dt, prec in ((torch.float16, None), (torch.float32, "ieee"), (torch.float32, "tf32")):
            q = torch.randn(1, 1, 256, 64, device="cuda", dtype=dt)
            kernels.attention(q, q, q, dot_precision=prec)
        fn = triton_fwd.attn_fwd_kernel
        caches = getattr(fn, "device_caches", None) or {}
        for dev, cache in caches.items():
            entries = cache[0] if isinstance(cache, tuple) else cache
            for key, ck in entries.items():
                out[str(len(out))] = _ptx_ops(ck)
    except Exception as exc:  # best effort: the probe kernels' PTX is the primary record
        out["error"] = repr(exc)
    return out


def _versions() -> dict:
    info = {"torch": torch.__version__, "triton": triton.__version__, "numpy": np.__version__,
            "python": sys.version.split()[0], "interpreter": INTERPRET,
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    if not INTERPRET and torch.cuda.is_available():
        info["device"] = torch.cuda.get_device_name()
        info["capability"] = list(torch.cuda.get_device_capability())
        info["cuda_runtime"] = torch.version.cuda
        try:
            info["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                            capture_output=True, text=True, timeout=30).stdout.strip()
        except Exception as exc:
            info["driver"] = repr(exc)
    else:
        info["device"] = "cpu (TRITON_INTERPRET=1: numpy, not a GPU)"
    return info


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--raw", default=None, help="npz with the tensor-core probe operands and outputs")
    ap.add_argument("--size", choices=("full", "quick", "tiny"), default="tiny" if INTERPRET else "full")
    ap.add_argument("--only", default="mma,ex2,lg2,div,ptx", help="sections, run in this order")
    ap.add_argument("--refit", action="store_true",
                    help="no GPU: refit the tensor-core models of --out in place from the raw outputs in --raw")
    args = ap.parse_args(argv)
    sz = {"full": FULL, "quick": QUICK, "tiny": TINY}[args.size]
    if args.refit:
        with open(args.out) as f:
            report = refit(json.load(f), args.raw)
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1, sort_keys=True)
        return 0
    rng = np.random.default_rng(20261123)
    report = {"versions": _versions(), "size": args.size, "sections_done": []}

    def save():
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(report, f, indent=1, sort_keys=True)
        os.replace(tmp, args.out)

    save()
    raw: dict = {}
    sections = {"ex2": lambda: probe_ex2(sz), "lg2": lambda: probe_lg2(sz), "div": lambda: probe_div(sz, rng),
                "mma": lambda: probe_mma(sz, rng, raw), "ptx": probe_attention_ptx}
    for name in args.only.split(","):
        fn = sections[name]
        t0 = time.time()
        try:
            report[name] = fn()
            report["sections_done"].append(name)
        except Exception as exc:
            report[name] = {"error": repr(exc)}
        report.setdefault("seconds", {})[name] = round(time.time() - t0, 2)
        save()
        if raw and args.raw:
            np.savez_compressed(args.raw, **{f"{k}__{f}": v for k, d in raw.items() for f, v in d.items()})
        print(f"[{name}] {time.time() - t0:.1f}s  {json.dumps(report[name])[:600]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Hardware constants of the error bounds, measured on the GPU (proofs/hardware_probe.py), not quoted.

`h100()` returns the `HardwareConstants` the bounds use for our kernel on the H100: each one derived
from proofs/measurements/h100.json (device, driver, torch/triton versions and date inside) by the
rules below, so that it is >= the measured maximum with a stated margin:

- ex2_rel_error (tl.math.exp2 on fp32, relative, results >= 2^-126): the probe evaluates EVERY fp32
  argument in [-150, 8] (the range the kernels feed it: s - m <= 0 in the forward, alpha, and the
  backward's slightly positive arguments) against float64 exp2 (<= 1 ulp of float64). The maximum
  over all of them IS the worst case over the range; the margin is the reference's own error:
  constant = measured + 2^-52 (the division |y - ref| / ref in float64 adds a relative 2^-53 to the
  ratio, below 2^-52 * 2^-22 and absorbed by rounding the sum up: `_up`).
  ex2_abs_floor: the largest |exp2(x) - 2^x| where 2^x < 2^-126 (flush to zero / subnormals).
- lg2_abs_error: eps with |lg2(x) - log2 x| <= eps (1 + |log2 x|), the form the LSE bound uses
  (bounds.py: (1 + |log2 l|) eps ln 2). Measured on every positive normal fp32; margin 2^-52 (the
  float64 reference's error is <= 2^-52 |log2 x| <= 2^-52 (1 + |log2 x|)).
- div_rel_error (fp32 '/' as Triton compiles it): measured exhaustively in the divisor significand
  (every fp32 in [1, 2)) against 512 dividend significands, and on 2^24 random pairs over the
  exponents the kernel meets; not exhaustive in the dividend, so the constant is the larger of the
  measured maximum (+ 2^-53 reference) and the PTX ISA's documented bound for the instruction the
  PTX shows (div.full.f32: 2 ulp, 2^-22 relative; div.rn.f32: correctly rounded, 2^-24): the
  measurement checks that figure, it does not replace it where it cannot cover the argument space.
- mma: per operand format, the model "blocks of k_step products added to the accumulator in one
  step, aligned to the largest exponent with mma_extra_bits bits below fp32's 24 (truncated or
  rounded), normalized into fp32 (truncated or rounded)" that reproduces bit for bit every output of
  the probe (random, cancelling and crafted A·B + C on the tile shapes the kernel uses; Fasi, Higham,
  Mikaitis & Pranesh 2021). Its per-step constant (MmaBehaviour.step_error), proved here:
      one step computes acc' = fl(t_0 + ... + t_k) (t_0 = acc, t_i the exact products). Let
      2^e <= max|t_i| < 2^(e+1). Alignment keeps each term to a multiple of 2^(e-23-F): the largest
      term loses nothing; each of the other k loses < 2^(e-23-F) when truncated (<= half that when
      rounded), and 2^e <= max|t_i| <= S := sum |t_i|; truncation only shrinks |t_i|, so the aligned
      sum has |.| <= S. Normalizing into fp32 loses < ulp <= 2^-23 |sum| (truncation; 2^-24 when
      rounded to nearest). Hence |acc' - sum t_i| < (2^-23 + k 2^(-23-F)) S  (rounded: halves),
      with no second-order term.
  When several models reproduce the data (the probe cannot tell them apart), the constants take the
  worst of them; the fit must be non-empty for the constants to exist at all.
- tf32_operand: "truncate" if every probed fp32 operand entered the tensor core with its low 13 bits
  cleared, "round" if every one was rounded to nearest; otherwise there is no constant (error).
- ieee_dot: "fma_chain" if bench/probe_fma_dot.py, run on the GPU, found every output of Triton's fp32
  tl.dot(input_precision="ieee") bit for bit equal to one fp32 FMA chain over K in ascending order from a zero
  accumulator (flashcheck.proofs.fma_chain), and the kernel's qk_scale2 = sm_scale * LOG2E equal to
  fl32(fl32(sm_scale) fl32(log2 e)), on our kernel's fp32 tile shapes and head dims (random, cancelling, tie
  and wide-exponent inputs; the forward's and the backward's logit patterns); the record is
  proofs/measurements/h100_fma_dot.json (the probe's --out). No record, a record from the interpreter or one
  with a mismatch: "unknown" (nothing assumed). ieee_dot_k: the padded head dims (the dot's K) the record
  covers. The bounds use it only through Precision.ieee_fma_chain, which flashcheck.adapters.ours_precision sets
  for our kernel on the GPU where this is "fma_chain" and the head dim's padded width is in ieee_dot_k.
- tma_add: the fp32 TMA reduce-add (cp.reduce.async.bulk.tensor .add: the fused dQ's tile additions,
  kernels/gluon_bwd_fused.py). "nearest" if bench/probe_tma_add.py, run on the GPU, found every one of its
  additions (ties, subnormal operands and results, random pairs over wide exponents, a quarter subnormal) bit for
  bit IEEE round to nearest even with gradual underflow (no flush); the record is
  proofs/measurements/h100_tma_add.json. No record or any mismatch: "unknown", and the bounds then charge a flush of
  every operand and result (bounds.md sec. 8b, precision._dq_tile_add_flush), as PTX documents for red / atom
  .add.f32.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

MEASUREMENTS = Path(__file__).resolve().parent / "measurements"
H100_JSON = MEASUREMENTS / "h100.json"
H100_FMA_DOT_JSON = MEASUREMENTS / "h100_fma_dot.json"  # bench/probe_fma_dot.py --out, on the GPU
H100_TMA_ADD_JSON = MEASUREMENTS / "h100_tma_add.json"  # bench/probe_tma_add.py --out, on the GPU
TMA_ADDS = ("nearest", "unknown")
IEEE_DOTS = ("unknown", "fma_chain")

# PTX ISA, "Floating point instructions": documented maximum relative errors of fp32 division
DOCUMENTED_DIV = {"div.full.f32": 2.0**-22, "div.rn.f32": 2.0**-24, "div.rn.ftz.f32": 2.0**-24,
                  "div.full.ftz.f32": 2.0**-22}
F64_REFERENCE = 2.0**-52  # relative error of the float64 references (CUDA double exp2/log2 <= 1 ulp)
TENSOR_CORE_DOTS = ("fp16", "bf16", "tf32")


def _up(x: float) -> float:
    """The next float64 above x: absorbs the rounding of the one addition that forms a constant."""
    return math.nextafter(x, math.inf)


@dataclass(frozen=True)
class MmaBehaviour:
    """How one tensor-core operand format accumulates into the fp32 accumulator (see module doc)."""

    dot: str  # "fp16" | "bf16" | "tf32"
    k_step: int  # products added in one step (one normalization into fp32)
    extra_bits: int  # alignment bits kept below fp32's 24-bit significand
    alignment: str  # "truncation" | "floor" | "round"
    normalization: str  # "truncation" | "floor" | "round"
    reference: str = "operands"  # alignment exponent: of the values, or e_a + e_b of the operands

    @property
    def step_error(self) -> float:
        """delta: |fl(acc + sum of k products) - exact| < delta (|acc| + sum |products|)."""
        half = 0.5 if self.alignment == "round" else 1.0
        norm = 2.0**-24 if self.normalization == "round" else 2.0**-23
        return norm + self.k_step * half * 2.0 ** (-23 - self.extra_bits)

    @property
    def per_product_error(self) -> float:
        """step_error / k_step: what one product costs when the sum runs over many steps."""
        return self.step_error / self.k_step


@dataclass(frozen=True)
class HardwareConstants:
    """The hardware hypotheses of the bounds (field meanings: module docstring)."""

    ex2_rel_error: float
    ex2_abs_floor: float
    lg2_abs_error: float  # eps in |lg2(x) - log2 x| <= eps (1 + |log2 x|)
    div_rel_error: float
    tf32_operand: str  # "truncate" | "round"
    mma: tuple[MmaBehaviour, ...] = ()
    source: str = ""
    # ex2.approx(0) == 1 exactly, so a rescale alpha = exp2(m - m) by an unchanged running max is exact:
    # checked on the H100 by bench/bounds_attack.py (bench/results/h100-2026-11-23/bounds/)
    ex2_exact_at_zero: bool = True
    # fp32 tl.dot(input_precision="ieee"): "fma_chain" (measured: one ascending fp32 FMA chain per output, see
    # the module docstring) or "unknown"
    ieee_dot: str = "unknown"
    # the padded head dims (the dot's K, BLOCK_D) that record covers: the claim holds for those only
    ieee_dot_k: tuple = ()
    # the fp32 TMA reduce-add: "nearest" (measured: IEEE round to nearest even, no flush) or "unknown"
    tma_add: str = "unknown"

    def __post_init__(self):
        if self.ieee_dot not in IEEE_DOTS:
            raise ValueError(f"HardwareConstants.ieee_dot must be one of {IEEE_DOTS}, got {self.ieee_dot!r}")
        if self.tma_add not in TMA_ADDS:
            raise ValueError(f"HardwareConstants.tma_add must be one of {TMA_ADDS}, got {self.tma_add!r}")

    @property
    def worst_mma(self) -> MmaBehaviour:
        """The format with the largest per-product error (then step error): the summary of `mma`."""
        return max(self.mma, key=lambda b: (b.per_product_error, b.step_error))

    @property
    def mma_accumulation(self) -> str:  # "truncation" | "round": the worst format's normalization
        return self.worst_mma.normalization

    @property
    def mma_k_step(self) -> int:
        return self.worst_mma.k_step

    @property
    def mma_extra_bits(self) -> int:
        return self.worst_mma.extra_bits

    def mma_for(self, dot: str) -> MmaBehaviour:
        for m in self.mma:
            if m.dot == dot:
                return m
        raise KeyError(f"no tensor-core behaviour measured for dot={dot!r} (have {[m.dot for m in self.mma]})")


@dataclass(frozen=True)
class Measured:
    """The measured maxima behind a HardwareConstants (what the GPU test compares against)."""

    ex2_rel_error: float
    ex2_abs_floor: float
    lg2_abs_error: float
    div_rel_error: float
    div_instruction: str
    mma: tuple[tuple[str, tuple[MmaBehaviour, ...]], ...]  # per probe config: the consistent models
    tf32_match_truncation: int
    tf32_match_round: int
    tf32_cases: int


_MODE = {"trunc": "truncation", "rz": "truncation", "rn": "round", "floor": "floor"}


def _models(entry: dict, dot: str) -> tuple[MmaBehaviour, ...]:
    return tuple(MmaBehaviour(dot, m["k_step"], m["extra_bits"], _MODE[m["alignment"]], _MODE[m["normalization"]],
                              m["reference"]) for m in entry.get("consistent_models", ()))


def _div_instruction(ops: list[str]) -> str:
    found = [op for op in ops if op.startswith("div.") and op.endswith("f32")]
    if len(found) != 1:
        raise ValueError(f"fp32 division: expected one div.*.f32 instruction in the probe's PTX, got {ops}")
    return found[0]


def measured_from(report: dict) -> Measured:
    """The maxima of one probe report (the JSON hardware_probe writes); raises if a section is missing."""
    missing = [s for s in ("ex2", "lg2", "div", "mma") if s not in report.get("sections_done", ())]
    if missing:
        raise ValueError(f"probe report lacks sections {missing} (errors: "
                         f"{ {s: report.get(s, {}).get('error') for s in missing} })")
    ex2, lg2, div, mma = report["ex2"], report["lg2"], report["div"], report["mma"]
    per_cfg, tf = [], (0, 0, 0)
    for name, entry in sorted(mma.items()):
        dot = name.split("_")[0]
        if dot not in TENSOR_CORE_DOTS:
            continue
        per_cfg.append((name, _models(entry, dot)))
        conv = entry.get("operand_conversion")
        if conv:
            tf = (tf[0] + conv["match_truncation"], tf[1] + conv["match_round_nearest"], tf[2] + conv["cases"])
    return Measured(
        ex2_rel_error=ex2["max_rel_error"], ex2_abs_floor=ex2["max_abs_error_below_2m126"],
        lg2_abs_error=lg2["max_mixed_error"],
        div_rel_error=max(div["max_rel_error"], div["random_pairs_max_rel_error"]),
        div_instruction=_div_instruction(div.get("ptx", [])) if div.get("ptx") else "",
        mma=tuple(per_cfg), tf32_match_truncation=tf[0], tf32_match_round=tf[1], tf32_cases=tf[2])


def constants_from(m: Measured, source: str = "") -> HardwareConstants:
    """Bound-side constants from measured maxima, by the rules of the module docstring."""
    if m.div_instruction not in DOCUMENTED_DIV:
        raise ValueError(f"fp32 division compiles to {m.div_instruction!r}: no documented bound known")
    worst: dict[str, MmaBehaviour] = {}
    for name, models in m.mma:
        if not models:
            raise ValueError(f"tensor-core probe {name}: no accumulation model reproduces the outputs")
        for b in models:
            cur = worst.get(b.dot)
            if cur is None or (b.per_product_error, b.step_error) > (cur.per_product_error, cur.step_error):
                worst[b.dot] = b
    if m.tf32_cases and m.tf32_match_truncation == m.tf32_cases:
        tf32 = "truncate"
    elif m.tf32_cases and m.tf32_match_round == m.tf32_cases:
        tf32 = "round"
    else:
        raise ValueError(f"tf32 operand conversion: {m.tf32_match_truncation} of {m.tf32_cases} probes match "
                         f"truncation, {m.tf32_match_round} rounding: neither explains all")
    return HardwareConstants(
        ex2_rel_error=_up(m.ex2_rel_error + F64_REFERENCE),
        ex2_abs_floor=_up(m.ex2_abs_floor + 2.0**-1074),
        lg2_abs_error=_up(m.lg2_abs_error + F64_REFERENCE),
        div_rel_error=max(_up(m.div_rel_error + 2.0**-53), DOCUMENTED_DIV[m.div_instruction]),
        tf32_operand=tf32, mma=tuple(worst[d] for d in TENSOR_CORE_DOTS if d in worst), source=source)


def load_report(path: Path | str = H100_JSON) -> dict:
    with open(path) as f:
        return json.load(f)


def load_record(path: Path | str) -> dict | None:
    """A measurement record (JSON), or None where it is missing or unreadable (then nothing is claimed from it)."""
    try:
        return load_report(path)
    except (OSError, ValueError):
        return None


def fp32_arguments(x, who: str):
    """x as float64, checked to hold fp32 values (NaN and infinities pass): the input of a measured fp32 unit
    (flashcheck.proofs.ex2_model.ex2, lg2_model.lg2); anything else raises ValueError naming `who`."""
    import numpy as np

    x = np.asarray(x, dtype=np.float64)
    if np.any(np.isfinite(x) & (x.astype(np.float32).astype(np.float64) != x)):
        raise ValueError(f"{who}: the arguments must be fp32 values (the hardware's input)")
    return x


def ieee_dot_from(report: dict | None) -> str:
    """HardwareConstants.ieee_dot from a bench/probe_fma_dot.py report (None: no record): "fma_chain" only for a
    full (not --quick) GPU run in which every case was bit-exact and qk_scale2 was as stated."""
    if not report:
        return "unknown"
    v = report.get("versions", {})
    gpu = not v.get("interpreter", True) and v.get("device_arg") == "cuda"
    full = not report.get("quick", True) and len(report.get("cases", ())) > 0
    exact = report.get("all_bit_exact") is True and report.get("qk_scale2_as_stated") is True and all(
        c.get("mismatches") == 0 for c in report.get("cases", ()))
    return "fma_chain" if gpu and full and exact else "unknown"


def tma_add_from(report: dict | None) -> str:
    """HardwareConstants.tma_add from a bench/probe_tma_add.py report (None: no record): "nearest" only for a GPU run
    of at least one tile in which every addition was round to nearest even with no flush, bit for bit."""
    if not report:
        return "unknown"
    runs = report.get("runs", ())
    ok = bool(report.get("device")) and len(runs) > 0 and all(
        r.get("pairs", 0) > 0 and r.get("mismatches", {}).get("nearest") == 0 for r in runs)
    return "nearest" if ok else "unknown"


def ieee_dot_k_from(report: dict | None) -> tuple:
    """The padded head dims (block_d) a passing bench/probe_fma_dot.py record covers (() unless ieee_dot_from says
    "fma_chain")."""
    if ieee_dot_from(report) != "fma_chain":
        return ()
    return tuple(sorted({int(c["block_d"]) for c in report["cases"]}))


@lru_cache(maxsize=None)
def h100() -> HardwareConstants:
    """The constants for our kernel on the H100, from the committed measurements."""
    report = load_report(H100_JSON)
    v = report["versions"]
    src = f"{H100_JSON.name}: {v.get('device')} driver {v.get('driver')} torch {v.get('torch')} " \
          f"triton {v.get('triton')} {v.get('date')}"
    fma = load_report(H100_FMA_DOT_JSON) if H100_FMA_DOT_JSON.exists() else None
    c = constants_from(measured_from(report), source=src)
    tma = load_report(H100_TMA_ADD_JSON) if H100_TMA_ADD_JSON.exists() else None
    return replace(c, ieee_dot=ieee_dot_from(fma), ieee_dot_k=ieee_dot_k_from(fma), tma_add=tma_add_from(tma))


@lru_cache(maxsize=None)
def interpreter() -> HardwareConstants:
    """Triton's interpreter (TRITON_INTERPRET=1): tl.dot is a NumPy float32 matmul whatever the operand
    format, i.e. IEEE round-to-nearest additions in some order. Any order of n additions is covered by
    n accumulator roundings of u = 2^-24 each (Higham, Thm 4.4 form), so every format is modelled as one
    product per step with round-to-nearest: step_error = 2^-24 (+ 2^-53 for the exact-product
    alignment that the record's form always charges). exp and division are libm/IEEE there (exp="libm"
    in the Precision), so the transcendental fields are not used; they keep the H100 values."""
    hw = h100()
    mma = tuple(MmaBehaviour(dot=d, k_step=1, extra_bits=29, alignment="round", normalization="round")
                for d in TENSOR_CORE_DOTS)
    return HardwareConstants(
        ex2_rel_error=hw.ex2_rel_error, ex2_abs_floor=hw.ex2_abs_floor, lg2_abs_error=hw.lg2_abs_error,
        div_rel_error=hw.div_rel_error,
        tf32_operand="round", mma=mma, source="Triton interpreter (NumPy float32, round to nearest)")


def exceeded(constants: HardwareConstants, m: Measured) -> list[str]:
    """What a fresh measurement shows beyond the constants (empty when every constant holds)."""
    out = []
    for name in ("ex2_rel_error", "ex2_abs_floor", "lg2_abs_error", "div_rel_error"):
        got, have = getattr(m, name), getattr(constants, name)
        if not got <= have:
            out.append(f"{name}: measured {got:.6g} > constant {have:.6g} (x{got / have:.4f})")
    for name, models in m.mma:
        if not models:
            out.append(f"{name}: no accumulation model reproduces the tensor-core outputs")
            continue
        dot = models[0].dot
        have = constants.mma_for(dot)
        for b in models:
            if b.per_product_error > have.per_product_error or b.step_error > have.step_error:
                out.append(f"{name}: model {b} exceeds the constant's {have}")
    if m.tf32_cases:
        want = m.tf32_match_truncation if constants.tf32_operand == "truncate" else m.tf32_match_round
        if want != m.tf32_cases:
            out.append(f"tf32 operands: {constants.tf32_operand} explains {want} of {m.tf32_cases} probes")
    return out


def main(argv=None) -> int:
    """python3 -m flashcheck.proofs.hardware [REPORT.json]: the measured maxima beside the bound-side constants."""
    import sys
    path = (argv if argv is not None else sys.argv[1:]) or [str(H100_JSON)]
    report = load_report(path[0])
    m = measured_from(report)
    c = constants_from(m, source=path[0])
    print(f"{'constant':<16}{'measured':>14}{'bound-side':>14}{'/2^-23':>9}")
    for name in ("ex2_rel_error", "ex2_abs_floor", "lg2_abs_error", "div_rel_error"):
        got, have = getattr(m, name), getattr(c, name)
        print(f"{name:<16}{got:>14.6g}{have:>14.6g}{have / 2.0**-23:>9.4f}")
    print(f"div instruction: {m.div_instruction}; tf32 operands: {c.tf32_operand} "
          f"({m.tf32_match_truncation}/{m.tf32_cases} truncated, {m.tf32_match_round} rounded)")
    for name, models in m.mma:
        print(f"{name:<22} " + "; ".join(f"k={b.k_step} F={b.extra_bits} {b.alignment}/{b.normalization} "
                                         f"delta={b.step_error / 2.0**-23:.4g}*2^-23" for b in models))
    print("exceeded:", exceeded(c, m) or "none")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

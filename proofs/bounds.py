"""A-priori floating-point error bounds: the tolerances every kernel test uses (ARCHITECTURE.md,
"Error-bound API"; derivation in proofs/bounds.md).

Given the float64 values a kernel actually received and a `Precision` describing how it computes,
`forward_bound` returns elementwise bounds on |O_kernel - O| and |LSE_kernel - LSE|, and
`backward_bound` on |dQ_kernel - dQ|, |dK_kernel - dK|, |dV_kernel - dV|, where O, LSE, dQ, dK, dV
are the exact results for those inputs; `lse_gradient_bound` on |dQ_kernel - dQ| for the gradient
of sum_i w_i LSE_i alone (dO = 0).

Two kinds, named as such:
- "worst_case": never exceeded, for any rounding errors (Higham's gamma_n = n u / (1 - n u) and
  rigorous majorants for every second-order term).
- "probabilistic": the first-order error is a sum of independent, mean-zero rounding errors
  (Higham & Mary 2019 model); Azuma-Hoeffding bounds it by LAMBDA standard deviations, exceeded with
  probability <= FAILURE_PROBABILITY per entry. Errors that are not random (tensor-core truncation,
  the truncation of fp32 operands to tf32, the ex2.approx / div.full approximation error, roundings
  shared by a whole row) stay worst-case,
  and the nonlinear remainder is bounded rigorously by its majorant series (proofs/bounds.md, sec. 6).

The model of the computation is the FA2 forward/backward of kernels/triton_fwd.py and
kernels/triton_bwd.py (base-2 logits, running max, deferred normalization, P and dS converted to the
operand dtype before the tensor-core products: rounded to nearest for fp16/bf16, truncated for tf32).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
import math

import numpy as np

# ----------------------------------------------------------------------------------------------
# Precision: what the kernel does
# ----------------------------------------------------------------------------------------------

INPUTS = ("float16", "bfloat16", "float32", "float64")
DOTS = ("fp16", "bf16", "tf32", "ieee", "fp64")
ACCUMULATORS = ("float32", "float64")
EXPS = ("ex2.approx", "libm")
KINDS = ("worst_case", "probabilistic")

# unit roundoff u = 2^-p of each format (round to nearest), p = significand bits including the hidden one
UNIT_ROUNDOFF = {
    "float16": 2.0**-11,
    "bfloat16": 2.0**-8,
    "tf32": 2.0**-11,
    "float32": 2.0**-24,
    "float64": 2.0**-53,
}
# half the smallest subnormal: the absolute error floor of rounding into the format
UNDERFLOW_FLOOR = {
    "float16": 2.0**-25,
    "bfloat16": 2.0**-134,
    "tf32": 2.0**-127,  # fp32 exponent range, treated as flush-to-zero at 2^-126 / 2
    "float32": 2.0**-126,  # ftz: |x| < 2^-126 may be flushed to 0
    "float64": 2.0**-1022,
}
# significand bits / exponent bits, to decide whether an input dtype is exact in an operand format
_FORMAT_BITS = {
    "float16": (11, 5),
    "bfloat16": (8, 8),
    "tf32": (11, 8),
    "float32": (24, 8),
    "float64": (53, 11),
}
_DOT_OPERAND = {"fp16": "float16", "bf16": "bfloat16", "tf32": "tf32", "ieee": "float32", "fp64": "float64"}
TENSOR_CORE_DOTS = ("fp16", "bf16", "tf32")
# Operand formats that fp32 values enter by TRUNCATION, not rounding: Triton on NVIDIA hands the raw
# fp32 bits to mma/wgmma .tf32, which ignores the low 13 significand bits (triton-lang/triton#4574).
# Relative error in (-2^-10, 0] (one ulp of an 11-bit significand, always shrinking |x|): one-sided,
# not mean-zero, so never treated as random (proofs/bounds.md, sec. 2 and 6).
TRUNCATING_DOTS = ("tf32",)
TRUNCATION_ERROR = {"tf32": 2.0**-10}
# absolute floor of that conversion: subnormals truncated (< 2^-136) or flushed to zero (< 2^-126)
TRUNCATION_FLOOR = {"tf32": 2.0**-126}

# Per-entry failure probability of a "probabilistic" bound, and the matching Azuma-Hoeffding
# multiplier: P(|sum_t c_t delta_t| >= lam * sqrt(sum_t c_t^2 u_t^2)) <= 2 exp(-lam^2 / 2).
FAILURE_PROBABILITY = 2.0**-30


def hoeffding_lambda(events: float = 1.0, eta: float = FAILURE_PROBABILITY) -> float:
    """lam with `events` * 2 exp(-lam^2/2) = eta (union bound over `events` Azuma events)."""
    return math.sqrt(2.0 * math.log(2.0 * events / eta))


LAMBDA = hoeffding_lambda()


@dataclass(frozen=True)
class HardwareConstants:
    """The hardware hypotheses the bounds use, in ONE place (replaced by proofs/hardware.py
    measurements at merge: the "hw" work measures them on the H100 and keeps the records in the repo).

    ex2_rel_error: relative error of ex2.approx.f32 (vendor figure: 2 ulp = 2^-22).
    ex2_exact_at_zero: ex2.approx(0) == 1 exactly (a rescale alpha = exp2(m - m) = 1 is then exact;
      checked by bench/bounds_attack.py on the GPU).
    lg2_abs_error: absolute error of lg2.approx.f32 per unit of (1 + |log2 x|) (vendor: 2^-22).
    div_rel_error: relative error of Triton's fp32 '/' (div.full.f32, vendor: 2^-22).
    mma_accumulation: how a tensor-core MMA step adds its products into the fp32 accumulator:
      "truncation" (error <= 2u of |acc| + sum |products| per step, one-sided) or "round" (u, RN).
    mma_k_step: products added per MMA step (a smaller step = more steps = a larger, safe bound)."""

    ex2_rel_error: float = 2.0**-22
    ex2_exact_at_zero: bool = True
    lg2_abs_error: float = 2.0**-22
    div_rel_error: float = 2.0**-22
    mma_accumulation: str = "truncation"
    mma_k_step: int = 8

    def __post_init__(self):
        if self.mma_accumulation not in ("truncation", "round"):
            raise ValueError(f"HardwareConstants.mma_accumulation must be 'truncation' or 'round', "
                             f"got {self.mma_accumulation!r}")
        if not isinstance(self.mma_k_step, int) or self.mma_k_step < 1:
            raise ValueError(f"HardwareConstants.mma_k_step must be a positive int, got {self.mma_k_step!r}")


# Replaced by proofs/hardware.py measurements (vendor figures until then).
HARDWARE = HardwareConstants()

ACCUMULATIONS = ("recursive", "blocked")
DELTA_SOURCES = ("output", "fp32")


@dataclass(frozen=True)
class Precision:
    """How a kernel computes (ARCHITECTURE.md): input dtype, tensor-core operand format, accumulator,
    stored output dtype, the exp implementation and the blocking of the inner loops.

    accumulation: "recursive" (default, a fused FA2 kernel: every tile's products are added into the
      running accumulator, tl.dot(a, b, acc): one chain of roundings over ALL keys, per product on
      CUDA cores, per MMA k-step on tensor cores, the key tiles of an unmasked row in ascending order,
      which the probabilistic O bound uses for its exact partial sums) or "blocked" (each tile's
      product summed on its own, then added to the accumulator once; with block 1: any order).
    p_split: the forward P.V is done as P_hi.V + P_lo.V with P_hi = round(P), P_lo = round(P - P_hi):
      P's operand error is ~u^2 instead of u, at twice the accumulation steps.
    delta_from: the backward's Delta = rowsum(dO o O) is formed from O rounded to the output dtype
      ("output") or from an O accurate to fp32 ("fp32").
    hardware: the hardware constants (HARDWARE unless overridden)."""

    input: str
    dot: str
    accumulate: str = "float32"
    output: str | None = None
    exp: str = "ex2.approx"
    block_k: int = 64
    block_q: int = 64
    accumulation: str = "recursive"
    p_split: bool = False
    delta_from: str = "output"
    hardware: HardwareConstants = HARDWARE

    def __post_init__(self):
        for name, value, allowed in (
            ("input", self.input, INPUTS),
            ("dot", self.dot, DOTS),
            ("accumulate", self.accumulate, ACCUMULATORS),
            ("exp", self.exp, EXPS),
            ("accumulation", self.accumulation, ACCUMULATIONS),
            ("delta_from", self.delta_from, DELTA_SOURCES),
        ):
            if value not in allowed:
                raise ValueError(f"Precision.{name} must be one of {allowed}, got {value!r}")
        if self.output is not None and self.output not in INPUTS:
            raise ValueError(f"Precision.output must be None or one of {INPUTS}, got {self.output!r}")
        for name in ("block_k", "block_q"):
            b = getattr(self, name)
            if not isinstance(b, int) or isinstance(b, bool) or b < 1:
                raise ValueError(f"Precision.{name} must be a positive int, got {b!r}")
        if not isinstance(self.p_split, bool):
            raise ValueError(f"Precision.p_split must be a bool, got {self.p_split!r}")
        if not isinstance(self.hardware, HardwareConstants):
            raise ValueError(f"Precision.hardware must be a HardwareConstants, got {self.hardware!r}")

    @property
    def out(self) -> str:
        return self.output or self.input


# The float64 NumPy references: fp64 everything, libm exp, any summation order and blocking ("blocked"
# with blocks of 1: n + 1 roundings per term, which bounds every order; no ascending-order refinement).
REFERENCE_PRECISION = Precision(input="float64", dot="fp64", accumulate="float64", output="float64",
                                exp="libm", block_k=1, block_q=1, accumulation="blocked")


def gamma(n, u):
    """Higham's gamma_n = n u / (1 - n u) (inf when n u >= 1)."""
    nu = np.asarray(n, dtype=np.float64) * u
    with np.errstate(divide="ignore"):
        return np.where(nu < 1.0, nu / np.maximum(1.0 - nu, 0.0), np.inf)


def _fits(fmt: str, into: str) -> bool:
    p1, e1 = _FORMAT_BITS[fmt]
    p2, e2 = _FORMAT_BITS[into]
    return p1 <= p2 and e1 <= e2


@dataclass(frozen=True)
class _Model:
    """The unit roundoffs and operation counts the derivation needs (proofs/bounds.md, sec. 2)."""

    u_w: float  # working (accumulator) format: every fp32 scalar op, exp argument, l sum, rescale
    u_in: float  # conversion of an input value into the dot operand format (0 when exact)
    u_p: float  # conversion of P / dS (working format) into the operand format before a product
    u_pv: float  # that conversion for the forward's P in P.V (~u_p^2 with p_split)
    trunc: bool  # those conversions truncate (tf32): one-sided errors, deterministic, never random
    u_dacc: float  # accumulation inside a dot: 2u_w (truncation) on tensor cores, else u_w
    tensor_core: bool  # tensor-core accumulation is truncation: biased, so never treated as random
    eps_exp: float  # relative error of exp2
    eps_div: float  # relative error of the final division
    u_out: float  # rounding of the stored result
    floor_out: float  # its absolute floor (subnormal range of the output dtype)
    floor_p: float  # absolute floor when rounding P/dS to the operand format (subnormals)
    floor_w: float  # absolute floor of a working-format exp result (ftz)
    approx: bool  # GPU approximate transcendental instructions (lg2.approx as well)
    eps_lg2: float  # absolute error of log2 per unit of (1 + |log2 x|)
    alpha_exact_at_zero: bool  # exp2(0) == 1 exactly: an unchanged running max rescales exactly
    recursive: bool  # products added into the running accumulator (tl.dot(a, b, acc))
    k_step: int  # products per accumulation rounding inside a dot (1 on CUDA cores: one FMA each)
    pv_products: int  # products per key in the forward's P.V (2 with p_split)


def _model(precision: Precision) -> _Model:
    if not isinstance(precision, Precision):
        raise TypeError(f"precision must be a proofs.bounds.Precision, got {type(precision).__name__}")
    pr = precision
    u_w = UNIT_ROUNDOFF[pr.accumulate]
    op = _DOT_OPERAND[pr.dot]
    trunc = pr.dot in TRUNCATING_DOTS
    u_op = TRUNCATION_ERROR[pr.dot] if trunc else UNIT_ROUNDOFF[op]
    floor_op = TRUNCATION_FLOOR[pr.dot] if trunc else UNDERFLOW_FLOOR[op]
    tc = pr.dot in TENSOR_CORE_DOTS
    approx = pr.exp == "ex2.approx"
    hw = pr.hardware
    u_p = 0.0 if _fits(pr.accumulate, op) else u_op
    # p_split: P_lo = P - P_hi is exact in fp32 and |P_lo| <= u_op P, so rounding P_lo costs <= u_op^2 P
    u_pv = u_p * u_op if pr.p_split else u_p
    mma_round = hw.mma_accumulation == "round"
    return _Model(
        u_w=u_w,
        u_in=0.0 if _fits(pr.input, op) else u_op,
        u_p=u_p,
        u_pv=u_pv,
        trunc=trunc,
        u_dacc=(u_w if mma_round else 2.0 * u_w) if tc else u_w,
        tensor_core=tc and not mma_round,
        eps_exp=hw.ex2_rel_error if approx else 2.0 * u_w,
        # Triton's fp32 '/' is div.full.f32; IEEE division rounds once
        eps_div=hw.div_rel_error if approx else u_w,
        u_out=UNIT_ROUNDOFF[pr.out],
        floor_out=UNDERFLOW_FLOOR[pr.out],
        floor_p=0.0 if _fits(pr.accumulate, op) else floor_op,
        floor_w=UNDERFLOW_FLOOR[pr.accumulate],
        approx=approx,
        eps_lg2=hw.lg2_abs_error if approx else 2.0 * u_w,
        alpha_exact_at_zero=hw.ex2_exact_at_zero if approx else True,
        recursive=pr.accumulation == "recursive",
        k_step=hw.mma_k_step if tc else 1,
        pv_products=2 if pr.p_split else 1,
    )


def _dot_steps(M: _Model, n: int, block: int, products: int = 1, repeats: int = 1) -> int:
    """Roundings of the accumulator that one product of a length-n contraction, done in tiles of
    `block` (repeated `repeats` times into the same accumulator, e.g. a GQA group), can go through
    (proofs/bounds.md sec. 4).

    recursive (tl.dot(a, b, acc)): the accumulator runs through every tile: one rounding per product on
    CUDA cores (FMA), one per MMA k-step on tensor cores: T * ceil(min(n, block) / k_step) * products.
    blocked: each tile's min(n, block) products summed, then one addition into the accumulator per tile."""
    T = max(1, -(-n // block)) * repeats
    width = min(n, block)
    if M.recursive:
        return T * (-(-width // M.k_step)) * products
    return width * products + T


def _conv(model: _Model):
    """(u_in, u_p) split into the random part (round to nearest: mean-zero, enters the variance) and the
    deterministic part (truncation: one-sided, added linearly): ((rand_in, rand_p), (det_in, det_p))."""
    if model.trunc:
        return (0.0, 0.0), (model.u_in, model.u_p)
    return (model.u_in, model.u_p), (0.0, 0.0)


def _check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    return kind


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


# ----------------------------------------------------------------------------------------------
# Shared pieces
# ----------------------------------------------------------------------------------------------


def _problem(q, k, v, scale, causal, window, mask, bias):
    """Exact logits S (masked to -inf), visibility, the float64 arrays, scale and sizes."""
    from reference.attention import expand_kv, masked_logits, resolve_scale
    from reference.shapes import check_attention_args

    p = check_attention_args(q, k, v, scale=scale, causal=causal, window=window, mask=mask, bias=bias)
    qf = np.asarray(q, dtype=np.float64)
    kf = expand_kv(np.asarray(k, dtype=np.float64), p.group)
    vf = expand_kv(np.asarray(v, dtype=np.float64), p.group)
    s, vis = masked_logits(q, k, p, scale=scale, causal=causal, window=window, mask=mask, bias=bias)
    return p, qf, kf, vf, s, vis, abs(resolve_scale(scale, p.d))


def _softmax_parts(s, vis):
    """Row max m (0 for empty rows), A = softmax(S) (0 where invisible), l = sum exp(S - m), LSE."""
    empty = ~vis.any(axis=-1)
    m = np.where(empty, 0.0, np.max(np.where(vis, s, -np.inf), axis=-1))
    e = np.exp(np.where(vis, s - m[..., None], -np.inf))  # invisible: exp(-inf) = 0, no 0 - m overflow
    l = e.sum(axis=-1)
    l_safe = np.where(empty, 1.0, l)
    A = e / l_safe[..., None]
    lse = np.where(empty, -np.inf, m + np.log(l_safe))
    return m, A, l_safe, lse, empty


def _rows_chunks(Nq: int, Nk: int, dv: int, budget: int = 1 << 21):
    step = max(1, budget // max(1, Nk * dv))
    for r0 in range(0, Nq, step):
        yield slice(r0, min(Nq, r0 + step))


def _weighted_dev(weights_abs, weights_sq, v, o):
    """For (..., Nq, Nk) weights W and rows o (..., Nq, dv): sum_j W_ij |v_jc - o_ic| and
    sum_j W_ij (v_jc - o_ic)^2, computed directly (no cancellation), chunked over query rows.

    All weights of one kind are stacked, so each chunk is one einsum (rows, n_w, Nk) x (rows, Nk, dv),
    and |v - o|, (v - o)^2 are formed in place in one small buffer. (Not np.matmul: these are many
    small products, and a threaded BLAS on a loaded machine made them ~50x slower.)"""
    Nq, Nk = weights_abs[0].shape[-2:] if weights_abs else weights_sq[0].shape[-2:]
    dv = v.shape[-1]
    lead = np.broadcast_shapes(o.shape[:-2], v.shape[:-2])
    out_a = np.zeros((*lead, Nq, len(weights_abs), dv))
    out_s = np.zeros((*lead, Nq, len(weights_sq), dv))
    for r in _rows_chunks(Nq, Nk, dv, budget=1 << 18):
        D = v[..., None, :, :] - o[..., r, None, :]  # (..., rows, Nk, dv)
        np.abs(D, out=D)
        if weights_abs:
            Wa = np.stack([W[..., r, :] for W in weights_abs], axis=-2)  # (..., rows, n_abs, Nk)
            out_a[..., r, :, :] = np.einsum("...iwj,...ijc->...iwc", Wa, D)
        if weights_sq:
            np.multiply(D, D, out=D)
            Ws = np.stack([W[..., r, :] for W in weights_sq], axis=-2)
            out_s[..., r, :, :] = np.einsum("...iwj,...ijc->...iwc", Ws, D)
    return ([out_a[..., t, :] for t in range(len(weights_abs))],
            [out_s[..., t, :] for t in range(len(weights_sq))])


def _exp_err(e, eps):
    """b = exp(e) (1 + eps) - 1, the relative-error bound of an exp whose argument is off by <= e:
    +inf where exp(e) overflows (intended: that factor is vacuous)."""
    with np.errstate(over="ignore"):
        return np.exp(e) * (1.0 + eps) - 1.0


def _weighted_exp_err(A, b, e, eps, vis, log_a):
    """(A b, A (1 + b), bad) for b = exp(e)(1 + eps) - 1 (0 off `vis`).

    Where exp(e) overflows (b = inf, `bad`), the product A b would be 0 * inf = NaN for an A that
    underflowed; there A (1 + b) is evaluated as exp(log A + e)(1 + eps), which is 0 when the
    perturbed weight itself underflows (the entry's contribution is then provably 0) and +inf
    (vacuous, honest) otherwise. Elsewhere the plain products, bit for bit. `log_a()` returns
    log A_ij = s_ij - m_i - log l_i (only called when some entry is bad)."""
    bad = vis & ~np.isfinite(b)
    with np.errstate(invalid="ignore"):
        Ab = A * b
        Ab1 = A * (1.0 + b)
    if bad.any():
        with np.errstate(over="ignore", invalid="ignore"):
            stable = np.exp(np.where(bad, log_a() + e, -np.inf)) * (1.0 + eps)
        Ab1 = np.where(bad, stable, Ab1)
        Ab = np.where(bad, stable - A, Ab)
    return Ab, Ab1, bad


def _fix_bad(value, bad, stable):
    """`value` where not `bad`, else `stable()` (an expression of A (1 + b) that avoids 0 * inf)."""
    if not np.any(bad):
        return value
    with np.errstate(over="ignore", invalid="ignore"):
        return np.where(bad, stable(), value)


def _no_nan(x):
    """A bound is a number or +inf: a NaN can only come from inf * 0 or inf - inf inside a piece that
    is already vacuous, so it is +inf (honest)."""
    x = np.asarray(x, dtype=np.float64)
    return np.where(np.isnan(x), np.inf, x)


@dataclass(frozen=True)
class _Logits:
    """Per-logit bounds on the error e_ij of the exponent argument (natural-log units), sec. 3."""

    wc: np.ndarray  # worst case |e_ij| (full majorant)
    lin: np.ndarray  # linear part of that majorant
    sigma: np.ndarray  # sqrt(sum c_t^2 u_t^2) of the random (round-to-nearest) first-order part
    det: np.ndarray  # first-order part that is not random (truncation, shared constant rounding)
    qk: tuple = ()  # (scale |q||k|^T, scale sqrt(q^2 (k^2)^T), |scale q.k| or None): shift-independent, reusable


def _logit_errors(qf, kf, s, shift, vis, scale, model: _Model, d: int, has_bias: bool,
                  qk: tuple = ()) -> _Logits:
    """Error of t_ij = fl(fl(q_i.k_j) * c) - shift_i (c = scale*log2 e rounded), in natural units.

    dot: operands converted into the dot format (u_in each: rounded, or truncated for tf32), d products
    accumulated with u_dacc
    (products exact on tensor cores, rounded for ieee/fp64, counted within gamma_d);
    argument: c rounded (u_w |s|, shared by the row: deterministic), product rounded (u_w |s|),
    subtraction of the running max rounded (u_w |s - m_run| <= u_w |s - m|), bias add (u_w |s|)."""
    if not qk:  # the products of q and k do not depend on the shift: computed once per problem
        absqk = scale * (np.abs(qf) @ np.swapaxes(np.abs(kf), -1, -2))
        sqqk = scale * np.sqrt((qf * qf) @ np.swapaxes(kf * kf, -1, -2))
        # |scale q.k| before any bias: with a cancelling bias it can be far larger than |s|
        qk = (absqk, sqqk, np.abs(scale * (qf @ np.swapaxes(kf, -1, -2))) if has_bias else None)
    absqk, sqqk, a_qk = qk
    s0 = np.where(vis, s, 0.0)
    if a_qk is None:
        a_qk = np.abs(s0)
    a_b = np.abs(s0) if has_bias else 0.0 * s0  # rounding of the bias add, on the sum
    a_t = np.abs(s0 - shift[..., None])
    u, ui = model.u_w, model.u_in
    coef_arg = 2.0 * a_qk + a_b + a_t
    dot_wc = ((1.0 + ui) ** 2 * (1.0 + gamma(d, model.u_dacc)) - 1.0) * absqk
    # The argument's roundings in order, each <= u |computed value| = u (|exact value| + the error so
    # far): the first-order part is u coef_arg (= arg_lin), the rest is the exact second-order majorant
    # (not a gamma_n hand count: gamma_3 coef_arg put 2u coef_arg of first-order error into "second order").
    x_hat = a_qk + dot_wc  # |fl(q.k)| in logit units
    err_c = u * x_hat  # c = scale * log2(e) rounded once
    err_p = u * (x_hat + err_c)  # fl(x * c)
    err_b = u * (a_b + dot_wc + err_c + err_p) if has_bias else 0.0  # + bias
    err_t = u * (a_t + dot_wc + err_c + err_p + err_b)  # - running max
    arg_wc = err_c + err_p + err_b + err_t
    dot_lin = (2.0 * ui + d * model.u_dacc) * absqk
    arg_lin = u * coef_arg
    (ri, _), (di, _) = _conv(model)
    sig_dot = math.sqrt(2.0) * ri * sqqk + (0.0 if model.tensor_core else math.sqrt(d) * u * absqk)
    det_dot = (d * model.u_dacc if model.tensor_core else 0.0) * absqk
    if di:  # truncated q, k: sum_k q_k k_k theta_k, theta_k in [-2 u_in, 0] (first order), not random:
        # <= 2 u_in max(positive part, negative part) = u_in (sum_k |q_k k_k| + |q.k|)  (bounds.md sec. 6)
        det_dot = det_dot + di * (absqk + a_qk)
    sig_arg = u * np.sqrt(a_qk**2 + a_b**2 + a_t**2)
    det_arg = u * a_qk  # rounding of the constant c = scale * log2(e): one error for the whole row
    z = np.zeros_like(s0)
    return _Logits(
        wc=np.where(vis, dot_wc + arg_wc, z),
        lin=np.where(vis, dot_lin + arg_lin, z),
        sigma=np.where(vis, np.sqrt(sig_dot**2 + sig_arg**2), z),
        det=np.where(vis, det_dot + det_arg, z),
        qk=qk,
    )


# ----------------------------------------------------------------------------------------------
# Forward
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Forward:
    """Everything backward_bound reuses from the forward analysis."""

    bound: ForwardBound
    s: np.ndarray
    vis: np.ndarray
    A: np.ndarray
    o: np.ndarray
    lse: np.ndarray
    m: np.ndarray
    empty: np.ndarray
    qf: np.ndarray
    kf: np.ndarray
    vf: np.ndarray
    scale: float
    problem: object
    parts: dict  # the per-entry pieces of the O analysis, reused for Delta in the backward (sec. 8)


def _forward(q, k, v, scale, causal, window, mask, bias, precision: Precision, kind: str,
             eta: float = FAILURE_PROBABILITY) -> _Forward:
    kind = _check_kind(kind)
    # Infinite intermediates are intended (a vacuous factor, e.g. exp of a logit error > 709): they
    # give +inf bounds; zero contributions are computed without 0 * inf (_weighted_exp_err).
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        F = _forward_impl(q, k, v, scale, causal, window, mask, bias, precision, kind, eta)
    fb = F.bound
    bound = ForwardBound(o=_no_nan(fb.o), lse=_no_nan(fb.lse), kind=fb.kind, precision=fb.precision)
    return dataclasses.replace(F, bound=bound)


def _forward_impl(q, k, v, scale, causal, window, mask, bias, precision, kind, eta) -> _Forward:
    M = _model(precision)
    p, qf, kf, vf, s, vis, sc = _problem(q, k, v, scale, causal, window, mask, bias)
    lam = hoeffding_lambda(1.0, eta)
    # every quantity of the forward analysis belongs to one query row: blocks of rows keep the
    # (rows, Nk) temporaries small (cache-sized, no page faults of fresh 32 MB arrays at N = 2048)
    R = _cat_rows([_forward_rows(p, M, precision, kind, lam, qf[..., r, :], kf, vf, s[..., r, :],
                                 vis[..., r, :], sc, bias is not None)
                   for r in _rows_chunks(p.Nq, p.Nk, 1, budget=ROW_BLOCK_ENTRIES)])
    fb = ForwardBound(o=R["err"], lse=R["lse_err"], kind=kind, precision=precision)
    return _Forward(bound=fb, s=s, vis=vis, A=R["A"], o=R["o"], lse=R["lse"], m=R["m"], empty=R["empty"],
                    qf=qf, kf=kf, vf=vf, scale=sc, problem=p, parts=R["parts"])


# (rows x Nk) entries per block of query rows in the forward analysis
ROW_BLOCK_ENTRIES = 1 << 17


def _cat_rows(chunks):
    """Join the per-block results of _forward_rows along the query-row axis (axis 2 of (B, H, rows, ...))."""
    if len(chunks) == 1:
        return chunks[0]
    first = chunks[0]
    if isinstance(first, dict):
        return {key: _cat_rows([c[key] for c in chunks]) for key in first}
    if isinstance(first, tuple):
        return tuple(_cat_rows([c[i] for c in chunks]) for i in range(len(first)))
    if isinstance(first, np.ndarray) and first.ndim >= 3:
        return np.concatenate(chunks, axis=2)
    return first  # scalars: the same for every block


def _rescale_changes(s, wc, vis, block_k: int, exact_at_zero: bool):
    """c_j: how many rescales alpha = exp2(m_old - m_new) with m_new != m_old can come AFTER key j's tile
    (each multiplies key j's weight, in acc and in l alike, by a rounded alpha: sec. 5).

    Tile t can move the computed running max only if max_{j in t} (s_j + e_j) > max_{j in earlier
    tiles} (s_j - e_j); the first visible tile rescales an empty accumulator (no error). Without
    exp2(0) == 1 exactly, every later visible tile counts."""
    Nk = s.shape[-1]
    T = max(1, -(-Nk // block_k))
    pad = T * block_k - Nk

    def tiles(x):
        x = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, pad)], constant_values=-np.inf)
        return x.reshape(*x.shape[:-1], T, block_k).max(axis=-1)

    hi = tiles(np.where(vis, s + wc, -np.inf))
    lo = tiles(np.where(vis, s - wc, -np.inf))
    prev = np.maximum.accumulate(lo, axis=-1)
    prev = np.concatenate([np.full_like(prev[..., :1], -np.inf), prev[..., :-1]], axis=-1)
    seen = np.isfinite(prev)
    change = seen & ((hi > prev) if exact_at_zero else np.isfinite(hi))
    later = np.cumsum(change[..., ::-1], axis=-1)[..., ::-1] - change  # changes in tiles after t
    return np.repeat(later, block_k, axis=-1)[..., :Nk].astype(np.float64)


def _step_ends(Nk: int, block: int, k_step: int):
    """Key indices after which the accumulator is rounded (each MMA/FMA step: the last key of each
    k_step group within each tile) and after which each tile ends (the rescale acc * alpha)."""
    ends, tile_ends = [], []
    for t0 in range(0, Nk, block):
        t1 = min(Nk, t0 + block)
        ends.extend(range(min(t0 + k_step, t1) - 1, t1 - 1, k_step))
        ends.append(t1 - 1)
        tile_ends.append(t1 - 1)
    return np.unique(np.asarray(ends)), np.asarray(tile_ends)


def _partial_sums(A, vf, o, ends, tile_ends, products: int):
    """For keys added in ascending order: sum over the accumulation steps s of F_s^2 and of C_s, with
    C_s = sum_{j<=s} A_j, F_s = sum_{j<=s} A_j (v_j - O) (the partial sum's fluctuation around O, sec. 6);
    each product step counted `products` times, plus the rescale at each tile end."""
    Nq, Nk = A.shape[-2:]
    dv = vf.shape[-1]
    C = np.cumsum(A, axis=-1)
    c_sum = products * C[..., ends].sum(-1) + C[..., tile_ends].sum(-1)
    f_sq = np.zeros((*np.broadcast_shapes(A.shape[:-1], o.shape[:-1]), dv))
    for r in _rows_chunks(Nq, Nk, dv, budget=1 << 20):
        F = np.cumsum(A[..., r, :, None] * (vf[..., None, :, :] - o[..., r, None, :]), axis=-2)
        f_sq[..., r, :] = products * (F[..., ends, :] ** 2).sum(-2) + (F[..., tile_ends, :] ** 2).sum(-2)
    return f_sq, c_sum


def _forward_rows(p, M: _Model, precision, kind, lam, qf, kf, vf, s, vis, sc, has_bias) -> dict:
    """The forward analysis of a block of query rows (s, vis, qf restricted to those rows)."""
    m, A, l, lse, empty = _softmax_parts(s, vis)
    o = A @ vf
    d, Nk = p.d, p.Nk
    u = M.u_w

    lg = _logit_errors(qf, kf, s, m, vis, sc, M, d, has_bias)
    # the computed shift m_hat <= max_j (s_j + e_j) may exceed m by `excess`
    excess = np.max(np.where(vis, s - m[..., None] + lg.wc, 0.0), axis=-1, initial=0.0)
    # Rescales (sec. 5): key j's weight is multiplied, in acc and in l alike, by the computed alphas of
    # the c_j later tiles that moved the max. Their arguments telescope: sum |m_old - m_new| over
    # them <= m_hat - s_hat_j, each subtraction rounded (u); each exp2 has relative error eps_exp.
    # Equal factors in numerator and denominator do NOT cancel between keys: a weight perturbation.
    c = np.where(vis, _rescale_changes(s, lg.wc, vis, precision.block_k, M.alpha_exact_at_zero), 0.0)
    with np.errstate(invalid="ignore"):
        a_arg = np.where(vis, u * (m[..., None] - s + lg.wc + excess[..., None]), 0.0)
    e_key = lg.wc + a_arg  # argument error of key j's total weight
    eps_key = (1.0 + M.eps_exp) ** (1.0 + c) - 1.0  # exp2 of p_j and of the c_j alphas
    # b_ij: relative error of key j's weight as computed: exp(e) (1 + eps)^(1 + c) - 1
    b_wc = np.where(vis, _exp_err(e_key, eps_key), 0.0)
    b_lin = np.where(vis, lg.lin + u * np.abs(s - m[..., None]) + (1.0 + c) * M.eps_exp, 0.0)
    alpha_det = np.where(vis, u * np.abs(s - m[..., None]) + c * M.eps_exp, 0.0)  # not random: telescoped

    def log_a():
        return np.where(vis, s - m[..., None] - np.log(l)[..., None], -np.inf)

    Ab_wc, Ab1_wc, _ = _weighted_exp_err(A, b_wc, e_key, eps_key, vis, log_a)  # A b, A (1 + b)

    # accumulation (sec. 4): P.V through the accumulator (recursive: over all keys, per product or per
    # MMA k-step), T rescales acc*alpha (RN); l: block_k-wide fp32 sum + 2 roundings per tile (RN)
    T = max(1, -(-Nk // precision.block_k))
    n_pv = _dot_steps(M, Nk, precision.block_k, products=M.pv_products)
    n_l = min(Nk, precision.block_k) + 2 * T
    nu_wc = (1 + M.u_pv) * (1 + M.u_in) * (1 + gamma(n_pv, M.u_dacc)) * (1 + gamma(T, u)) - 1
    nu_lin = M.u_pv + M.u_in + n_pv * M.u_dacc + T * u
    mu_wc = float(gamma(n_l, u))
    mu_lin = n_l * u

    # absolute floors: ftz of exp results, subnormal rounding of P into the operand format; l is
    # divided by exp(excess) (a key far below m does not count with its own, possibly huge, error)
    n_vis = vis.sum(axis=-1)
    l_eff = l * np.exp(-excess)

    absv = np.abs(vf)
    W_b = Ab_wc
    W_lin = A * b_lin
    W_det = A * (lg.det + alpha_det + M.eps_exp)
    W_sig = (A * lg.sigma) ** 2
    W_vis = vis.astype(np.float64)
    (dev_b, dev_lin, dev_det, dev_vis, dev_A), (dev_sig, dev_AA) = _weighted_dev(
        [W_b, W_lin, W_det, W_vis, A], [W_sig, A * A], vf, o)
    Av = Ab1_wc @ absv  # sum_j A_j (1 + b_j) |v_j|
    A_absv = A @ absv
    A1b = Ab1_wc.sum(axis=-1)  # sum_j A_j (1 + b_j)
    sum_absv = W_vis @ absv
    oabs = np.abs(o)

    floors = (M.floor_w * (dev_vis + nu_wc * sum_absv + mu_wc * n_vis[..., None] * oabs)
              + M.floor_p * (1 + nu_wc) * sum_absv) / l_eff[..., None]
    num_wc = dev_b + nu_wc * Av + mu_wc * A1b[..., None] * oabs + floors
    # D / l >= sum_j A_j e^{-e_j} (1 - eps)^(1 + c_j) (1 - mu) - floors > 0: the lower side of each
    # perturbation, so the denominator never vanishes even when e_j = O(1)
    w_low = np.where(vis, np.exp(-e_key) * (1 - M.eps_exp) ** (1.0 + c), 0.0)
    A1b_low = (A * w_low).sum(axis=-1)
    den_low = A1b_low * (1 - mu_wc) - n_vis * M.floor_w / l_eff
    with np.errstate(divide="ignore", invalid="ignore"):
        inv_den = np.where(empty, 1.0, np.where(den_low > 0, 1.0 / np.maximum(den_low, 1e-300), np.inf))[..., None]

    if kind == "worst_case":
        pre = num_wc * inv_den
    else:
        # first-order part: random (Azuma) + deterministic; the rest is the majorant remainder.
        # Round to nearest is only modelled as random where the summands are not systematic (sec. 6):
        # every first-order term sum_s delta_s X_s is split into its part along O (X_s = C_s O, bounded
        # worst-case: u |O| sum_s C_s <= n u |O|) and the fluctuation around O (random). Constant or
        # near-constant V, uniform rows, a large mean: the systematic part is then all deterministic.
        num_lin = dev_lin + nu_lin * A_absv + mu_lin * oabs
        remainder = np.maximum(num_wc - num_lin, 0.0)
        (ri, rp), (di, dp) = _conv(M)
        rp = M.u_pv if rp else 0.0
        n_rn = (0 if M.tensor_core else n_pv) + T  # accumulation roundings to nearest
        acc_sq = n_rn * dev_A**2  # sum_s F_s^2 <= n (max |F_s|)^2, any order
        acc_c = np.full(oabs.shape, float(n_rn))  # sum_s C_s <= n
        if n_rn and M.recursive and vis.all():  # unmasked: the kernel adds the key tiles in ascending order
            ends, tile_ends = _step_ends(Nk, precision.block_k, M.k_step)
            f_sq, c_sum = _partial_sums(A, vf, o, ends, tile_ends, M.pv_products)
            acc_sq = np.minimum(acc_sq, f_sq)
            acc_c = np.minimum(acc_c, c_sum[..., None])
        var = dev_sig + (rp**2 + ri**2) * dev_AA + u**2 * acc_sq
        det = dev_det + ((rp + ri) + acc_c * u + mu_lin) * oabs
        det = det + (n_pv * M.u_dacc if M.tensor_core else 0.0) * A_absv
        if M.trunc:  # sum_j A_j v_jc theta_jc, theta in [-(u_p + u_in), 0]: one-sided (bounds.md sec. 6)
            det = det + ((M.u_pv if dp else 0.0) + di) * 0.5 * (A_absv + oabs)
        # the worst case always holds, so it caps the probabilistic bound (concentrated rows)
        pre = np.minimum((lam * np.sqrt(var) + det + remainder) * inv_den, num_wc * inv_den)
    # final division acc / l (fp32 O, what Delta uses with delta_from="fp32") and the store
    err32 = pre + M.eps_div * (oabs + pre)
    err = err32 + M.u_out * (oabs + err32) + M.floor_out
    err = np.where(empty[..., None], 0.0, err)

    # LSE = ln2 (m2 + log2 l): |log(l_hat / l)| (the rescales are in b: their arguments telescope,
    # sum |dm| <= m - s_j, not (T - 1) u R), the rounding of the sum, of the ln2 product and of ln2
    # itself (gamma_3 |LSE|), and the log2 error.
    x_lse = A1b * (1 + mu_wc) - 1.0 + n_vis * M.floor_w / l_eff  # l_hat / l <= 1 + x_lse
    lse_low = den_low  # l_hat / l >= lse_low
    with np.errstate(divide="ignore", invalid="ignore"):
        log_wc = np.maximum(np.log1p(x_lse), np.where(lse_low > 0, -np.log(np.maximum(lse_low, 1e-300)), np.inf))
    lse_abs = np.abs(np.where(empty, 0.0, lse))
    log2l = np.abs(np.log2(l))
    log_err = M.eps_lg2 * (1.0 + log2l) * math.log(2.0)
    rounding = float(gamma(3, u)) * lse_abs + log_err
    if kind == "worst_case":
        lse_err = log_wc + rounding
        lse_sigma, lse_det = np.zeros_like(lse_err), lse_err
    else:
        lin = (A * b_lin).sum(axis=-1) + mu_lin
        # majorant series of |log(l_hat / l)|: -log(1 - x+) (its linear part is lin)
        with np.errstate(divide="ignore", invalid="ignore"):
            series = np.where(x_lse < 1.0, -np.log1p(-np.minimum(x_lse, 0.999999)), np.inf)
        remainder = np.maximum(series - lin, 0.0)
        var = ((A * lg.sigma) ** 2).sum(axis=-1)
        det = (A * (lg.det + alpha_det + M.eps_exp)).sum(axis=-1) + mu_lin  # l's sum: systematic, worst case
        lse_err = np.minimum(lam * np.sqrt(var) + det + remainder, log_wc) + rounding
        # split for the backward (random part sigma, the rest det), where the cap did not bind
        capped = lam * np.sqrt(var) + det + remainder >= log_wc
        lse_sigma = np.where(capped, 0.0, np.sqrt(var))
        lse_det = np.where(capped, log_wc, det + remainder) + rounding
    lse_err = np.where(empty, 0.0, lse_err)

    o_shape = (p.B, p.Hq, s.shape[-2], vf.shape[-1])
    final = (err32 if precision.delta_from == "fp32" else err) - np.where(empty[..., None], 0.0, pre)
    return dict(err=np.broadcast_to(err, o_shape).copy(), lse_err=lse_err, A=A, o=o, lse=lse, m=m, empty=empty,
                parts=dict(b_wc=b_wc, Ab_wc=Ab_wc, Ab1_wc=Ab1_wc, b_lin=b_lin, qk=lg.qk, l=l,
                           sigma=lg.sigma, det=lg.det + alpha_det, nu_wc=nu_wc, nu_lin=nu_lin,
                           mu_wc=mu_wc, mu_lin=mu_lin, inv_den=inv_den, floors=floors,
                           final=final, n_pv=n_pv, T=T, n_l=n_l,
                           lam=lam, lse_sigma=np.where(empty, 0.0, lse_sigma),
                           lse_det=np.where(empty, 0.0, lse_det)))


def forward_bound(q, k, v, *, scale=None, causal=False, window=None, mask=None, bias=None,
                  precision: Precision, kind: str = "probabilistic") -> ForwardBound:
    """Elementwise bound on |O_kernel - O| (.o) and |LSE_kernel - LSE| (.lse) for a kernel that
    computes like `precision` on exactly these float64 inputs (proofs/bounds.md, sec. 5)."""
    return _forward(q, k, v, scale, causal, window, mask, bias, precision, kind).bound


def reference_bound(q, k, v, do=None, *, scale=None, causal=False, window=None, mask=None, bias=None,
                    kind: str = "worst_case"):
    """Bound on the float64 references (reference/) against the mpmath oracle (reference/exact.py).

    The references compute in float64 with libm exp and an unspecified summation order; the same
    derivation applies with u = 2^-53, block size 1 (any blocking) and one extra half-ulp for the
    rounding of the mpmath value to float64 in the comparison. Returns a ForwardBound, or a
    BackwardBound when `do` is given."""
    kw = dict(scale=scale, causal=causal, window=window, mask=mask, bias=bias)
    u = UNIT_ROUNDOFF["float64"]
    if do is None:
        ref = _forward(q, k, v, scale, causal, window, mask, bias, REFERENCE_PRECISION, kind)
        fb = ref.bound
        o_abs = np.abs(ref.o)
        lse_abs = np.abs(np.where(ref.empty, 0.0, ref.lse))
        return ForwardBound(o=fb.o + u * o_abs, lse=fb.lse + u * lse_abs, kind=kind,
                            precision=REFERENCE_PRECISION)
    bb, exact = _backward(q, k, v, do, scale, causal, window, mask, bias, REFERENCE_PRECISION, kind)
    return BackwardBound(dq=bb.dq + u * np.abs(exact[0]), dk=bb.dk + u * np.abs(exact[1]),
                         dv=bb.dv + u * np.abs(exact[2]), kind=kind, precision=REFERENCE_PRECISION)


def _combine(wc, lin, var, det, lam, kind):
    """worst_case: the majorant wc. probabilistic: lam sqrt(var) + det + (wc - lin), capped by wc."""
    if kind == "worst_case":
        return wc
    return np.minimum(lam * np.sqrt(np.maximum(var, 0.0)) + det + np.maximum(wc - lin, 0.0), wc)


def _delta_error(F: _Forward, M: _Model, dof, dP, g, absdov, vf, kind):
    """Bound on |Delta_hat_i - Delta_i|, Delta_hat = fl(sum_c dO_ic O_hat_ic) with the kernel's own O_hat.

    Contracting the exact O-error identity of sec. 5 with dO (bounds.md sec. 8):
    sum_c dO_c (N_c/D - O_c) = [sum_j p_j (b_j g_j + (1 + b_j)(sum_c dO_c nu_jc v_jc - mu_j Delta))] / D,
    g_j = dP_j - Delta, so the logit errors enter through |g_j| (not sum_c |dO_c||v_jc - O_c|); then the
    division and the store per column, and the fp32 sum of dv products."""
    P = F.parts
    A, o, u = F.A, F.o, M.u_w
    abs_do = np.abs(dof)
    absg = np.abs(g)
    delta = (dof * o).sum(-1)
    aD = np.abs(delta)
    inv = P["inv_den"][..., 0]
    sum_fin = (abs_do * (P["floors"] * P["inv_den"] + P["final"])).sum(-1)
    wc = (((P["Ab_wc"] * absg).sum(-1) + (P["Ab1_wc"] * (P["nu_wc"] * absdov)).sum(-1)
           + P["Ab1_wc"].sum(-1) * P["mu_wc"] * aD) * inv + sum_fin)
    rounding = float(gamma(F.problem.dv, u)) * (abs_do * (np.abs(o) + F.bound.o)).sum(-1)
    if kind == "worst_case":
        return wc + rounding, np.zeros_like(wc), wc + rounding
    oabs_do = abs_do * np.abs(o)
    u_store = M.u_out if F.bound.precision.delta_from == "output" else 0.0
    lin = ((A * P["b_lin"] * absg).sum(-1) + P["nu_lin"] * (A * absdov).sum(-1) + P["mu_lin"] * aD
           + (M.eps_div + u_store) * oabs_do.sum(-1))
    Av = A @ np.abs(vf)  # (A |V|)_c
    n_pv, T, n_l = P["n_pv"], P["T"], P["n_l"]
    (ri, rp), (di, dp) = _conv(M)
    rp = M.u_pv if rp else 0.0
    n_rn = (0 if M.tensor_core else n_pv) + T
    # as for O (sec. 6): the parts of the accumulation and P-rounding errors along O (resp. Delta) are
    # systematic on structured inputs: worst case; only the fluctuation around them is random
    # (sum_j A_j |v_jc - O_c| <= (A|V|)_c + |O_c|)
    var = (((A * P["sigma"] * g) ** 2).sum(-1) + rp**2 * ((A * g) ** 2).sum(-1)
           + ri**2 * ((A * A) * ((dof * dof) @ np.swapaxes(vf * vf, -1, -2))).sum(-1)
           + n_rn * u**2 * ((dof * (Av + np.abs(o))) ** 2).sum(-1)
           + u_store**2 * ((dof * o) ** 2).sum(-1))
    det = ((A * (P["det"] + M.eps_exp) * absg).sum(-1) + (rp + P["mu_lin"]) * aD + n_rn * u * oabs_do.sum(-1)
           + (n_pv * M.u_dacc if M.tensor_core else 0.0) * (abs_do * Av).sum(-1) + M.eps_div * oabs_do.sum(-1))
    if M.trunc:  # P_j truncated (coefficients A_j dP_j), v_jc truncated (A_j dO_c v_jc), both summing
        # to Delta: one-sided errors, u (sum |coefficient| + |Delta|) / 2 each (bounds.md sec. 6)
        det = det + 0.5 * (dp * ((A * np.abs(dP)).sum(-1) + aD) + di * ((abs_do * Av).sum(-1) + aD))
    lam = F.parts.get("lam", LAMBDA)
    prob = lam * np.sqrt(var) + det + np.maximum(wc - lin, 0.0)
    capped = prob >= wc
    return (np.minimum(prob, wc) + rounding, np.where(capped, 0.0, np.sqrt(var)),
            np.where(capped, wc, det + np.maximum(wc - lin, 0.0)) + rounding)


def _store(err, exact_abs, u_scale, M: _Model):
    """The last multiply by scale (scale itself rounded: gamma_2) and the store in the output dtype
    (relative u_out, absolute floor in its subnormal range)."""
    err = err + u_scale * (exact_abs + err)
    return err + M.u_out * (exact_abs + err) + M.floor_out


def backward_bound(q, k, v, do, *, scale=None, causal=False, window=None, mask=None, bias=None,
                   precision: Precision, kind: str = "probabilistic") -> BackwardBound:
    """Elementwise bound on |dQ_kernel - dQ|, |dK_kernel - dK|, |dV_kernel - dV| (proofs/bounds.md, sec. 7).

    The kernel's backward uses its own forward outputs: LSE (error <= forward_bound(...).lse) to
    recompute P, and O stored in the output dtype (error <= forward_bound(...).o) in
    Delta = rowsum(dO o O). Both are folded in; for "probabilistic" the forward bounds are taken at a
    failure probability small enough that the union over every row feeding one gradient entry stays
    below FAILURE_PROBABILITY."""
    return _backward(q, k, v, do, scale, causal, window, mask, bias, precision, kind)[0]


def _backward(q, k, v, do, scale, causal, window, mask, bias, precision, kind):
    kind = _check_kind(kind)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # as in _forward
        bb, exact = _backward_impl(q, k, v, do, scale, causal, window, mask, bias, precision, kind)
    return BackwardBound(dq=_no_nan(bb.dq), dk=_no_nan(bb.dk), dv=_no_nan(bb.dv), kind=kind,
                         precision=precision), exact


def _rows_of(x, r):
    """Query rows r of a per-row quantity (axis 2 of (B, H, Nq, ...)); scalars and None unchanged."""
    if isinstance(x, np.ndarray) and x.ndim >= 3:
        return x[:, :, r]
    if isinstance(x, tuple):
        return tuple(_rows_of(y, r) for y in x)
    return x


def _forward_rows_view(F: _Forward, r) -> _Forward:
    """F restricted to the query rows r (what _delta_error and the per-row backward terms read)."""
    fb = F.bound
    return dataclasses.replace(
        F, bound=ForwardBound(o=fb.o[:, :, r], lse=fb.lse[:, :, r], kind=fb.kind, precision=fb.precision),
        s=F.s[:, :, r], vis=F.vis[:, :, r], A=F.A[:, :, r], o=F.o[:, :, r], lse=F.lse[:, :, r],
        m=F.m[:, :, r], empty=F.empty[:, :, r], qf=F.qf[:, :, r],
        parts={key: _rows_of(val, r) for key, val in F.parts.items()})


def _backward_impl(q, k, v, do, scale, causal, window, mask, bias, precision, kind):
    M = _model(precision)
    from reference.shapes import check_attention_args

    pr = check_attention_args(q, k, v, scale=scale, causal=causal, window=window, mask=mask, bias=bias)
    dof = np.asarray(do, dtype=np.float64)
    if dof.shape != (pr.B, pr.Hq, pr.Nq, pr.dv):
        raise ValueError(f"do must have O's shape {(pr.B, pr.Hq, pr.Nq, pr.dv)}, got {dof.shape}")
    n_events = 2.0 * pr.Nq * pr.group * (1 + pr.dv)
    F = _forward(q, k, v, scale, causal, window, mask, bias, precision, kind,
                 eta=FAILURE_PROBABILITY / n_events)
    lam = hoeffding_lambda(2.0)
    u, sc, group = M.u_w, F.scale, pr.group
    kf, vf = F.kf, F.vf
    d, dv = pr.d, pr.dv

    # dV = P^T dO: P rounded to the operand format, dO exact unless input does not fit (u_in);
    # accumulation over query tiles: block_q products per tile, T_q * group tiles (GQA heads add up)
    Nq, Nk = pr.Nq, pr.Nk
    # dK, dV: one accumulator through every query tile of every head of the GQA group; dQ: through
    # every key tile (recursive, sec. 4)
    n_q = _dot_steps(M, Nq, precision.block_q, repeats=group)
    n_k = _dot_steps(M, Nk, precision.block_k)
    nu_q_wc = (1 + M.u_p) * (1 + M.u_in) * (1 + gamma(n_q, M.u_dacc)) - 1
    nu_q_lin = M.u_p + M.u_in + n_q * M.u_dacc
    rho_wc = (1 + gamma(2, u)) * (1 + M.u_p) - 1.0
    rho_lin = 2 * u + M.u_p
    g2 = float(gamma(2, u))
    (r_in, r_p), (d_in, d_p) = _conv(M)
    kap_k = (1 + M.u_in) * (1 + gamma(n_k, M.u_dacc)) - 1.0
    dP_kw = (1 + M.u_in) ** 2 * (1 + gamma(dv, M.u_dacc)) - 1.0

    def _t(x):  # (B, Hq, rows, Nk) -> (B, Hq, Nk, rows)
        return np.swapaxes(x, -1, -2)

    def _kv(x):  # sum the group's query heads into their kv head
        return x.reshape(pr.B, pr.Hkv, group, *x.shape[2:]).sum(axis=2)

    abs_vT, vT, vvT = _t(np.abs(vf)), _t(vf), _t(vf * vf)
    abs_k = np.abs(kf)
    # sums over query rows (dV, dK), accumulated block by block; dQ is per row
    acc = {}

    def _add(name, x):
        acc[name] = x if name not in acc else acc[name] + x

    dq_blocks, dQ_blocks = [], []
    # every term below belongs to one query row i, except the sums over i of dV and dK: blocks of rows
    # keep the (rows, Nk) temporaries small; dV and dK add up the blocks' products
    for r in _rows_chunks(Nq, Nk, 1, budget=ROW_BLOCK_ENTRIES):
        Fr = _forward_rows_view(F, r)
        vis, A, qf, o, empty = Fr.vis, Fr.A, Fr.qf, Fr.o, Fr.empty
        do_r = dof[:, :, r]
        abs_do = np.abs(do_r)
        lse0 = np.where(empty, 0.0, Fr.lse)
        eps_L = Fr.bound.lse  # error of the stored LSE

        # P_ij = exp2(fl(s c) - fl(LSE log2 e)): the logit errors with shift LSE, the LSE error, exp error
        lg = _logit_errors(qf, kf, Fr.s, lse0, vis, sc, M, d, bias is not None, qk=Fr.parts["qk"])
        e_lse = u * np.abs(lse0)  # rounding of LSE * log2(e)
        e_wc = lg.wc + (float(gamma(1, u)) * np.abs(lse0) + eps_L)[..., None]
        b_wc = np.where(vis, _exp_err(e_wc, M.eps_exp), 0.0)

        def log_a(Fr=Fr, vis=vis):
            return np.where(vis, Fr.s - Fr.m[..., None] - np.log(Fr.parts["l"])[..., None], -np.inf)

        _, Ab1_wc, bad = _weighted_exp_err(A, b_wc, e_wc, M.eps_exp, vis, log_a)
        b_lin = np.where(vis, lg.lin + (e_lse + eps_L)[..., None] + M.eps_exp, 0.0)
        # probabilistic: the stored LSE's error splits into its random first-order part (std sig_L, from
        # the forward's roundings, independent from row to row: it joins this entry's Azuma sum) and the rest
        sig_L, det_L = Fr.parts["lse_sigma"], Fr.parts["lse_det"]
        b_det = np.where(vis, lg.det + (det_L + e_lse)[..., None] + M.eps_exp, 0.0)
        b_sig = lg.sigma  # e_lse is one rounding shared by the row: kept in b_det
        floor_P = np.where(vis, M.floor_w * (1 + nu_q_wc) + M.floor_p * (1 + gamma(n_q, M.u_dacc)), 0.0)

        dodo = do_r * do_r
        _add("AabsdO", _t(A) @ abs_do)
        _add("dv_wc", _t(_fix_bad(A * ((1 + b_wc) * (1 + nu_q_wc) - 1.0), bad,
                                  lambda: Ab1_wc * (1 + nu_q_wc) - A) + floor_P) @ abs_do)
        _add("dv_lin", _t(A * (b_lin + nu_q_lin)) @ abs_do)
        _add("dv_var1", _t((A * b_sig) ** 2 + (A * sig_L[..., None]) ** 2) @ dodo)
        _add("dv_var2", _t(A * A) @ dodo)
        _add("dv_det", _t(A * b_det) @ abs_do)
        _add("dV", _t(A) @ do_r)

        # dP = dO V^T (dv-long dot), g = dP - Delta, dS = P o g in fp32, rounded to the operand format
        dP = do_r @ vT
        absdov = abs_do @ abs_vT
        sqdov = np.sqrt(dodo @ vvT)
        dP_wc = dP_kw * absdov
        dP_lin = (2 * M.u_in + dv * M.u_dacc) * absdov
        dP_sig = math.sqrt(2.0) * r_in * sqdov + (0.0 if M.tensor_core else math.sqrt(dv) * u * absdov)
        dP_det = (dv * M.u_dacc if M.tensor_core else 0.0) * absdov
        if d_in:  # dO and V truncated to tf32, one-sided: u_in (sum_c |dO_c v_jc| + |dP_j|), not random
            dP_det = dP_det + d_in * (absdov + np.abs(dP))
        g = np.where(vis, dP - (do_r * o).sum(-1)[..., None], 0.0)
        absg = np.abs(g)
        eps_D, sig_D, det_D = _delta_error(Fr, M, do_r, dP, g, absdov, vf, kind)
        eD = eps_D[..., None]
        dS_abs = A * absg
        dS = A * g

        def _dS_errors(bw, Abw1, badw, bl, bd, eD=eD, dD=det_D[..., None], extra_var=0.0,
                       vis=vis, A=A, absg=absg, dP_wc=dP_wc, dP_lin=dP_lin, dP_sig=dP_sig, dP_det=dP_det,
                       b_sig=b_sig):
            """(wc, lin, var, det) of dS_hat - dS for P_hat = A (1 + b), |b| <= bw (A (1 + bw) = Abw1, stable
            where `badw`; linear part bl, of which bd is not random), Delta off by <= eD (dD not random)."""
            X = absg + dP_wc + eD
            wcS = np.where(vis, _fix_bad(A * ((1 + bw) * (1 + rho_wc) * X - absg), badw,
                                         lambda: Abw1 * (1 + rho_wc) * X - A * absg)
                           + M.floor_w * (1 + rho_wc) * X + M.floor_p, 0.0)
            linS = np.where(vis, A * ((bl + rho_lin) * absg + dP_lin + eD), 0.0)
            varS = np.where(vis, A * A * ((b_sig * absg) ** 2 + dP_sig**2 + (2 * u**2 + r_p**2) * absg**2)
                            + extra_var, 0.0)
            # (a truncation of dS to tf32 is counted in _grad, with the other operand's)
            detS = np.where(vis, A * (bd * absg + dP_det + dD), 0.0)
            return wcS, linS, varS, detS

        # the LSE and Delta errors of row i come from the same forward roundings: (a + b)^2 <= 2a^2 + 2b^2
        dS_wc, dS_lin, dS_var, dS_det = _dS_errors(
            b_wc, Ab1_wc, bad, b_lin, b_det,
            extra_var=2 * A * A * ((sig_L[..., None] * absg) ** 2 + sig_D[..., None] ** 2))
        # dK = scale dS^T Q: its pieces summed over the query rows (finished after the loop, _grad)
        aq, qq = np.abs(qf), qf * qf
        _add("dk_base", _t(dS_abs) @ aq)
        _add("dk_wcS", _t(dS_wc) @ aq)
        _add("dk_lin", _t(dS_lin) @ aq)
        _add("dk_var", _t(dS_var) @ qq)
        _add("dk_SS", _t(dS * dS) @ qq)
        _add("dk_det", _t(dS_det) @ aq)
        _add("dK", _t(dS) @ qf)

        # For dQ_i the LSE error is one factor (1 + c_i) on the whole row i of P, and sum_j dS_ij = 0
        # (Lemma 9), so it costs c_i |dQ_i| instead of c_i sum_j |dS_ij||k_j|: dQ_hat = (1 + c_i) dQ'_hat,
        # where dQ' has P' = A (1 + b') with the LSE part removed from b.
        c_row = (np.exp(float(gamma(1, u)) * np.abs(lse0) + eps_L) - 1.0)[..., None]
        b_wc_row = np.where(vis, _exp_err(lg.wc, M.eps_exp), 0.0)
        _, Ab1_row, bad_row = _weighted_exp_err(A, b_wc_row, lg.wc, M.eps_exp, vis, log_a)
        b_lin_row = np.where(vis, lg.lin + M.eps_exp, 0.0)
        b_det_row = np.where(vis, lg.det + M.eps_exp, 0.0)
        # Likewise the Delta error is one number per row: it adds -delta_i sum_j P_ij k_j, bounded with
        # |sum_j A_ij k_jc| (dq_delta), so dQ's dS errors leave it out.
        wcS, linS, varS, detS = _dS_errors(b_wc_row, Ab1_row, bad_row, b_lin_row, b_det_row, eD=0.0, dD=0.0)
        wc, lin, var, det, dQ_exact = _grad(M, sc, n_k, dS_abs @ abs_k, wcS @ abs_k, linS @ abs_k,
                                            varS @ (kf * kf), (dS * dS) @ (kf * kf), detS @ abs_k, dS @ kf)
        dq_delta = sc * eD * (np.abs(A @ kf)
                              + _fix_bad(A * ((1 + kap_k) * (1 + b_wc_row) * (1 + rho_wc) - 1.0), bad_row,
                                         lambda: Ab1_row * ((1 + kap_k) * (1 + rho_wc)) - A) @ abs_k)
        dq_err = (1 + c_row) * (_combine(wc, lin, var, det, lam, kind) + dq_delta) + c_row * np.abs(dQ_exact)
        dq_err = _store(dq_err, np.abs(dQ_exact), g2, M)
        dq_blocks.append(np.where(empty[..., None], 0.0, dq_err))
        dQ_blocks.append(dQ_exact)

    AabsdO = acc["AabsdO"]
    # systematic parts (sec. 6): a partial sum s of the accumulation is C_s dV + F_s, C_s in [0, 1],
    # |F_s| <= sum_i A_ij |dO_ic| + |dV_jc|; the part along dV (and P's rounding along dV) worst case
    abs_dV = np.abs(acc["dV"])
    n_rn_q = 0 if M.tensor_core else n_q
    dv_var = (acc["dv_var1"] + (r_p**2 + r_in**2) * acc["dv_var2"]
              + n_rn_q * u**2 * (AabsdO + abs_dV)**2)
    dv_det = (acc["dv_det"] + (n_q * M.u_dacc if M.tensor_core else 0.0) * AabsdO
              + (n_rn_q * u + r_p + r_in) * abs_dV)
    if M.trunc:  # P and dO truncated to tf32, one-sided: (u_p + u_in) (sum_i A_ij |dO_ic| + |dV_jc|) / 2
        dv_det = dv_det + (d_p + d_in) * 0.5 * (AabsdO + np.abs(acc["dV"]))
    dV_exact = _kv(acc["dV"])
    dv_err = _combine(_kv(acc["dv_wc"]), _kv(acc["dv_lin"]), _kv(dv_var), _kv(dv_det), lam, kind)
    dv_err = _store(dv_err, np.abs(dV_exact), 0.0, M)

    wc, lin, var, det, dK_exact = _grad(M, sc, n_q, acc["dk_base"], acc["dk_wcS"], acc["dk_lin"],
                                        acc["dk_var"], acc["dk_SS"], acc["dk_det"], acc["dK"])
    dk_err = _combine(_kv(wc), _kv(lin), _kv(var), _kv(det), lam, kind)
    dk_err = _store(dk_err, np.abs(_kv(dK_exact)), g2, M)
    dq_err = np.concatenate(dq_blocks, axis=2)
    dQ_exact = np.concatenate(dQ_blocks, axis=2)
    bound = BackwardBound(dq=dq_err, dk=dk_err, dv=dv_err, kind=kind, precision=precision)
    return bound, (dQ_exact, _kv(dK_exact), dV_exact)


def _grad(M: _Model, sc, n, base, wcS_ao, linS_ao, varS_oo, SS_oo, detS_ao, S_other):
    """scale * S @ other with S's error (wc, lin, var, det), the operand rounding of `other` (u_in) and
    the accumulation of n terms (tensor core or RN), from the products base = |S| @ |other|,
    wcS @ |other|, linS @ |other|, varS @ other^2, (S * S) @ other^2, detS @ |other| and S @ other
    (sums over the contraction index, which may be added up block by block).

    wc = (1 + kappa) (wcS + |S|) @ |other| - base, evaluated as kappa (wcS_ao + base) + wcS_ao: the same
    number without the cancellation of the literal form (kappa ~ n u, so its rounding error was up to
    1e-16 / kappa of the result: ~1e-9 relative in fp32, ~10% for the fp64 reference bound)."""
    u = M.u_w
    kap_wc = (1 + M.u_in) * (1 + gamma(n, M.u_dacc)) - 1.0
    kap_lin = M.u_in + n * M.u_dacc
    wc = sc * (kap_wc * (wcS_ao + base) + wcS_ao)
    lin = sc * (linS_ao + kap_lin * base)
    (r_in, _), (d_in, d_p) = _conv(M)
    # systematic parts (sec. 6): each partial sum of the accumulation is C_s R + F_s with R = S @ other,
    # C_s in [0, 1], |F_s| <= base + |R|; the part along R, and the conversions of dS (two fp32
    # roundings, then the operand format) along R, are charged worst case
    n_rn = 0 if M.tensor_core else n
    (_, r_p), _ = _conv(M)
    abs_r = np.abs(S_other)
    var = sc**2 * (varS_oo + r_in**2 * SS_oo + n_rn * u**2 * (base + abs_r)**2)
    det = sc * (detS_ao + (n * M.u_dacc if M.tensor_core else 0.0) * base
                + (n_rn * u + 2 * u + r_p + r_in) * abs_r)
    if M.trunc:  # dS and `other` (K or Q) truncated to tf32: sum_j dS_j o_j theta_j, theta in
        # [-(u_p + u_in), 0]: one-sided, (u_p + u_in) (|S| @ |other| + |S @ other|) / 2, not random
        det = det + sc * (d_p + d_in) * 0.5 * (base + np.abs(S_other))
    return wc, lin, var, det, sc * S_other


def lse_gradient_bound(q, k, *, scale=None, causal=False, window=None, mask=None, bias=None, dlse=None,
                       precision: Precision, kind: str = "probabilistic") -> np.ndarray:
    """Elementwise bound (q's shape) on |dQ_kernel - dQ| for dQ = d(sum_i w_i LSE_i)/dq = scale w_i
    sum_j A_ij k_j, w = `dlse` (B, Hq, Nq) (default ones; values exact in fp32), and dO = 0
    (proofs/bounds.md, sec. 8a).

    The dQ kernel then has dP = 0, Delta = -w_i exactly, so dS = P_hat o w_i (one fp32 rounding):
    the dQ analysis of backward_bound with g_ij = w_i, no dP and no Delta error. P_hat is recomputed
    from the kernel's own stored LSE (error forward_bound(...).lse, one factor (1 + c_i) per row).
    "probabilistic": two events per entry (the row's LSE bound and the entry's Azuma sum)."""
    kind = _check_kind(kind)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # as in _forward
        return _no_nan(_lse_gradient_impl(q, k, scale, causal, window, mask, bias, dlse, precision, kind)[0])


def _lse_gradient_impl(q, k, scale, causal, window, mask, bias, dlse, precision, kind):
    M = _model(precision)
    qa, ka = np.asarray(q, dtype=np.float64), np.asarray(k, dtype=np.float64)
    v = np.zeros((*ka.shape[:-1], 1))  # the LSE bound does not depend on v
    F = _forward(qa, ka, v, scale, causal, window, mask, bias, precision, kind, eta=FAILURE_PROBABILITY / 2)
    pr = F.problem
    w = np.ones((pr.B, pr.Hq, pr.Nq)) if dlse is None else np.asarray(dlse, dtype=np.float64)
    if w.shape != (pr.B, pr.Hq, pr.Nq):
        raise ValueError(f"dlse must have LSE's shape {(pr.B, pr.Hq, pr.Nq)}, got {w.shape}")
    lam = hoeffding_lambda(2.0)
    u, sc, kf = M.u_w, F.scale, F.kf
    n_k = _dot_steps(M, pr.Nk, precision.block_k)
    # dS = P_hat * w_i (gamma_2 kept from backward_bound: conservative, the kernel rounds once),
    # then converted to the operand format (u_p: rounded, or truncated for tf32)
    rho_wc = (1 + gamma(2, u)) * (1 + M.u_p) - 1.0
    rho_lin = 2 * u + M.u_p
    (r_in, r_p), _ = _conv(M)
    abs_k, kk = np.abs(kf), kf * kf
    out, exact = [], []
    for r in _rows_chunks(pr.Nq, pr.Nk, 1, budget=ROW_BLOCK_ENTRIES):
        Fr = _forward_rows_view(F, r)
        vis, A, empty = Fr.vis, Fr.A, Fr.empty
        lse0 = np.where(empty, 0.0, Fr.lse)
        absg = np.where(vis, np.abs(w[:, :, r])[..., None], 0.0)
        g = np.where(vis, w[:, :, r][..., None], 0.0)
        # P_hat = A (1 + c_i)(1 + b_ij): c_i from the stored LSE and the rounding of LSE log2(e)
        # (one factor per row), b_ij from the logit error (shift LSE) and exp2, as in backward_bound
        lg = _logit_errors(Fr.qf, kf, Fr.s, lse0, vis, sc, M, pr.d, bias is not None, qk=Fr.parts["qk"])
        c_row = (np.exp(float(gamma(1, u)) * np.abs(lse0) + Fr.bound.lse) - 1.0)[..., None]
        b_wc = np.where(vis, _exp_err(lg.wc, M.eps_exp), 0.0)

        def log_a(Fr=Fr, vis=vis):
            return np.where(vis, Fr.s - Fr.m[..., None] - np.log(Fr.parts["l"])[..., None], -np.inf)

        _, Ab1, bad = _weighted_exp_err(A, b_wc, lg.wc, M.eps_exp, vis, log_a)
        b_lin = np.where(vis, lg.lin + M.eps_exp, 0.0)
        b_det = np.where(vis, lg.det + M.eps_exp, 0.0)
        # error of dS_hat: the _dS_errors of backward_bound with dP = 0 and no Delta error (X = |w_i|)
        wcS = np.where(vis, _fix_bad(A * ((1 + b_wc) * (1 + rho_wc) * absg - absg), bad,
                                     lambda: Ab1 * (1 + rho_wc) * absg - A * absg)
                       + M.floor_w * (1 + rho_wc) * absg + M.floor_p, 0.0)
        linS = np.where(vis, A * (b_lin + rho_lin) * absg, 0.0)
        varS = np.where(vis, A * A * ((lg.sigma * absg) ** 2 + (2 * u**2 + r_p**2) * absg**2), 0.0)
        detS = np.where(vis, A * b_det * absg, 0.0)
        dS = A * g
        wc, lin, var, det, dQ = _grad(M, sc, n_k, (A * absg) @ abs_k, wcS @ abs_k, linS @ abs_k,
                                      varS @ kk, (dS * dS) @ kk, detS @ abs_k, dS @ kf)
        err = (1 + c_row) * _combine(wc, lin, var, det, lam, kind) + c_row * np.abs(dQ)
        err = _store(err, np.abs(dQ), float(gamma(2, u)), M)
        out.append(np.where(empty[..., None], 0.0, err))
        exact.append(dQ)
    return np.concatenate(out, axis=2), np.concatenate(exact, axis=2)

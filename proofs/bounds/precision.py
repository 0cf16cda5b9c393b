"""The precision model (proofs/bounds.md sec. 2, 2a): what a kernel computes with (`Precision`), the
hardware hypotheses (`HardwareConstants`), unit roundoffs, and the derived counts (`_Model`, `_dot_steps`)."""
from __future__ import annotations

from dataclasses import dataclass, replace
import math

import numpy as np

from flashcheck.proofs.hardware import HardwareConstants, h100


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


# The hardware hypotheses: measured on the H100, not quoted (proofs/hardware.py, the record and the
# rules that turn the measured maxima into bound-side constants; proofs/measurements/h100.json).
HARDWARE = h100()
GQA_REDUCTIONS = ("in_accumulator", "rounded_heads")

ACCUMULATIONS = ("recursive", "blocked")
# The order in which a fused kernel visits the key tiles of a row (what the order-dependent pieces of the
# forward bound, the rescale counts and the exact partial sums, assume): "partial_first" (our kernel,
# kernels/tiles.py: the tiles that need an elementwise mask first, i.e. for an unmasked row the ragged
# last tile when block_k does not divide N_k, then the full tiles in ascending order), "ascending", or
# "any" (nothing assumed: order-free counts; e.g. flash-attn's CUDA kernels visit the key blocks from the last).
TILE_ORDERS = ("partial_first", "ascending", "any")
DELTA_SOURCES = ("output", "fp32")
# What is stated about the exponent argument x_j = S2_j - m of the online softmax (Precision.exp_argument):
# "unknown" (its roundings charged worst case) or "fma" (the compiled forms of our kernel, known on the data).
EXP_ARGUMENTS = ("unknown", "fma")
# Which inner tiles an outer block of a "partial_first" kernel visits first (Precision.tile_lists): those the band and
# the sequence end cut ("band"), or a block-sparse mask's partial lists ("lists").
TILE_LISTS = ("band", "lists")


@dataclass(frozen=True)
class BandForward:
    """The forward's tile of a kernel that runs banded calls (causal, or a window with a side given) on a tile of
    their own (our kernel's d = 128 fp16 / bf16 forward: 64 x 64 under a band, 128 x 128 otherwise;
    flashcheck.kernels.attention.kernel_config): the Precision fields it replaces under a band (Precision.banded).
    block_k: its key tile (Precision.block_k); block_q_fwd: its query rows per program (Precision.block_q_fwd);
    rowsum_depth: its tile rowsum's addition-tree depth read off the compiled code, None: any order
    (Precision.rowsum_depth). block_q_dq, block_k_dkdv, block_q: where the same call kind also runs a backward of
    its own outer blocks or dK/dV query tile (our "auto" engine's long calls at d = 64: the Gluon backward's 128-row
    dQ and 128-key dK/dV programs, its 128-row dK/dV query tiles, over triton_bwd's dQ key tile), those
    (Precision.block_q_dq, block_k_dkdv, block_q); None: the precision's own."""
    block_k: int
    block_q_fwd: int | None = None
    rowsum_depth: int | None = None
    block_q_dq: int | None = None
    block_k_dkdv: int | None = None
    block_q: int | None = None

    def __post_init__(self):
        for name in ("block_k", "block_q_fwd", "rowsum_depth", "block_q_dq", "block_k_dkdv", "block_q"):
            b = getattr(self, name)
            if (b is not None or name == "block_k") and (not isinstance(b, int) or isinstance(b, bool) or b < 1):
                raise ValueError(f"BandForward.{name} must be a positive int{'' if name == 'block_k' else ' or None'}, "
                                 f"got {b!r}")


@dataclass(frozen=True)
class FusedDq:
    """The calls whose dQ is summed inside the dK/dV kernel (our "auto" engine's long unbanded and causal calls at
    d = 64 fp16 / bf16: the Gluon backward's fused form, flashcheck.kernels.attention FUSED_QUERIES, FUSED_KEYS,
    FUSED_BAND_KEYS), where it replaces the dQ kernel's chain (Precision.fused_dq; the bounds substitute it in
    Precision.for_call). Per element,
        dQ[i, c] = fl_out(fl32(acc[i, c] scale)),  acc = the fp32 sum of T_j[i, c] over the key tiles j, DESCENDING
        or rotated (rotate_keys, below) (the first partial stored, 0 + T exact, each later add ONE fp32 round-to-
        nearest addition, the TMA reduce-add in L2), T_j[i, c] = sum over tile j's keys of dS[i, key] K[key, c]:
        ONE tensor-core MMA chain FROM ZERO over the tile's keys in ascending k-steps (the measured step model);
        the last tile ragged where block_k does not divide N_k (keys past N_k add exact zeros),
    with dS the dK/dV kernel's own (the same dS, rounded into the operand format, its dK product reads). The bounds
    analyse it as a "blocked" dQ over tiles of block_k (Precision.dq_accumulation; proofs/bounds.md sec. 8b).
    queries, keys: the fused form runs for calls without a mask with N_q >= queries and N_k >= keys, unbanded (or
    under a band as band_keys states) (the
    bounds give for_call N_q only where no dense mask is given: a masked call runs the dQ kernel); block_k: its key
    tile (the dK/dV program's keys); value_dim: the only V head dim it runs for (ours: dv = d, the Precision's head
    dim: a call with another dv runs the dQ kernel), None: any (for_call then needs no dv). rotate_keys: the calls
    with N_k <= rotate_keys take the kernel's rotated order (0: none; for_call then states Precision.dkdv_rotated):
    its key tile of rank r (the last tile rank 0) visits the n_full full query tiles from r mod n_full on, cyclically,
    so that no two key tiles add into one query tile at one step; each full query tile then takes the partials by
    (step, rank) (kernels/gluon_bwd_fused.py full_tile_turn; the ragged one still descending): the dQ bound is
    order-free, the dK/dV chains follow each key block's rotated order. max_group: the largest GQA group it runs for
    (ours under kernel_config's tiles: 8, larger groups run the two kernels), None: any (for_call then needs no group);
    keys_at_most_queries: only calls with N_k <= N_q (ours under kernel_config's tiles: with more keys than queries
    each query tile's chain of adds is longer than its programs' work).
    band_keys: banded calls whose band the kernel takes (fused_band: causal, or a window without a left side) run
    it too from this many keys (with the same queries, value_dim and keys_at_most_queries conditions), in the
    descending order (never rotated: the dK/dV chains are the dK/dV kernel's), each query tile's partials from the
    key tiles that see it only (the first of them stored: a tile no key tile sees keeps dQ = 0); None: no banded
    call. band_max_group: those calls' largest GQA group (ours: 1), None: any."""
    queries: int
    keys: int
    block_k: int
    value_dim: int | None = None
    rotate_keys: int = 0
    max_group: int | None = None
    keys_at_most_queries: bool = False
    band_keys: int | None = None
    band_max_group: int | None = None

    def __post_init__(self):
        for name in ("queries", "keys", "block_k", "value_dim", "max_group", "band_keys", "band_max_group"):
            b, optional = getattr(self, name), name in ("value_dim", "max_group", "band_keys", "band_max_group")
            if (b is not None or not optional) and (not isinstance(b, int) or isinstance(b, bool) or b < 1):
                raise ValueError(f"FusedDq.{name} must be a positive int{' or None' if optional else ''}, got {b!r}")
        if not isinstance(self.keys_at_most_queries, bool):
            raise ValueError(f"FusedDq.keys_at_most_queries must be a bool, got {self.keys_at_most_queries!r}")
        if not isinstance(self.rotate_keys, int) or isinstance(self.rotate_keys, bool) or self.rotate_keys < 0:
            raise ValueError(f"FusedDq.rotate_keys must be a non-negative int, got {self.rotate_keys!r}")


def is_band(causal, window) -> bool:
    """Whether a call with these arguments is banded as the kernels take it (flashcheck.kernels.attention._band):
    causal given (True, "top_left", "bottom_right"; numpy bools by their value, as check_causal admits them), or a
    window with a side given. The emulation's band (proofs/emulation.py _Band.of) decides by it too."""
    return bool(causal) or (window is not None and any(side is not None for side in window))


def band_offsets(causal, window, Nq: int, Nk: int) -> tuple[int, int]:
    """(off_lo, off_hi) of a banded call (is_band) as our kernel launches it (flashcheck.kernels.attention._band;
    ported, not imported: proofs/ reads no kernel): key j visible from query i iff i + off_lo <= j <= i + off_hi, an
    open side as a distance past any (i, j) pair's."""
    off = Nk - Nq if causal == "bottom_right" else 0
    left, right = (None, None) if window is None else window
    if causal:
        right = 0 if right is None else min(right, 0)
    big = Nq + Nk + 1
    return off - (big if left is None else min(left, big)), off + (big if right is None else min(right, big))


def fused_band(causal, window, Nq: int, Nk: int) -> bool:
    """Whether a banded call's band (is_band) is one the fused backward takes: with the kernels' offsets
    (band_offsets), no left edge inside the problem (i + off_lo <= 0 for every query row i < Nq: each row sees key 0
    or no key) and every key seen by some row (the last row sees the last key: Nq − 1 + off_hi >= Nk − 1; a key tile
    that sees no row would take no turn in its order). Causal calls with Nk <= Nq (either alignment; bottom-right
    any), windows without a left side (or one past key 0 from the last row) whose right side reaches the last key.
    The launcher decides by the same (attention._fused_band)."""
    if not is_band(causal, window):
        return False
    off_lo, off_hi = band_offsets(causal, window, Nq, Nk)
    return off_lo <= 1 - Nq and Nq - 1 + off_hi >= Nk - 1


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
    block_k_dq: the key tile width of the backward's dQ accumulation loop (dQ = dS K through tl.dot(ds, k, dq), key
      tile by key tile into one accumulator, in the stated tile_order: which keys form the ragged tile visited first
      follows this width); None: block_k (a kernel whose dQ loop runs over the forward's key tiles). Our kernel's dQ
      kernel has its own tiles (kernels/attention.py KernelConfig.dq, Arithmetic.block_k_dq): bf16/fp16 at d 128 runs
      its forward over 128 keys a tile and its dQ over 64. Delta's P.V accumulation and the stored LSE are the
      forward's and stay on block_k (proofs/bounds/backward.py).
    hardware: the hardware constants (HARDWARE unless overridden).
    gqa_reduction: how dK, dV of a GQA group are formed: "in_accumulator" (one accumulator runs through
      every query head of the group, our kernel) or "rounded_heads" (per query head, each stored in the
      output dtype, then summed in fp32 and rounded once: torch SDPA's fused backends; bounds.md sec. 7c).
    tile_order: the order of the key tiles (TILE_ORDERS). The forward's rows with masked keys follow their query
      block's order where block_q_fwd states the blocks (below), else are analysed order-free; the backward's fp32 chains
      follow each outer block's order where block_q_dq and block_k_dkdv state the blocks (below). A known order also
      states the online softmax of FA2: each tile's P~ = exp2(S2 - m) with m the running max after that tile
      (no lazy rescaling), which the probabilistic bound uses to evaluate P's rounding into the operand format on
      the data (bounds.md sec. 6, "Roundings on the data"); a kernel that rescales lazily must declare "any".
      The backward's dS rounding is evaluated on the data under the model's dS = fl(P~ fl(dP - Delta)),
      P~ = exp2(S2 - LSE2), also only for a known order ("any": the worst-case rounding charge; torch-sdpa-efficient
      exceeded the on-data dQ bound on the GPU, 2026-11-26b).
    l_accumulate: the format of the forward's running sum l = l alpha + rowsum(P~) across the key tiles
      (ACCUMULATORS): "float32" (a fused FA2 kernel: every tile's merge and rescale rounds at u) or
      "float64" (our kernel: the tile's rowsum, an fp32 sum of its exp2 values, added into an fp64 l, which is
      rounded once into the accumulate format for the division and the log2; bounds.md sec. 4).
    ieee_fma_chain: a stated property of the kernel (default off): with fp32 inputs and dot "ieee", every logit
      dot q_i.k_j it computes is ONE fp32 FMA chain over the head dim in ascending order from a zero accumulator
      (fma.rn.f32: one rounding per product), and the base-2 scale is c = fl32(fl32(scale) fl32(log2 e)) (the
      kernel's qk_scale2 = sm_scale * LOG2E in fp32). Each computed fl(q.k) c is then a known number
      (flashcheck.proofs.fma_chain emulates it exactly), so the probabilistic bounds take the logit error up to
      the scale product with its sign (logits._Logits.conv) in place of the dot's random model and the constant
      c's rounding; the product's rounding and the subtraction of the shift stay modelled (a compiler may fuse
      the product into the subtraction). Set for our kernel on the GPU only where proofs/hardware.py records it
      measured (HardwareConstants.ieee_dot == "fma_chain", bench/probe_fma_dot.py; flashcheck.adapters
      .ours_precision), and by the CPU emulation that computes it (proofs/emulation.py, ieee_fma_chain=True);
      never for the Triton interpreter (its tl.dot is NumPy's matmul) or other kernels. The same lowering makes every
      fp32 ieee tl.dot(a, b, acc) one ascending FMA chain continuing from acc (bench/probe_fma_acc.py): the backward's
      round-to-nearest model takes its step bounds from the chain's own partial sums (bounds.md sec. 8).
    rowsum_depth: a stated property of the compiled forward (default None: the tile's rowsum of P~ added in any
      order, up to min(N_k, block_k) - 1 roundings per term): every term of a tile's fp32 rowsum passes through at
      most this many fp32 additions (the addition tree's depth: a tree within each thread, then butterfly
      shuffles across the lanes of a row, and shared memory across warps). The tile's rowsum of n positive terms
      then errs by <= gamma_D times its exact value, D = min(rowsum_depth, n) (each partial sum is the exact sum of
      its leaves to first order, and each leaf lies under <= D of them; bounds.md sec. 4). Set for our kernel on the
      GPU only where bench/compile_forward.py --record read it off the PTX of this Triton version and tile config
      (proofs/measurements/forward_compiled_triton<version>.json; flashcheck.adapters.ours_precision); never in
      the interpreter (its tl.sum is NumPy's) or for other kernels.
    exp_argument: a stated property of the kernel's online softmax (EXP_ARGUMENTS; default "unknown": the
      argument's roundings, the product by c, the subtraction of the running max and the rescale arguments, are
      charged worst case). "fma" (only with ieee_fma_chain) states the forms our forward compiles to for fp32 with
      dot "ieee" on sm_90 (bench/compile_forward.py): s2 = fl32(qk c) feeds the running max m_t = max(m_{t-1},
      max_j s2_j) (every m_t a known fp32 number); a full key tile's argument is x_j = fl32(qk_j c - m_t) in ONE
      rounding (fma.rn.f32), the masked (ragged) tile's x_j = fl32(s2_j - m_t) (the product rounded, then the
      subtraction: s2 passes through tl.where); P~_j = ex2(x_j); alpha_t = ex2(fl32(m_{t-1} - m_t)). Then every
      exponent argument is a known fp32 number and only ex2's error is unknown: the probabilistic forward bound of
      unmasked rows in a known tile order evaluates each key's total exponent error with its sign (bounds.md
      sec. 6b). Set for our kernel on the GPU by flashcheck.adapters.ours_precision where the compiled-code record
      of the installed Triton shows these forms (bench/compile_forward.py --record); the CPU emulation computes them
      (proofs/emulation.py, ieee_fma_chain=True).
    ex2_known: a stated property (only with exp_argument "fma"; default off): every ex2 of the forward (each key's
      P~_j = ex2(x_j) and each rescale alpha_t = ex2(a_t)) is the value of flashcheck.proofs.ex2_model.ex2, the H100's
      ex2.approx.ftz.f32 bit for bit (a measured table of the argument's fraction, 0 mismatches over every fp32 in
      [-150, 8]: proofs/measurements/h100_ex2_table.json). With the arguments known, so are the values: the
      probabilistic forward bound takes each key's total weight error with its sign, ex2's included, and the P.V
      chain's roundings on exact summands (bounds.md sec. 6b). The backward's exponentials (arguments through the
      stored LSE) keep exp's error bound. Set by flashcheck.adapters.ours_precision on the GPU where the table is
      measured and exp_argument is "fma"; by the CPU emulation that computes its forward ex2 through the table
      (proofs/emulation.py fa2_forward(ex2="h100")).
    lg2_known: a stated property (only with ex2_known, l_accumulate "float64" and a rowsum_depth; default off): the
      forward's log2 l is flashcheck.proofs.lg2_model.lg2, the H100's lg2.approx.f32 bit for bit (measured on every
      positive normal fp32), and the stored LSE is fl32(fl32(m2 + lg2(fl32(l))) fl32(ln 2)). With every P~ known and
      the tile rowsums within gamma_D, the stored LSE then lies between its values at the two ends of l's interval
      (bounds.md sec. 7, "The stored LSE as an interval of known values"). Set by ours_precision where the lg2 table is
      measured; by the emulation that computes its log2 through it (fa2_forward(lg2="h100")).
    bwd_p_known: a stated property (only with ex2_known; default off): both backward kernels recompute
      P~_ij = ex2(min(fl32(qk_ij c - fl32(LSE_i fl32(log2 e))), 0)) with the argument rounded once (fma.rn.f32; qk the
      FMA-chain dot, c = qk_scale2) and ex2 the measured table (bench/compile_forward.py --record, "bwd_exp_argument":
      "fma_min"). Given the stored LSE, every P~ is then a known number: where the forward's interval of the stored
      LSE (lg2_known) holds a few fp32 values, dQ's bound evaluates P~'s error with its sign for each of them and
      keeps the largest (bounds.md sec. 8, "the recomputed P known"). Set by ours_precision where the record of the
      installed Triton shows that form; by the emulation that computes it (fa2_backward(ex2="h100")).
    delta_depth: a stated property of the compiled backward (default None: the Delta dot's roundings in any order,
      modelled random over groups of equal products, bounds.md sec. 8): every product dO_ic O^_ic of the fp32 dot
      Delta_i = tl.sum(dO_i * O^_i) passes through at most this many roundings to the stored Delta_i (a product rounded
      alone counts 1, an fma 1 above its addend, its own product exact inside it, each add 1). Delta's dot roundings
      then get a deterministic bound, gamma_D sum_c |dO_c O^_c| (bounds.md sec. 8, "The Delta dot's tree"), which holds
      whatever the products' residues (the random model does not: equal residues round alike). Set for our kernel on
      the GPU only where bench/compile_forward.py --record read it off the PTX of the preprocess kernel of this Triton
      version (proofs/measurements/forward_compiled_triton<version>.json, "delta"; flashcheck.adapters.ours_precision);
      never in the interpreter (its tl.sum is NumPy's) or for other kernels.
    delta_trees: a stated property (only with delta_depth = log2(len) + 1; default None): the Delta dot is the complete
      binary tree of fp32 adds over the pairs fl32(p_a + fl32(p_b)) (one fma.rn.f32, p_a exact inside it, p_b rounded
      by mul.f32) with its leaves the columns in ONE of these orders [a_0, b_0, a_1, b_1, ...] (each a permutation of
      range(2^k); columns past the head dim are exact zeros): which one depends on how Triton vectorizes the call's
      loads (alignment and strides), which a Precision does not see. Each node's rounding is then charged half an ulp of
      the binade of a bound on its own partial sum, evaluated on the data for each order, the largest kept (bounds.md
      sec. 8), in place of gamma_D of the whole sum where smaller. The trees our preprocess kernel compiles to for every
      dtype and head dim on Triton 3.9 (bench/compile_forward.py delta_tree, over the layouts a call can have); read
      from the same record; the CPU emulation follows one (proofs/emulation.py delta_dot).
    block_q_dq, block_k_dkdv: stated properties of a "partial_first" kernel's backward (default None: not stated):
      the outer blocks of its two backward kernels, the dQ kernel's query rows per program (over key tiles of
      dq_key_tile) and the dK/dV kernel's keys per program (over query tiles of block_q, the GQA group's heads in
      turn). Each outer block visits its partial inner tiles (some entry of block x tile masked, as tile_lists says)
      first, in ascending order, then its full ones ascending, and skips those with nothing visible (kernels/tiles.py
      inner_tiles); a masked entry inside a visited tile contributes an exact 0 (P~ = 0, so dS = 0 and P~ dO = 0; an
      FMA adding 0 leaves the accumulator as it is). With both stated, the backward's fp32 chains are evaluated on the
      data in that order on heads with masked entries too (proofs/bounds/visits.py; bounds.md sec. 8, "The
      accumulation chains on the data"); without, such heads are charged the order-free worst case. Set by
      flashcheck.adapters.ours_precision from the launch's tiles (KernelConfig.dq.block_m, dkdv.block_n; a block-sparse
      mask's block_q, block_k); by the emulation that walks them (fa2_backward(block_q_dq=, block_k_dkdv=)).
    tile_lists: which tiles an outer block treats as partial (TILE_LISTS): "band" (our kernel with causal, a window
      or a dense mask: the tiles the band or the sequence end cuts; a dense mask is applied elementwise on every tile
      and changes no order) or "lists" (a block-sparse mask's lists: every tile with an invisible entry of the padded
      block x tile, so a ragged outer block's tiles are all partial). "lists" needs the outer blocks stated.
    block_q_fwd: a stated property of a "partial_first" kernel's forward (default None: not stated): its query rows per
      program (BLOCK_M of kernels/triton_fwd.py, KernelConfig.fwd.block_m; a block-sparse mask's block_q). Each query
      block visits its partial key tiles first (some entry of block x tile masked, as tile_lists says: under "band" the
      band's and the sequence end's cuts, a dense mask applied elementwise on every tile; under "lists" a block-sparse
      mask's), ascending, then its full ones ascending, and skips the empty ones; a masked entry of a visited tile
      adds an exact 0 (logit -inf: P~ = 0, outside the running max). With it stated, the forward's order-dependent
      terms (the rescale counts, l's sum, the P.V chain on the data, P's rounding, the known exponent arguments and
      the stored LSE's interval) are evaluated on heads with masked entries in each query block's own order (bounds.md
      sec. 6c); without, such heads are charged order-free. Not Precision.block_q, which is the dK/dV kernel's query
      tile (KernelConfig.dkdv.block_m): the two differ at some head dims. Set by flashcheck.adapters.ours_precision;
      by the emulation that walks them (fa2_forward(block_q=)).
    band_forward: the forward's tile under a band where it differs (BandForward; default None: one tile for every
      call). The bounds substitute it for banded calls (Precision.banded); set by flashcheck.adapters.ours_precision
      from kernel_config's band tile.
    band_keys: where band_forward is the tile of banded, unmasked calls with at least this many keys only (a positive
      int, with band_forward; our kernel's "auto" engine at d = 64 fp16 / bf16: gluon_fwd's 128 x 128 from
      flashcheck.kernels.attention.SHORT_KEYS keys, triton_bwd's backward); None: of every banded call.
      Precision.for_call applies it.
    long_forward, long_keys: the forward's tile of unmasked calls with at least long_keys keys, banded or not, where
      it differs (a BandForward and a positive int, both or neither; our kernel's "auto" engine at d = 64 fp16 /
      bf16: gluon_fwd's 128 x 128 from flashcheck.kernels.attention.LONG_KEYS keys on, triton_fwd's 64 x 64 below
      and on dense-masked calls), with those calls' backward outer blocks where they differ
      (BandForward.block_q_dq, block_k_dkdv). The bounds substitute it for such calls before the band's
      (Precision.for_call); set by flashcheck.adapters.ours_precision from kernel_config(n_keys=, n_queries=).
    short_forward, short_keys: the forward's tile of unbanded, unmasked calls with at least short_keys keys (below
      long_keys where long_forward is stated) where it differs, with those calls' backward outer blocks where they
      differ (a BandForward and a positive int, both or neither; our kernel's "auto" engine at d = 64 fp16 / bf16:
      gluon_fwd's 128 x 128 and the Gluon backward from flashcheck.kernels.attention.SHORT_KEYS keys on).
      Substituted by Precision.for_call; set by flashcheck.adapters.ours_precision from kernel_config(n_keys=,
      n_queries=).
    dq_accumulation: the backward's dQ accumulation where it differs from the other passes' (ACCUMULATIONS; default
      None: `accumulation`). "blocked": each key tile's product dS K (dq_key_tile keys) summed on its own from a zero
      accumulator, ONE tl.dot from zero (on tensor cores one MMA chain, each product through at most
      ceil(dq_key_tile / k_step) steps; _dot_steps' tile_chain), then added once into the fp32 accumulator, the
      tiles in any order: the bound is order-free (no visiting order read; its probabilistic charge from the tiles'
      own sums, backward._blocked_tile_steps; bounds.md sec. 8b). What fused_dq states for the calls that run it
      (for_call sets it); the forward, Delta and dK/dV keep `accumulation`. "recursive" with accumulation "blocked":
      dQ's one chain through every tile, the other passes blocked.
    fused_dq: the calls whose dQ is summed inside the dK/dV kernel (FusedDq; default None: none): for an unbanded call
      with N_q >= fused_dq.queries and N_k >= fused_dq.keys, for_call states dq_accumulation "blocked" over key tiles
      of fused_dq.block_k (block_k_dq), after the long tile's substitution (the fused calls are long calls); banded
      calls only where fused_dq.band_keys states them (fused_band); never where N_q is not given (the bounds give it
      for calls without a dense mask only: the fused kernel runs unmasked calls) or where the call's dv is not
      fused_dq.value_dim. Set by flashcheck.adapters.ours_precision (kernel_config's fused thresholds).
    dkdv_rotated: the dK/dV kernel's query tiles in the fused backward's rotated order (FusedDq.rotate_keys: each
      key block of block_k_dkdv, rank r = the last block first, takes its full query tiles from r mod n_full on,
      cyclically, partial tiles first; proofs/bounds/visits.py kernel_orders) instead of ascending; default False.
      Set by for_call where it states the fused dQ of a call with N_k <= fused_dq.rotate_keys."""

    input: str
    dot: str
    accumulate: str = "float32"
    output: str | None = None
    exp: str = "ex2.approx"
    block_k: int = 64
    block_q: int = 64
    block_k_dq: int | None = None
    accumulation: str = "recursive"
    p_split: bool = False
    delta_from: str = "output"
    hardware: HardwareConstants = HARDWARE
    gqa_reduction: str = "in_accumulator"
    tile_order: str = "partial_first"
    l_accumulate: str = "float32"
    ieee_fma_chain: bool = False
    rowsum_depth: int | None = None
    exp_argument: str = "unknown"
    ex2_known: bool = False
    lg2_known: bool = False
    bwd_p_known: bool = False
    delta_depth: int | None = None
    delta_trees: tuple[tuple[int, ...], ...] | None = None
    block_q_dq: int | None = None
    block_k_dkdv: int | None = None
    tile_lists: str = "band"
    block_q_fwd: int | None = None
    band_forward: BandForward | None = None
    band_keys: int | None = None
    long_forward: BandForward | None = None
    long_keys: int | None = None
    short_forward: BandForward | None = None
    short_keys: int | None = None
    dq_accumulation: str | None = None
    fused_dq: FusedDq | None = None
    dkdv_rotated: bool = False

    def __post_init__(self):
        for name, value, allowed in (
            ("input", self.input, INPUTS),
            ("dot", self.dot, DOTS),
            ("accumulate", self.accumulate, ACCUMULATORS),
            ("exp", self.exp, EXPS),
            ("accumulation", self.accumulation, ACCUMULATIONS),
            ("delta_from", self.delta_from, DELTA_SOURCES),
            ("gqa_reduction", self.gqa_reduction, GQA_REDUCTIONS),
            ("tile_order", self.tile_order, TILE_ORDERS),
            ("l_accumulate", self.l_accumulate, ACCUMULATORS),
            ("exp_argument", self.exp_argument, EXP_ARGUMENTS),
            ("tile_lists", self.tile_lists, TILE_LISTS),
        ):
            if value not in allowed:
                raise ValueError(f"Precision.{name} must be one of {allowed}, got {value!r}")
        if self.dq_accumulation is not None and self.dq_accumulation not in ACCUMULATIONS:
            raise ValueError(f"Precision.dq_accumulation must be None or one of {ACCUMULATIONS}, "
                             f"got {self.dq_accumulation!r}")
        if self.fused_dq is not None and not isinstance(self.fused_dq, FusedDq):
            raise ValueError(f"Precision.fused_dq must be None or a FusedDq, got {self.fused_dq!r}")
        if not isinstance(self.dkdv_rotated, bool):
            raise ValueError(f"Precision.dkdv_rotated must be a bool, got {self.dkdv_rotated!r}")
        if self.output is not None and self.output not in INPUTS:
            raise ValueError(f"Precision.output must be None or one of {INPUTS}, got {self.output!r}")
        for name in ("block_k", "block_q"):
            b = getattr(self, name)
            if not isinstance(b, int) or isinstance(b, bool) or b < 1:
                raise ValueError(f"Precision.{name} must be a positive int, got {b!r}")
        for name in ("block_k_dq", "block_q_dq", "block_k_dkdv", "block_q_fwd"):
            b = getattr(self, name)
            if b is not None and (not isinstance(b, int) or isinstance(b, bool) or b < 1):
                raise ValueError(f"Precision.{name} must be None or a positive int, got {b!r}")
        if self.tile_lists == "lists" and (self.block_q_dq is None or self.block_k_dkdv is None):
            raise ValueError("Precision.tile_lists='lists' makes a ragged outer block's tiles all partial: it needs "
                             "block_q_dq and block_k_dkdv")
        if not isinstance(self.p_split, bool):
            raise ValueError(f"Precision.p_split must be a bool, got {self.p_split!r}")
        if not isinstance(self.ieee_fma_chain, bool):
            raise ValueError(f"Precision.ieee_fma_chain must be a bool, got {self.ieee_fma_chain!r}")
        if self.ieee_fma_chain and (self.dot, self.input, self.accumulate) != ("ieee", "float32", "float32"):
            raise ValueError("Precision.ieee_fma_chain states fp32 FMA-chain logits: it needs input='float32', "
                             f"dot='ieee', accumulate='float32' (got {self.input!r}, {self.dot!r}, {self.accumulate!r})")
        if self.band_forward is not None and not isinstance(self.band_forward, BandForward):
            raise ValueError(f"Precision.band_forward must be None or a BandForward, got {self.band_forward!r}")
        bk = self.band_keys
        if bk is not None and (not isinstance(bk, int) or isinstance(bk, bool) or bk < 1 or self.band_forward is None):
            raise ValueError(f"Precision.band_keys must be None or a positive int with a band_forward, got {bk!r} and "
                             f"{self.band_forward!r}")
        if self.long_forward is not None and not isinstance(self.long_forward, BandForward):
            raise ValueError(f"Precision.long_forward must be None or a BandForward, got {self.long_forward!r}")
        lk = self.long_keys
        if (lk is None) != (self.long_forward is None) or (
                lk is not None and (not isinstance(lk, int) or isinstance(lk, bool) or lk < 1)):
            raise ValueError("Precision.long_forward and long_keys come together (a BandForward and a positive int), "
                             f"got {self.long_forward!r} and {lk!r}")
        sf, sk = self.short_forward, self.short_keys
        if (sk is None) != (sf is None) or (sk is not None and (
                not isinstance(sk, int) or isinstance(sk, bool) or sk < 1 or not isinstance(sf, BandForward))):
            raise ValueError("Precision.short_forward and short_keys come together (a BandForward and a positive int), "
                             f"got {sf!r} and {sk!r}")
        d = self.rowsum_depth
        if d is not None and (not isinstance(d, int) or isinstance(d, bool) or d < 1):
            raise ValueError(f"Precision.rowsum_depth must be None or a positive int, got {d!r}")
        if self.exp_argument == "fma" and not self.ieee_fma_chain:
            raise ValueError("Precision.exp_argument='fma' states the exponent arguments of known FMA-chain logits: "
                             "it needs ieee_fma_chain=True (the compiled forms read the known fp32 dot qk)")
        if not isinstance(self.ex2_known, bool):
            raise ValueError(f"Precision.ex2_known must be a bool, got {self.ex2_known!r}")
        if self.ex2_known and self.exp_argument != "fma":
            raise ValueError("Precision.ex2_known states the values of ex2 at known arguments: it needs "
                             "exp_argument='fma'")
        if not isinstance(self.lg2_known, bool):
            raise ValueError(f"Precision.lg2_known must be a bool, got {self.lg2_known!r}")
        if self.lg2_known and not (self.ex2_known and self.l_accumulate == "float64" and self.rowsum_depth):
            raise ValueError("Precision.lg2_known states the stored LSE from known values: it needs ex2_known=True, "
                             "l_accumulate='float64' and a rowsum_depth")
        if not isinstance(self.bwd_p_known, bool):
            raise ValueError(f"Precision.bwd_p_known must be a bool, got {self.bwd_p_known!r}")
        if self.bwd_p_known and not self.ex2_known:
            raise ValueError("Precision.bwd_p_known states the backward's P~ from known arguments and ex2's table: it "
                             "needs ex2_known=True")
        d = self.delta_depth
        if d is not None and (not isinstance(d, int) or isinstance(d, bool) or d < 1):
            raise ValueError(f"Precision.delta_depth must be None or a positive int, got {d!r}")
        ts = self.delta_trees
        if ts is not None:
            n = len(ts[0]) if isinstance(ts, tuple) and ts and isinstance(ts[0], tuple) else 0
            for t in ts if n else ():
                if (not isinstance(t, tuple) or len(t) != n or any(not isinstance(c, int) or isinstance(c, bool)
                                                                   for c in t) or sorted(t) != list(range(n))):
                    n = 0
            if n < 2 or n & (n - 1):
                raise ValueError("Precision.delta_trees must be None or a non-empty tuple of tuples, each holding each of "
                                 f"0 .. 2^k - 1 once (leaf orders of a complete binary tree, k >= 1), got {ts!r}")
            if d != n.bit_length():  # log2(n) adds above each pair, and the pair's rounded product
                raise ValueError(f"Precision.delta_trees of {n} leaves state a Delta dot of depth {n.bit_length()}: they "
                                 f"need delta_depth={n.bit_length()}, got {d!r}")
        if not isinstance(self.hardware, HardwareConstants):
            raise ValueError(f"Precision.hardware must be a HardwareConstants, got {self.hardware!r}")

    def banded(self, causal, window) -> "Precision":
        """This precision for a call with these causal / window arguments. Under a band (`is_band`) and with a
        band_forward stated, the forward's tile fields are the band's (block_k, block_q_fwd, rowsum_depth; lg2_known
        only where the band's rowsum depth is stated); the backward's tiles stay (a dQ loop that followed block_k
        keeps its width: block_k_dq set to it). Otherwise itself. The bounds take it first, before `fitted`
        (through `for_call`, which applies band_keys)."""
        b = self.band_forward
        if b is None or not is_band(causal, window):
            return self
        return self._with_forward(b, band_forward=None, band_keys=None)

    def for_call(self, causal, window, Nk: int, Nq: int | None = None, Dv: int | None = None,
                 group: int | None = None) -> "Precision":
        """This precision for a call with these causal / window arguments, Nk keys, Nq queries (None: a call with a
        dense mask), V head dim Dv and GQA group size `group` (query heads a kv head): with a long_forward stated,
        the call unmasked (Nq given) and Nk >= long_keys,
        the forward's tile fields are the long tile's, and the backward's outer blocks where it states them (as
        `banded` substitutes the band's; the band tile then no longer applies); otherwise, with a short_forward
        stated, the call unbanded (`is_band`) and unmasked (Nq given) and Nk >= short_keys, the forward's tile fields
        are the short tile's, and the backward's outer blocks where it states them; otherwise `banded(causal,
        window)` where no band_keys is stated or the call is unmasked with Nk >= band_keys (else itself). Then, with
        a fused_dq stated, Nq given, Nq >= fused_dq.queries, Nk >= fused_dq.keys, Dv = fused_dq.value_dim and
        group <= fused_dq.max_group where those are stated, Nk <= Nq where fused_dq.keys_at_most_queries, and the
        call not banded (`is_band`), or banded with fused_dq.band_keys stated, the band one it takes
        (`fused_band`), Nk >= band_keys and group <= band_max_group where stated: dQ summed in the dK/dV kernel,
        dq_accumulation "blocked" over key tiles of fused_dq.block_k (block_k_dq), fused_dq cleared, and dkdv_rotated
        where the call is unbanded and Nk <= fused_dq.rotate_keys. The bounds take it first, before `fitted`."""
        b, s = self.long_forward, self.short_forward
        spent = dict(band_forward=None, band_keys=None, long_forward=None, long_keys=None, short_forward=None,
                     short_keys=None)
        if b is not None and Nq is not None and Nk >= self.long_keys:
            p = self._with_forward(b, **spent)
        elif s is not None and Nq is not None and Nk >= self.short_keys and not is_band(causal, window):
            p = self._with_forward(s, **spent)
        elif self.band_forward is not None and is_band(causal, window) and (
                self.band_keys is None or (Nq is not None and Nk >= self.band_keys)):
            p = self._with_forward(self.band_forward, **spent)  # `banded`, the other kinds' tiles spent too
        else:
            p = self
        f = self.fused_dq
        if f is None or Nq is None or Nq < f.queries or Nk < f.keys:
            return p
        band = is_band(causal, window)
        if band and (f.band_keys is None or Nk < f.band_keys or not fused_band(causal, window, Nq, Nk)):
            return p
        if f.value_dim is not None and Dv != f.value_dim:  # not the fused kernel's dv (or none given)
            return p
        most = f.band_max_group if band else f.max_group
        if most is not None and (group is None or group > most):  # a larger GQA group, or none given
            return p
        if f.keys_at_most_queries and Nk > Nq:
            return p
        return replace(p, dq_accumulation="blocked", block_k_dq=f.block_k, fused_dq=None,
                       dkdv_rotated=not band and Nk <= f.rotate_keys)

    def _with_forward(self, b: BandForward, **spent) -> "Precision":
        """This precision with b's forward tile fields (block_k, block_q_fwd, rowsum_depth; lg2_known only where b's
        rowsum depth is stated) and the backward's outer blocks and dK/dV query tile b states (block_q_dq,
        block_k_dkdv, block_q), the dQ kernel's key tile kept (a dQ loop that followed block_k keeps its width:
        block_k_dq set to it), and the `spent` substitutions' fields cleared."""
        outer = {name: getattr(b, name) for name in ("block_q_dq", "block_k_dkdv", "block_q")
                 if getattr(b, name) is not None}
        return replace(self, block_k=b.block_k, block_q_fwd=b.block_q_fwd, rowsum_depth=b.rowsum_depth,
                       block_k_dq=self.dq_key_tile, lg2_known=self.lg2_known and b.rowsum_depth is not None,
                       **outer, **spent)

    def fitted(self, Nq: int, Nk: int) -> "Precision":
        """This precision with its tiles no wider than the problem. A tile of block_k >= Nk keys is the
        whole row: the bounds read a block only through min(N, block), ceil(N / block) = 1 and, with one
        tile, an order that is the same ascending or not; but per-tile arrays are padded to the block
        (2^20 columns for "one tile of any width" took ~1.5 s per call). The bounds compute with this and
        report the precision they were given. block_k_dq stays None where it was (it then follows block_k). The outer
        blocks block_q_dq, block_k_dkdv stay as given: under tile_lists "lists" a block wider than the problem is
        padded, which makes its tiles partial."""
        block_k, block_q = min(self.block_k, max(Nk, 1)), min(self.block_q, max(Nq, 1))
        block_k_dq = None if self.block_k_dq is None else min(self.block_k_dq, max(Nk, 1))
        if (block_k, block_q, block_k_dq) == (self.block_k, self.block_q, self.block_k_dq):
            return self
        return replace(self, block_k=block_k, block_q=block_q, block_k_dq=block_k_dq)

    @property
    def dq_key_tile(self) -> int:
        """The key tile width of the backward's dQ loop: block_k_dq, or block_k where that is None."""
        return self.block_k if self.block_k_dq is None else self.block_k_dq

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
    u_dacc: float  # accumulation error per step of a dot: the measured MMA step error on tensor cores, else u_w
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
    mma: object = None  # the MmaBehaviour of a truncating tensor-core dot (tensor_core), else None
    conv_exact: bool = False  # the operand conversion is a known function (tf32: the low 13 bits cleared, measured)
    u_l: float = 0.0  # l's merges l alpha + rowsum across the tiles (Precision.l_accumulate); u_w when the same format
    u_lconv: float = 0.0  # the one rounding of a wider l into the working format at the end (0: l is in it)
    fma_logits: bool = False  # the logit dot is the known fp32 FMA chain and c its known constant (Precision.ieee_fma_chain)
    rowsum_depth: int | None = None  # the tile rowsum's addition-tree depth (Precision.rowsum_depth); None: any order
    exp_fma: bool = False  # the exponent arguments are the compiled forms, known on the data (Precision.exp_argument)
    ex2_known: bool = False  # the forward's ex2 values are the measured table's (Precision.ex2_known)
    lg2_known: bool = False  # the forward's lg2 too, and the LSE's formula (Precision.lg2_known)
    bwd_p_known: bool = False  # the backward's P~ is a known function of the stored LSE (Precision.bwd_p_known)
    delta_depth: int | None = None  # the Delta dot's tree depth (Precision.delta_depth); None: any order, modelled
    delta_trees: tuple | None = None  # and its leaf orders, one of them the call's (Precision.delta_trees)


def _checked(precision) -> Precision:
    if not isinstance(precision, Precision):
        raise TypeError(f"precision must be a flashcheck.proofs.bounds.Precision, got {type(precision).__name__}")
    return precision


def _for_call(precision, causal, window, Nk: int, Nq: int | None = None, Dv: int | None = None,
              group: int | None = None) -> Precision:
    """`Precision.for_call` of a bound's `precision` argument, checked to be a Precision first."""
    return _checked(precision).for_call(causal, window, Nk, Nq, Dv, group)


def _model(precision: Precision) -> _Model:
    _checked(precision)
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
    # a tensor-core step adds k_step exact products into the fp32 accumulator with a relative error
    # <= step_error of |acc| + sum |products| (measured model, proofs/hardware.py)
    mma = hw.mma_for(pr.dot) if tc else None
    mma_round = mma is not None and mma.normalization == "round" and mma.alignment == "round"
    return _Model(
        u_w=u_w,
        u_in=0.0 if _fits(pr.input, op) else u_op,
        u_p=u_p,
        u_pv=u_pv,
        trunc=trunc,
        u_dacc=mma.step_error if tc else u_w,
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
        k_step=mma.k_step if tc else 1,
        pv_products=2 if pr.p_split else 1,
        mma=mma if tc and not mma_round else None,
        conv_exact=trunc and hw.tf32_operand == "truncate",
        u_l=min(u_w, UNIT_ROUNDOFF[pr.l_accumulate]),
        u_lconv=u_w if UNIT_ROUNDOFF[pr.l_accumulate] < u_w else 0.0,
        fma_logits=pr.ieee_fma_chain,
        rowsum_depth=pr.rowsum_depth,
        exp_fma=pr.exp_argument == "fma",
        ex2_known=pr.ex2_known,
        lg2_known=pr.lg2_known,
        bwd_p_known=pr.bwd_p_known,
        delta_depth=pr.delta_depth,
        delta_trees=pr.delta_trees,
    )


def _dot_steps(M: _Model, n: int, block: int, products: int = 1, repeats: int = 1, tile_chain: bool = False) -> int:
    """Roundings of the accumulator that one product of a length-n contraction, done in tiles of
    `block` (repeated `repeats` times into the same accumulator, e.g. a GQA group), can go through
    (proofs/bounds.md sec. 4).

    recursive (tl.dot(a, b, acc)): the accumulator runs through every tile: one rounding per product on
    CUDA cores (FMA), one per MMA k-step on tensor cores: T * ceil(min(n, block) / k_step) * products.
    blocked: each tile's min(n, block) products summed, then one addition into the accumulator per tile.
    tile_chain (blocked only; a stated property of the caller's pass: Precision.dq_accumulation "blocked", the fused
    dQ's per-tile MMA chains from zero, Precision.fused_dq): each tile's product is ONE chain from a zero accumulator
    in steps of k_step products, so a product passes at most ceil(min(n, block) / k_step) * products steps of its
    tile, then the T additions: ceil(width / k_step) * products + T (k_step 1: width, as without it). Not assumed for
    `accumulation` "blocked" (the forward's acc * alpha + tl.dot(p, v) and dK/dV's): there the tile's sum is taken
    in any order (the CPU emulation's blocked tiles are float32 matmuls, not MMA chains). The additions are charged at
    the step's error u_dacc too: the fused dQ's are fp32 round-to-nearest adds (u = 2^-24 <= u_dacc)."""
    T = max(1, -(-n // block)) * repeats
    width = min(n, block)
    if M.recursive:
        return T * (-(-width // M.k_step)) * products
    if tile_chain:
        return (-(-width // M.k_step)) * products + T
    return width * products + T


def _dq_tile_add_flush(precision: Precision, Nk: int) -> float:
    """The absolute error, before the scale, that subnormal flushes in a blocked dQ's tile additions can add to one
    dQ entry (Precision.dq_accumulation "blocked": the fused dQ's TMA reduce-adds; proofs/bounds.md sec. 8b). 0 where
    the hardware's TMA add is measured round to nearest with gradual underflow (HardwareConstants.tma_add
    "nearest": an addition with a subnormal result is then exact, a normal one errs by <= u |result|, charged with
    the adds' roundings) and for any other dQ accumulation. Otherwise flushes are assumed, as PTX documents for its
    fp32 reduction adds (red, atom .add.f32: subnormal inputs and results to sign-preserving zero): each of the
    T = ceil(N_k / block_k_dq) additions, the first (0 + T_{n-1}) included, errs by < 2^-126 per operand and per
    result beyond its rounding: 3 T 2^-126 in all."""
    if precision.dq_accumulation != "blocked" or precision.hardware.tma_add == "nearest":
        return 0.0
    return 3.0 * max(1, -(-Nk // precision.dq_key_tile)) * 2.0**-126


def _dq_model(M: _Model, precision: Precision) -> _Model:
    """The model of the backward's dQ accumulation: M with `recursive` from Precision.dq_accumulation where it is
    stated (the fused dQ's "blocked" sum, Precision.fused_dq), else M itself. Every other part of the dQ bound (dS,
    P, the store) and the forward, Delta, dK and dV keep M."""
    if precision.dq_accumulation is None:
        return M
    return replace(M, recursive=precision.dq_accumulation == "recursive")


def _within_dot(M: _Model, n: int) -> int:
    """Accumulator roundings inside one tl.dot over a length-n contraction (q.k over d, dO.v over dv):
    one per product on CUDA cores, one per MMA k-step on tensor cores."""
    return -(-n // M.k_step)


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

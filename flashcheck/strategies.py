"""Hypothesis strategies for attention problems (`from flashcheck.strategies import cases`).

A drawn `Case` is a small, printable description of one attention problem: the shape
(B, Hq, Hkv, Nq, Nk, d) from a small finite set (each new shape recompiles a Triton kernel), the
masking (causal in both alignments, sliding window, a boolean mask of some kind) and the value
distribution with a seed. `materialize(case, dtype)` turns it into float64 NumPy arrays holding exactly
the values a kernel in `dtype` receives, so the same case replays bit for bit on any machine.

Value distributions:
- ``normal``: N(0, 1);
- ``outliers``: FA3-style, N(0, 1) plus an extra N(0, 100) term on 0.1% of the entries (at least one);
- ``large_logits``: logits with a standard deviation up to the dtype's overflow edge;
- ``dominant``: one key per problem gets a logit ~8·sqrt(d) above the rest in every row;
- ``constant_rows``: half the query rows are zero (uniform attention) and every value row is the same;
- ``tiny``: magnitudes near the bottom of the dtype's normal range;
- the structured families of `flashcheck.structured` (uniform rows, constant and near-constant V
  columns, V with a large mean, logits rising along the keys, repeated keys): systematic rather than
  random rounding.

`causal` in a Case is the reference's: False, True (top-left) or "bottom_right"; `adapt` gives a causal
case (either alignment) the alignment the kernel under test declares, which is what it receives as
`causal=True`. The kernel's own tests pass both alignments to flashcheck.kernels.attention directly.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from hypothesis import strategies as st

from flashcheck.structured import FAMILIES, structured_inputs

HEAD_DIMS = (16, 32, 48, 64, 80, 96, 111, 128, 192, 256)
# (B, Hq, Hkv, Nq, Nk): N = 1, odd N, N just below/at/above the block multiples 64 and 128, Nq != Nk,
# GQA groups of 2 and 4 with more than one kv head (so a wrong head mapping shows).
BASE_SHAPES = (
    (1, 1, 1, 1, 1),
    (1, 2, 1, 1, 17),
    (1, 2, 2, 17, 17),
    (2, 4, 2, 63, 65),
    (1, 4, 2, 65, 130),
    (1, 2, 2, 64, 64),
    (1, 2, 1, 33, 129),
    (1, 8, 2, 7, 127),
    (2, 1, 1, 129, 63),
    (1, 2, 2, 128, 128),
    (1, 6, 3, 31, 1),
    (1, 4, 4, 97, 33),
)
# The reduced set (the Triton interpreter's 16 x 16 tiles make larger shapes slow on the CPU).
SMALL_SHAPES = tuple(b for b in BASE_SHAPES if max(b[3], b[4]) <= 65)
# The property suite's shapes: each base shape with two head dims, HEAD_DIMS[i] and HEAD_DIMS[i + 5]
# (cyclically), so every head dim meets small and large, square and non-square, GQA and MHA shapes.
# A finite set rather than the 120 products: a JIT kernel compiles once per shape and flag combination
# (ours: Triton constexprs and integer specializations), and the ci profile's ~200 calls met ~160
# forward specializations among the products (each 2-10 s of compilation).
SUITE_SHAPES = tuple(b + (HEAD_DIMS[(i + j) % len(HEAD_DIMS)],) for i, b in enumerate(BASE_SHAPES) for j in (0, 5))
CAUSALS = (False, True, "bottom_right")
SCALES = (1.0, 0.5, 1.75)
WINDOWS = (None, (0, 0), (7, 0), (31, 4), (None, 3), (2, None))
MASK_KINDS = (None, "random", "block_sparse", "fully_masked_rows", "padding")
VALUE_KINDS = ("normal", "outliers", "large_logits", "dominant", "constant_rows", "tiny") + FAMILIES
DTYPES = ("float32", "float16", "bfloat16")
# Logit standard deviation at each dtype's overflow edge: exp overflows fp32 above 88, and a score
# stored in fp16 overflows above 65504; the largest drawn scores sit just under that edge.
LOGIT_EDGE = {"float64": 3.0e4, "float32": 3.0e4, "float16": 1.5e4, "bfloat16": 3.0e4}
# Scale of `tiny` values: fp32/bf16 entries ~2^-40, whose products (~2^-80) sit far below 1 but well above
# the normal range's bottom (2^-126); fp16 entries ~2^-6, whose products (~2^-12) a kernel that keeps
# scores in fp16 still holds as normal numbers (bottom 2^-14).
TINY = {"float64": 2.0**-40, "float32": 2.0**-40, "float16": 2.0**-6, "bfloat16": 2.0**-40}


@dataclass(frozen=True)
class Shape:
    B: int
    Hq: int
    Hkv: int
    Nq: int
    Nk: int
    d: int

    @property
    def dv(self) -> int:
        return self.d

    def __repr__(self):
        return f"Shape(B={self.B}, Hq={self.Hq}, Hkv={self.Hkv}, Nq={self.Nq}, Nk={self.Nk}, d={self.d})"


@dataclass(frozen=True)
class Case:
    shape: Shape
    causal: object = False
    window: tuple | None = None
    mask: str | None = None
    values: str = "normal"
    seed: int = 0
    scale: float = 1.0  # softmax scale as a multiple of 1/sqrt(d) (passed only to kernels declaring "scale")

    def kwargs(self) -> dict:
        """The reference/bound keyword arguments, without the mask array."""
        return {"causal": self.causal, "window": self.window}


@dataclass(frozen=True)
class Inputs:
    """Float64 arrays holding exactly what the kernel receives (already rounded to its dtype)."""
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    do: np.ndarray
    mask: np.ndarray | None
    scale: float


def _fit_n(n: int, domain) -> int:
    """The nearest sequence length the domain accepts at or above n (below max_n)."""
    m = domain.seq_multiple
    n = max(n, domain.min_n)
    n = -(-n // m) * m
    if domain.max_n is not None and n > domain.max_n:
        n = (domain.max_n // m) * m
    return n


def _fit_heads(Hq: int, Hkv: int, supports, domain) -> tuple[int, int]:
    if "gqa" not in supports:
        return Hq, Hq
    ratios = domain.gqa_ratios
    if ratios is None or Hq // Hkv in ratios:
        return Hq, Hkv
    group = min(ratios, key=lambda r: (abs(r - Hq // Hkv), r))
    return Hkv * group, Hkv


def adapt(case: Case, kernel) -> Case:
    """The nearest case `kernel` (a KernelUnderTest: its declared capabilities and `Domain`) can run;
    a causal case gets the kernel's declared alignment."""
    supports, domain = kernel.supports, kernel.domain
    s = case.shape
    Hq, Hkv = _fit_heads(s.Hq, s.Hkv, supports, domain)
    Nq, Nk = _fit_n(s.Nq, domain), _fit_n(s.Nk, domain)
    if domain.square_only:
        Nk = Nq
    d = s.d
    if domain.head_dims is not None and d not in domain.head_dims:
        d = min(domain.head_dims, key=lambda x: (abs(x - d), x))
    causal = False
    if case.causal and "causal" in supports:
        causal = "bottom_right" if domain.causal_alignment == "bottom_right" else True
    return replace(
        case,
        shape=Shape(s.B, Hq, Hkv, Nq, Nk, d),
        causal=causal,
        window=case.window if "window" in supports else None,
        mask=case.mask if "mask" in supports else None,
        scale=case.scale if "scale" in supports else 1.0,
    )


def shapes(head_dims=HEAD_DIMS, base=BASE_SHAPES, max_d: int | None = None, pairs=None):
    """Shapes `base` x `head_dims` (head dims up to `max_d`), or drawn from `pairs`: (B, Hq, Hkv, Nq, Nk, d)."""
    if pairs is not None:
        return st.sampled_from([Shape(*p) for p in pairs])
    dims = [d for d in head_dims if max_d is None or d <= max_d]
    return st.builds(lambda b, d: Shape(*b, d), st.sampled_from(base), st.sampled_from(dims))


def dtypes(names=DTYPES):
    return st.sampled_from(list(names))


def causals():
    return st.sampled_from(CAUSALS)


def windows():
    return st.sampled_from(WINDOWS)


def mask_kinds():
    return st.sampled_from(MASK_KINDS)


def seeds():
    return st.integers(min_value=0, max_value=2**32 - 1)


def cases(*, head_dims=HEAD_DIMS, max_d: int | None = None, causal=True, window=True, mask=True,
          values=VALUE_KINDS, base=BASE_SHAPES, pairs=None):
    """Cases over every feature; a property adapts them to the kernel under test with `adapt`.
    Shapes from `base` x `head_dims`, or from the (B, Hq, Hkv, Nq, Nk, d) `pairs` when given."""
    return st.builds(
        Case,
        shape=shapes(head_dims, base, max_d, pairs),
        causal=causals() if causal else st.just(False),
        window=windows() if window else st.just(None),
        mask=mask_kinds() if mask else st.just(None),
        values=st.sampled_from(list(values)),
        seed=seeds(),
        scale=st.sampled_from(SCALES),
    )


# ---- materialization -------------------------------------------------------------------------------

def round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """x rounded to `dtype` (round to nearest even), returned as float64."""
    if dtype in ("float64", "float32", "float16"):
        return x.astype(dtype).astype(np.float64)
    if dtype == "bfloat16":
        import torch

        return torch.from_numpy(x).to(torch.bfloat16).to(torch.float64).numpy()
    raise ValueError(f"dtype: expected one of {DTYPES + ('float64',)}, got {dtype!r}")


def _values(case: Case, dtype: str, rng: np.random.Generator):
    s = case.shape
    q = rng.standard_normal((s.B, s.Hq, s.Nq, s.d))
    k = rng.standard_normal((s.B, s.Hkv, s.Nk, s.d))
    v = rng.standard_normal((s.B, s.Hkv, s.Nk, s.dv))
    kind = case.values
    if kind == "outliers":
        for x in (q, k, v):
            flat = x.reshape(-1)
            n = max(1, round(1e-3 * flat.size))
            idx = rng.choice(flat.size, size=n, replace=False)
            flat[idx] += rng.normal(0.0, 10.0, size=n)  # N(0, 100): variance 100
    elif kind == "large_logits":
        # logit std = c^2 (scale = 1/sqrt(d)); c^2 log-uniform between 30 and the dtype's edge.
        target = np.exp(rng.uniform(np.log(30.0), np.log(LOGIT_EDGE[dtype])))
        q *= np.sqrt(target)
        k *= np.sqrt(target)
    elif kind == "dominant":
        j = rng.integers(s.Nk)
        q = 0.5 * q + 1.0
        k[:, :, j, :] = 8.0
    elif kind == "constant_rows":
        rows = rng.random(s.Nq) < 0.5
        q[:, :, rows, :] = 0.0
        v[:] = v[:, :, :1, :]
    elif kind == "tiny":
        q *= TINY[dtype]
        k *= TINY[dtype]
        v *= TINY[dtype]
    elif kind in FAMILIES:
        x = structured_inputs(kind, s.B, s.Hq, s.Hkv, s.Nq, s.Nk, s.d, rng, dv=s.dv,
                              scale=case.scale / np.sqrt(s.d))
        return x.q, x.k, x.v, x.do
    elif kind != "normal":
        raise ValueError(f"values: expected one of {VALUE_KINDS}, got {kind!r}")
    return q, k, v, rng.standard_normal(q.shape[:-1] + (s.dv,))


def make_mask(case: Case, rng: np.random.Generator) -> np.ndarray | None:
    s = case.shape
    kind = case.mask
    if kind is None:
        return None
    if kind == "random":
        return rng.random((s.B, s.Hq, s.Nq, s.Nk)) < 0.7
    if kind == "block_sparse":
        blk = 32
        nbq, nbk = -(-s.Nq // blk), -(-s.Nk // blk)
        state = rng.integers(0, 3, size=(s.B, s.Hq, nbq, nbk))  # 0 empty, 1 full, 2 partial
        full = np.repeat(np.repeat(state, blk, axis=2), blk, axis=3)[..., : s.Nq, : s.Nk]
        partial = rng.random((s.B, s.Hq, s.Nq, s.Nk)) < 0.5
        return (full == 1) | ((full == 2) & partial)
    if kind == "fully_masked_rows":
        m = rng.random((s.B, s.Hq, s.Nq, s.Nk)) < 0.8
        rows = rng.random((s.B, s.Hq, s.Nq)) < 0.25
        rows[..., 0] = True
        m[rows] = False
        return m
    if kind == "padding":
        lengths = rng.integers(0, s.Nk + 1, size=s.B)
        lengths[-1] = max(1, lengths[-1])
        return np.arange(s.Nk)[None, None, None, :] < lengths[:, None, None, None]
    raise ValueError(f"mask: expected one of {MASK_KINDS}, got {kind!r}")


def materialize(case: Case, dtype: str) -> Inputs:
    """The exact inputs (float64 arrays of `dtype` values) that `case` describes."""
    rng = np.random.default_rng(case.seed)
    q, k, v, do = _values(case, dtype, rng)
    mask = make_mask(case, rng)
    return Inputs(q=round_to(q, dtype), k=round_to(k, dtype), v=round_to(v, dtype),
                  do=round_to(do, dtype), mask=mask, scale=case.scale / np.sqrt(case.shape.d))


def visible(case: Case, mask: np.ndarray | None) -> np.ndarray:
    """Visibility (B, Hq, Nq, Nk) of a case (flashcheck.reference.masks.visibility)."""
    from flashcheck.reference.masks import visibility

    s = case.shape
    return visibility(s.B, s.Hq, s.Nq, s.Nk, causal=case.causal, window=case.window, mask=mask)


# Cases every property runs first (hypothesis @example): each one exercises a failure mode that random
# draws reach only sometimes. `adapt` drops what the kernel does not declare.
def _c(B, Hq, Hkv, Nq, Nk, d, **kw):
    return Case(Shape(B, Hq, Hkv, Nq, Nk, d), **kw)


CANONICAL = (
    _c(1, 4, 2, 65, 130, 32, causal=True, values="normal", seed=1),  # partial tile, GQA, non-square causal
    _c(1, 2, 2, 33, 129, 16, causal=True, values="large_logits", seed=2, scale=0.5),  # max grows late
    _c(1, 2, 1, 1, 1, 16, values="normal", seed=3),                            # N = 1: O = v exactly
    _c(2, 2, 2, 64, 64, 64, values="constant_rows", seed=4),                   # O = the constant row
)
CANONICAL_SMALL = (
    _c(1, 4, 2, 17, 33, 32, causal=True, values="normal", seed=1),
    _c(1, 2, 2, 17, 63, 16, causal=True, values="large_logits", seed=2, scale=0.5),
    _c(1, 2, 1, 1, 1, 16, values="normal", seed=3),
    _c(1, 2, 2, 17, 17, 64, values="constant_rows", seed=4),
)

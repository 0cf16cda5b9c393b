"""Hypothesis strategies and comparison helpers for the float64 reference tests.

Strategies draw small NumPy problems: shapes from a small finite set (N = 1, odd sizes, Nq < Nk and
Nq > Nk, GQA), both causal alignments, windows, random masks with fully masked rows, biases, and logit
scales up to 1e4; the values come from a drawn seed, so every case replays exactly.

Bounds: `reference_bounds` / `reference_backward_bounds` return `flashcheck.proofs.bounds.reference_bound`, or with
dropout `flashcheck.proofs.reference_bounds` (the one derivation per tolerance), and the name of the one used;
tests `note()` it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

U = 2.0**-53  # float64 unit roundoff

# ---- strategies --------------------------------------------------------------------------------------

HEADS = ((1, 1), (2, 1), (2, 2), (4, 2))
N_Q = (1, 2, 5, 8, 13)
N_K = (1, 3, 8, 16)
HEAD_DIMS = (1, 3, 4, 8)
CAUSALS = (False, True, "top_left", "bottom_right")
WINDOWS = (None, (1, 0), (2, 2), (None, 1), (0, None))
LOGIT_SCALES = (1.0, 10.0, 1e2, 1e4)
# the mpmath oracle loops in Python: its cases stay at N <= 8, d <= 4
SMALL_N_Q = (1, 3, 5, 8)
SMALL_N_K = (1, 4, 7, 8)
SMALL_HEAD_DIMS = (1, 2, 4)


@dataclass(frozen=True)
class ReferenceCase:
    """One drawn problem: arrays plus the keyword arguments every attention-like reference takes."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    do: np.ndarray
    kwargs: dict = field(default_factory=dict)
    seed: int = 0
    logit_scale: float = 1.0

    def describe(self) -> str:
        kw = {k: (v.shape if isinstance(v, np.ndarray) else v) for k, v in self.kwargs.items()}
        return (f"q{self.q.shape} k{self.k.shape} v{self.v.shape} logit_scale={self.logit_scale:g} "
                f"seed={self.seed} {kw}")


def random_mask(rng: np.random.Generator, shape: tuple, keep: float) -> np.ndarray:
    """Bernoulli(keep) mask with at least one fully masked row (when there are 2+ rows)."""
    m = rng.random(shape) < keep
    if shape[-2] > 1:
        m[..., rng.integers(shape[-2]), :] = False
    return m


@st.composite
def reference_cases(draw, *, small: bool = False, masking: bool = True, dropout: bool = False,
                    logit_scales=LOGIT_SCALES):
    """Problems for the float64 references (`small`: sizes the mpmath oracle can afford)."""
    B = draw(st.sampled_from((1, 2)))
    Hq, Hkv = draw(st.sampled_from(HEADS))
    Nq = draw(st.sampled_from(SMALL_N_Q if small else N_Q))
    Nk = draw(st.sampled_from(SMALL_N_K if small else N_K))
    d = draw(st.sampled_from(SMALL_HEAD_DIMS if small else HEAD_DIMS))
    dv = draw(st.sampled_from((d, 3)))
    logit_scale = draw(st.sampled_from(logit_scales))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    # logits ~ logit_scale: q carries the scale, the default 1/sqrt(d) normalizes the dot product
    q = rng.standard_normal((B, Hq, Nq, d)) * logit_scale
    k = rng.standard_normal((B, Hkv, Nk, d))
    v = rng.standard_normal((B, Hkv, Nk, dv))
    do = rng.standard_normal((B, Hq, Nq, dv))
    kwargs = {}
    if masking:
        kwargs["causal"] = draw(st.sampled_from(CAUSALS))
        kwargs["window"] = draw(st.sampled_from(WINDOWS))
        mask_kind = draw(st.sampled_from((None, "2d", "4d")))
        if mask_kind == "2d":
            kwargs["mask"] = random_mask(rng, (Nq, Nk), draw(st.sampled_from((0.3, 0.8))))
        elif mask_kind == "4d":
            kwargs["mask"] = random_mask(rng, (B, Hq, Nq, Nk), draw(st.sampled_from((0.3, 0.8))))
        if draw(st.booleans()):
            kwargs["bias"] = rng.standard_normal((1, Hq, Nq, Nk)) * logit_scale
    if dropout and draw(st.booleans()):
        p = draw(st.sampled_from((0.1, 0.5)))
        kwargs["dropout_p"] = p
        kwargs["dropout_mask"] = rng.random((B, Hq, Nq, Nk)) >= p
    return ReferenceCase(q=q, k=k, v=v, do=do, kwargs=kwargs, seed=seed, logit_scale=logit_scale)


@st.composite
def logit_rows(draw, *, max_n: int = 16):
    """Rows of logits (rows, N) with -inf entries and a fully masked row; N from a small set."""
    n = draw(st.sampled_from(tuple(x for x in (1, 2, 5, 6, 8, 13, 16) if x <= max_n)))
    scale = draw(st.sampled_from(LOGIT_SCALES))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((3, n)) * scale
    x[rng.random((3, n)) < 0.2] = -np.inf
    x[1] = -np.inf
    return x


def strict_fp():
    """Floating-point traps for the tests: overflow, invalid (inf - inf, 0 * inf) and divide-by-zero raise.
    Underflow to 0 is expected (exp of a very negative shifted logit) and allowed."""
    return np.errstate(over="raise", invalid="raise", divide="raise")


# ---- bounds ------------------------------------------------------------------------------------------

def _geometry(kwargs: dict) -> dict:
    """The keyword arguments reference_bound takes (dropout is absent or p = 0 when it is called)."""
    return {k_: v_ for k_, v_ in kwargs.items() if k_ in ("scale", "causal", "window", "mask", "bias")}


def reference_bounds(q, k, v, **kwargs):
    """(bound_o, bound_lse, source) of the float64 forward references against the exact result:
    flashcheck.proofs.bounds.reference_bound, or flashcheck.proofs.reference_bounds.dropout_attention_bound with dropout
    (which reference_bound does not model)."""
    if kwargs.get("dropout_p"):
        from flashcheck.proofs.reference_bounds import dropout_attention_bound

        b = dropout_attention_bound(q, k, v, **kwargs)
        return b.o, b.lse, "flashcheck.proofs.reference_bounds.dropout_attention_bound"
    from flashcheck.proofs.bounds import reference_bound

    b = reference_bound(q, k, v, **_geometry(kwargs))
    return np.asarray(b.o), np.asarray(b.lse), "flashcheck.proofs.bounds.reference_bound"


def reference_backward_bounds(q, k, v, do, **kwargs):
    """(bound_dq, bound_dk, bound_dv, source) of the float64 backward references (as reference_bounds)."""
    if kwargs.get("dropout_p"):
        from flashcheck.proofs.reference_bounds import dropout_attention_backward_bound

        b = dropout_attention_backward_bound(q, k, v, do, **kwargs)
        return b.dq, b.dk, b.dv, "flashcheck.proofs.reference_bounds.dropout_attention_backward_bound"
    from flashcheck.proofs.bounds import reference_bound

    b = reference_bound(q, k, v, do, **_geometry(kwargs))
    return np.asarray(b.dq), np.asarray(b.dk), np.asarray(b.dv), "flashcheck.proofs.bounds.reference_bound"


# ---- comparison ----------------------------------------------------------------------------------------

def assert_within(name: str, got, want, bound) -> float:
    """|got - want| <= bound elementwise; -inf in `want` must be matched exactly; NaN always fails.
    Returns the worst ratio |got - want| / bound (0 when all equal) for `note()`."""
    got = np.asarray(got, float)
    want = np.asarray(want, float)
    bound = np.broadcast_to(np.asarray(bound, float), want.shape)
    assert got.shape == want.shape, f"{name}: shape {got.shape} != expected {want.shape}"
    assert not np.isnan(got).any(), f"{name}: NaN at {np.argwhere(np.isnan(got))[:5].tolist()}"
    inf = np.isinf(want)
    bad_inf = inf & (got != want)
    assert not bad_inf.any(), f"{name}: expected {want[bad_inf][:3]} at {np.argwhere(bad_inf)[:5].tolist()}, got {got[bad_inf][:3]}"
    fin = ~inf
    assert np.isfinite(got[fin]).all(), f"{name}: non-finite values where finite expected"
    err = np.where(fin, np.abs(got - np.where(fin, want, 0.0)), 0.0)
    over = err > bound
    if over.any():
        idx = tuple(np.argwhere(over)[0])
        raise AssertionError(
            f"{name}: {int(over.sum())} of {over.size} entries exceed the bound; first at {list(idx)}: "
            f"got {got[idx]!r}, expected {want[idx]!r}, |diff| = {err[idx]:.3e} > bound {bound[idx]:.3e}"
        )
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(bound > 0, err / bound, np.where(err > 0, np.inf, 0.0))
    return float(ratio.max()) if ratio.size else 0.0


# ---- finite differences (proofs/bounds.md sec. 9a) ---------------------------------------------------

FD_STEP = 2.0**-13  # ~1.2e-4: a power of two, so t * e is exact for the dyadic directions below
FD_GRID_BITS = 40  # inputs on the grid 2^-40 and directions on 2^-20: x + t e exact for t in {+-h, +-h/2}


def on_grid(x, bits: int):
    """x rounded to a multiple of 2^-bits (|x| < 2^(53 - bits) keeps it exact in float64)."""
    return np.round(np.asarray(x, dtype=np.float64) * 2.0**bits) / 2.0**bits


def gamma(n: int) -> float:
    """Higham's gamma_n in float64 (flashcheck.proofs.bounds.gamma)."""
    from flashcheck.proofs.bounds import gamma as gamma_n

    return float(gamma_n(n, U))


def loss_rounding_bound(q, k, v, do, o, **kwargs) -> float:
    """Bound on |fl(sum dO o O_ref) - sum dO o O| for the float64 forward reference O_ref at exactly
    these inputs: the reference's own elementwise bound B (reference_bounds: one derivation), weighted
    by |dO|, plus the n-term float64 sum of the products (gamma_n (sum |dO| (|O_ref| + B)) covers the
    product roundings and any summation order)."""
    b_o = reference_bounds(q, k, v, **kwargs)[0]
    ado = np.abs(np.asarray(do, dtype=np.float64))
    return float((ado * b_o).sum() + gamma(do.size + 1) * (ado * (np.abs(o) + b_o)).sum())


def finite_difference_tolerance(f_plus, f_minus, f_plus_half, f_minus_half, h, e_plus, e_minus, e_plus_half,
                                e_minus_half) -> float:
    """Bound on |D(h/2) - f'(0)| as computed, D(h) = (f(h) - f(-h)) / 2h, from the four computed values
    f(t) and bounds e(t) on their rounding errors |f_hat(t) - f(t)| (loss_rounding_bound; the points
    x + t e are exact: on_grid). proofs/bounds.md sec. 9a:
    rounding of D(h): r_h = (e(h) + e(-h)) / 2h + gamma_2 |D_hat(h)| (h a power of two: the products by
    h are exact; one subtraction, one division);
    truncation: D(h) - f' = c3 h^2 + c5 h^4 + ..., so D(h/2) - f' = (D(h) - D(h/2)) / 3 - c5 h^4 / 4 + ...;
    with |c5| h^2 <= |c3| (h below the curvature length of the logits, 1 / logit scale) the remainder is at
    most (D(h) - D(h/2)) / 3 again: |D(h/2) - f'| <= 2 (|D_hat(h) - D_hat(h/2)| + r_h + r_h2) / 3, and the
    rounding of D_hat(h/2) itself, r_h2, is added."""
    d_h = (f_plus - f_minus) / (2 * h)
    d_h2 = (f_plus_half - f_minus_half) / h
    r_h = (e_plus + e_minus) / (2 * h) + gamma(2) * abs(d_h)
    r_h2 = (e_plus_half + e_minus_half) / h + gamma(2) * abs(d_h2)
    return 2 * (abs(d_h - d_h2) + r_h + r_h2) / 3 + r_h2


def directional_derivative_bound(grads, bounds, directions) -> float:
    """Bound on |fl(sum_x grad_x e_x) - sum_x dL/dx e_x| for reference gradients `grads` within `bounds`
    of the exact ones (reference_backward_bounds) and exact directions: sum B |e| plus the m-term float64
    sum (gamma_m)."""
    m = sum(e.size for e in directions)
    return float(sum((b * np.abs(e)).sum() for b, e in zip(bounds, directions))
                 + gamma(m + 1) * sum(((np.abs(g) + b) * np.abs(e)).sum()
                                      for g, b, e in zip(grads, bounds, directions)))


def note_comparison(note, case_desc: str, worst: dict, source: str) -> None:
    note(f"case: {case_desc}")
    note(f"bounds: {source}; worst |err|/bound: " + ", ".join(f"{k}={v:.3g}" for k, v in worst.items()))


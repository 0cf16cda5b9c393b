"""Hypothesis strategies and comparison helpers for the float64 reference tests.

Strategies draw small NumPy problems: shapes from a small finite set (N = 1, odd sizes, Nq < Nk and
Nq > Nk, GQA), both causal alignments, windows, random masks with fully masked rows, biases, and logit
scales up to 1e4; the values come from a drawn seed, so every case replays exactly.

Bounds: `reference_bounds` / `reference_backward_bounds` use `proofs.bounds.reference_bound` when it is
importable, and otherwise the PROVISIONAL first-order worst-case bounds below (derivations in their
docstrings). Each returns the name of the bound it used last; tests `note()` it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

U = 2.0**-53  # float64 unit roundoff
ETA = 2.0**-1074  # smallest subnormal: the absolute error of a result that underflows (gradual underflow)
SLACK = 1.05  # first-order bounds: covers the O(u^2) terms for every case drawn here (n u << 1e-3)

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


# ---- provisional bounds --------------------------------------------------------------------------------

def _attention_parts(case_q, case_k, case_v, kwargs):
    """Float64 magnitudes the bounds are built from: kappa (largest visible |logit| term per row),
    P (probabilities, dropout applied) and the logits' visibility."""
    from reference.attention import apply_dropout, expand_kv, masked_logits, masked_softmax, resolve_scale
    from reference.shapes import check_attention_args

    kw = {k: v for k, v in kwargs.items() if k in ("scale", "causal", "window", "mask", "bias")}
    p = check_attention_args(case_q, case_k, case_v, **kw)
    s, _ = masked_logits(case_q, case_k, p, **kw)
    P, lse = masked_softmax(s)
    Pd = apply_dropout(P, kwargs.get("dropout_p", 0.0), kwargs.get("dropout_mask"))
    K = expand_kv(np.asarray(case_k, float), p.group)
    sc = resolve_scale(kw.get("scale"), p.d)
    mag = sc * (np.abs(case_q) @ np.swapaxes(np.abs(K), -1, -2))
    if "bias" in kw and kw["bias"] is not None:
        mag = mag + np.abs(np.broadcast_to(kw["bias"], p.full))
    kappa = np.where(np.isfinite(s), mag, 0.0).max(axis=-1)
    return p, kappa, P, Pd, lse


def provisional_forward_bound(q, k, v, **kwargs):
    """PROVISIONAL worst-case bound on |float64 reference - exact| for O and LSE (first order in u).

    Standard attention in float64, per row i with kappa_i = max over visible j of
    scale sum_c |q_ic k_jc| + |bias_ij|:
      logits: |ds_ij| <= (d + 2) u kappa_i (dot product gamma_d, scale and bias roundings);
      the max is exact, so |dm_i| <= (d + 2) u kappa_i; t = s - m has |t| <= 2 kappa_i and its rounding
      adds u |t|; exp adds <= 2u. So each weight e_ij = exp(t_ij) has relative error
      eps_i <= (2d + 6) u kappa_i + 2u.
      l = sum e: + gamma_Nk; P = e / l: relative error <= 2 eps_i + Nk u + u; O = P V: + Nk u.
      => |dO_ic| <= (2 eps_i + 2 Nk u + u) sum_j P_ij |v_jc|.
    Tiled variants (FA1, FA2, block-sparse, recurrences) rescale by alpha = exp(m_old - m_new) once per
    tile (T <= Nk tiles): each rescale adds 2u + u |m_old - m_new| (sum over tiles <= 2 u kappa_i) and the
    split sums add at most T u; FA1 also divides per tile (T u). Covering all of them and the oracle's
    own rounding to float64 (u |O|):
      bound_O[i, c]  = u ((4d + 16) kappa_i + 6 Nk + 12) sum_j P_ij |v_jc|
      bound_LSE[i]   = u ((2d + 10) kappa_i + 4 Nk + 8 + 2 |LSE_i|)
    (LSE = m + log l: |dm| + relative error of l + log's and the final add's roundings.) Fully masked rows
    get bound 0: they must be exact (O = 0, LSE = -inf).
    Underflow: a weight e_ij = exp(t_ij) below the normal range keeps only an absolute accuracy ETA
    (relative bounds fail there), and so does each product and sum in the subnormal range; as l >= 1,
    this adds ETA (sum_j |v_jc| + Nk + 1) to bound_O.
    """
    p, kappa, P, Pd, lse = _attention_parts(q, k, v, kwargs)
    from reference.attention import expand_kv

    V = expand_kv(np.asarray(v, float), p.group)
    d, nk = p.d, p.Nk
    weight = np.abs(Pd) @ np.abs(V)
    floor = ETA * (np.abs(V).sum(axis=-2, keepdims=True) + nk + 1)
    bound_o = SLACK * (U * ((4 * d + 16) * kappa + 6 * nk + 12)[..., None] * weight + floor)
    bound_o = np.where(np.isfinite(lse)[..., None], bound_o, 0.0)
    finite = np.isfinite(lse)
    bound_lse = np.where(finite, SLACK * U * ((2 * d + 10) * kappa + 4 * nk + 8 + 2 * np.abs(np.where(finite, lse, 0))), 0.0)
    return bound_o, bound_lse


def provisional_backward_bound(q, k, v, do, **kwargs):
    """PROVISIONAL worst-case bound on |float64 backward - exact| for dQ, dK, dV (first order in u).

    With G_ij = sum_c |dO_ic||v_jc| (bounds |dP_ij|), Gbar_i = sum_j P_ij G_ij (bounds |Delta_i|):
      P recomputed as exp(S - LSE): relative error eps_P,i <= u ((3d + 14) kappa_i + 4 Nk + 10 + 3 |LSE_i|)
        (logit error, LSE error, exp argument and exp roundings);
      O (from the forward) has |dO_ic| <= eps_O,i sum_j P_ij |v_jc| with eps_O,i the forward coefficient,
        so |dDelta_i| <= (dv u + eps_O,i) Gbar_i;
      dS_ij = P_ij (dP_ij - Delta_i): |d dS_ij| <= M_ij eps_S,i with M_ij = P_ij (G_ij + Gbar_i) and
        eps_S,i = eps_P,i + eps_O,i + (2 dv + Nk + 3) u  (the Nk u covers the J_softmax row product);
      dQ = scale dS K: bound scale sum_j M_ij |k_jc| (eps_S,i + (Nk + 3) u);
      dK = scale dS^T Q: bound scale sum_i M_ij |q_ic| (max eps_S + (group Nq + 3) u);
      dV = P^T dO: bound sum_i P_ij |dO_ic| (max eps_P + (group Nq + 2) u).
    Each includes the oracle's rounding to float64 (u |x| <= u magnitude). Dropout multiplies P by
    keep/(1 - p) (one more u, inside the +3).
    Underflow: a P_ij or dS_ij in the subnormal range is only accurate to ETA absolutely, which adds
    ETA (sum_i |dO_ic| + group Nq + 1) to dV, ETA (scale sum_j (G_ij + Gbar_i + 1) |k_jc| + Nk + 1) to dQ and
    ETA (scale sum_i (G_ij + Gbar_i + 1) |q_ic| + group Nq + 1) to dK.
    """
    p, kappa, P, Pd, lse = _attention_parts(q, k, v, kwargs)
    from reference.attention import expand_kv, reduce_kv, resolve_scale

    Q = np.abs(np.asarray(q, float))
    K = np.abs(expand_kv(np.asarray(k, float), p.group))
    V = np.abs(expand_kv(np.asarray(v, float), p.group))
    dO = np.abs(np.asarray(do, float))
    sc = abs(resolve_scale(kwargs.get("scale"), p.d))
    d, dv, nk, nq = p.d, p.dv, p.Nk, p.Nq
    lse_mag = np.abs(np.where(np.isfinite(lse), lse, 0.0))
    eps_p = U * ((3 * d + 14) * kappa + 4 * nk + 10 + 3 * lse_mag)
    eps_o = U * ((4 * d + 16) * kappa + 6 * nk + 12)
    eps_s = eps_p + eps_o + (2 * dv + nk + 3) * U
    keep_scale = 1.0 / (1.0 - kwargs.get("dropout_p", 0.0))
    G = (dO @ np.swapaxes(V, -1, -2)) * keep_scale
    Gbar = (np.abs(Pd) * G).sum(axis=-1)
    M = np.abs(P) * (G + Gbar[..., None])
    W = G + Gbar[..., None] + 1.0  # underflow floor weights
    b_dq = sc * (M @ K) * (eps_s + (nk + 3) * U)[..., None] + ETA * (sc * (W @ K) + nk + 1)
    eps_s_max = eps_s.max(axis=-1, keepdims=True)[..., None]
    eps_p_max = eps_p.max(axis=-1, keepdims=True)[..., None]
    b_dk = (sc * (np.swapaxes(M, -1, -2) @ Q) * (eps_s_max + (p.group * nq + 3) * U)
            + ETA * (sc * (np.swapaxes(W, -1, -2) @ Q) + p.group * nq + 1))
    b_dv = (np.swapaxes(np.abs(Pd), -1, -2) @ dO) * (eps_p_max + (p.group * nq + 3) * U)
    b_dv = b_dv + ETA * (dO.sum(axis=-2, keepdims=True) + p.group * nq + 1)
    return SLACK * b_dq, SLACK * reduce_kv(b_dk, p.group), SLACK * reduce_kv(b_dv, p.group)


def provisional_softmax_bound(x):
    """PROVISIONAL worst-case bound on |float64 softmax - exact| per entry and on |LSE - exact| per row.

    With kappa = max |x_j| over finite entries of the row and n its length: every variant (safe, online,
    tiled, naive below overflow) computes exp(x_j - m) with argument rounding u |x_j - m| <= 2 u kappa and
    exp rounding 2u; the online recurrences rescale d' by exp(m_old - m_new) at most n times (the
    arguments telescope to <= 2 kappa, plus 3u per step); the sum adds n u and the division u, the oracle's
    rounding u. So |da_j| <= u (4 kappa + 5 n + 6) a_j and |dLSE| <= u (4 kappa + 2 n + 6 + 2 |LSE|).
    Underflow: a weight in the subnormal range is accurate to ETA only (absolute; the denominator is >= 1),
    adding ETA (n + 2) to |da_j|.
    """
    from reference.softmax import logsumexp, safe_softmax

    x = np.asarray(x, float)
    kappa = np.where(np.isfinite(x), np.abs(x), 0.0).max(axis=-1, keepdims=True)
    n = x.shape[-1]
    a = safe_softmax(x)
    lse = logsumexp(x)
    lse_mag = np.abs(np.where(np.isfinite(lse), lse, 0.0))
    return (SLACK * (U * (4 * kappa + 5 * n + 6) * a + ETA * (n + 2)) * np.isfinite(lse)[..., None],
            np.where(np.isfinite(lse), SLACK * U * (4 * kappa[..., 0] + 2 * n + 6 + 2 * lse_mag), 0.0))


def provisional_row_bound(x, v):
    """PROVISIONAL worst-case bound on |row recurrence - exact| (o'_N), per output entry.

    Each step i rescales o'_{i-1} by d'_{i-1} alpha / d'_i (<= 1) and adds e^{x_i - m_i} V[i] / d'_i: about 6
    roundings relative to the running magnitude sum_{j<=i} a^(i)_j |V[j]|; later rescalings shrink an
    error made at step i exactly as they shrink that magnitude, which ends as sum_j a_j |V[j]|. The alpha
    arguments telescope (<= 2 u kappa in total), and the exp arguments of the new terms err by <= 2 u kappa.
    So |do'_N| <= u (6 kappa + 8 n + 10) sum_j a_j |V[j]|, plus the underflow floor ETA (sum_j |V[j]| + 2 n)
    (subnormal weights and products are accurate to ETA absolutely; d' >= 1 once a maximum was seen).
    """
    from reference.softmax import safe_softmax

    x = np.asarray(x, float)
    kappa = np.where(np.isfinite(x), np.abs(x), 0.0).max(axis=-1)
    n = x.shape[-1]
    a = safe_softmax(x)
    v = np.abs(np.asarray(v, float))
    floor = ETA * (v.sum(axis=-2) + 2 * n)
    bound = SLACK * (U * (6 * kappa + 8 * n + 10)[..., None] * np.einsum("...j,...jc->...c", a, v) + floor)
    return bound * np.isfinite(x).any(axis=-1)[..., None]


# ---- bound selection ----------------------------------------------------------------------------------

def _proofs_reference_bound():
    try:
        from proofs.bounds import reference_bound
    except ImportError:
        return None
    return reference_bound


PROOFS_KWARGS = ("scale", "causal", "window", "mask", "bias")


def _proofs_call(args, kwargs):
    """proofs.bounds.reference_bound(*args, **kwargs), or None when it is missing, not finished
    (NotImplementedError) or the case uses an option it does not model (dropout)."""
    fn = _proofs_reference_bound()
    if fn is None or any(k not in PROOFS_KWARGS for k in kwargs if kwargs[k] is not None and k != "dropout_p"):
        return None
    if kwargs.get("dropout_p", 0.0):
        return None
    try:
        return fn(*args, **{k: v for k, v in kwargs.items() if k in PROOFS_KWARGS})
    except NotImplementedError:
        return None


def reference_bounds(q, k, v, **kwargs):
    """(bound_o, bound_lse, source) of the float64 forward references against the exact result."""
    b = _proofs_call((q, k, v), kwargs)
    if b is not None:
        return np.asarray(b.o), np.asarray(b.lse), "proofs.bounds.reference_bound"
    return (*provisional_forward_bound(q, k, v, **kwargs), "PROVISIONAL tests.reference_strategies")


def reference_backward_bounds(q, k, v, do, **kwargs):
    """(bound_dq, bound_dk, bound_dv, source) of the float64 backward references against the exact result."""
    b = _proofs_call((q, k, v, do), kwargs)
    if b is not None:
        return np.asarray(b.dq), np.asarray(b.dk), np.asarray(b.dv), "proofs.bounds.reference_bound"
    return (*provisional_backward_bound(q, k, v, do, **kwargs), "PROVISIONAL tests.reference_strategies")


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


def finite_difference_tolerance(f_plus, f_minus, f_plus_half, f_minus_half, h, f_abs) -> float:
    """Tolerance for a central difference (f(x+h) - f(x-h)) / 2h against the analytic derivative.

    Truncation error is c h^2 f'''/6; comparing steps h and h/2 estimates it: D(h) - D(h/2) = (3/4) c h^2,
    so |D(h/2) - f'| <~ |D(h) - D(h/2)| / 3; we allow twice that. Rounding: each f carries <= n u f_abs
    (n = 64 covers the few-hundred-flop losses here at first order) and the difference divides by h.
    """
    d_h = (f_plus - f_minus) / (2 * h)
    d_h2 = (f_plus_half - f_minus_half) / h
    return 2 * abs(d_h - d_h2) / 3 + 2 * 64 * U * f_abs / h


def note_comparison(note, case_desc: str, worst: dict, source: str) -> None:
    note(f"case: {case_desc}")
    note(f"bounds: {source}; worst |err|/bound: " + ", ".join(f"{k}={v:.3g}" for k, v in worst.items()))


"""The forward bounds on O and LSE (proofs/bounds.md sec. 4-7)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
import math

import numpy as np

from .precision import (_DOT_OPERAND, FAILURE_PROBABILITY, Precision, _Model, _check_kind, _conv, _dot_steps, _model, gamma, hoeffding_lambda, _for_call)
from .results import (ForwardBound)
from .common import (_SIGNIFICAND_BITS, _exp_err, _half_ulp, _no_nan, _problem, _rounding_on_data, _rows_chunks, _signed_sum_bound,
                     _softmax_parts, _weighted_dev, _weighted_exp_err)
from .logits import (_logit_errors, _mma_steps_error)


# ----------------------------------------------------------------------------------------------
# Forward
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _ForwardParts:
    """The per-entry pieces of the O analysis that the backward reuses for Delta (sec. 8): the key
    weights' relative errors, the numerator/denominator perturbations, the LSE's bound (no part of it random).
    Arrays are per block of rows (B, H, rows, ...); scalars are the same for every row."""

    b_wc: np.ndarray  # worst-case relative error of key j's weight
    Ab_wc: np.ndarray  # A b (without 0 * inf)
    Ab1_wc: np.ndarray  # A (1 + b)
    b_lin: np.ndarray  # linear part of b
    qk: tuple  # the shift-independent products of q and k (logits._logit_errors)
    l: np.ndarray  # exact l = sum_j exp(s_j - m)
    det: np.ndarray  # the logit error's first order (none of it random, logits.py) + the rescale arguments
    nu_wc: float  # numerator perturbation (P.V): worst case
    nu_lin: float  # its linear part
    mu_wc: float  # l's sum: worst case
    mu_lin: float  # its linear part (n_l u; a wider l: b_k u + 2T u_l + u)
    inv_den: np.ndarray  # 1 / lower bound of D / l
    floors: np.ndarray  # absolute floors (ftz, subnormal P)
    final: np.ndarray  # division (+ store unless delta_from="fp32") part of O's bound
    n_pv: int
    T: int
    n_l: int
    lam: float
    lse_det: np.ndarray  # the LSE bound, none of it random (backward._lse_random takes its final roundings as random)
    l_sum_det: np.ndarray  # l's first-order rounding bound on the data (_l_sum_error), inside lse_det where not capped
    lse_capped: np.ndarray  # rows whose LSE bound is the worst case (lse_det holds it whole); True for worst_case
    lse_rn: tuple  # (fl(m2 + log2 l), fl(y ln 2)): the two round-to-nearest bounds inside lse_det (natural units)
    # (lo, hi, ok, z_lo, z_hi) per row: the stored LSE's error lies in [lo, hi] where ok, and the stored LSE is one of
    # the fp32 numbers z_lo <= z <= z_hi (Precision.lg2_known, _lse_interval)
    lse_iv: tuple | None = None
    # (acc, l_lo, l_hi, ok) per row: the kernel's fp32 accumulator at the end of the key loop exactly (_known_accumulator)
    # and the fp32 l it is divided by within [l_lo, l_hi], where ok (Precision.lg2_known); None elsewhere
    acc_known: tuple | None = None
    p_rho: tuple | None = None  # (centre, half-width) of P's relative rounding (or tf32 truncation) into the operand
    # format per key (_p_rounding_on_data; where not evaluated: centre 0, half u_p, truncated -u_p/2, u_p/2); None
    # where P is not converted (fp32 ieee), where a tf32 conversion is not the measured truncation, and for worst_case


@dataclass(frozen=True)
class _ForwardRows:
    """What _forward_rows returns for a block of query rows (terms: only with explain)."""

    err: np.ndarray
    lse_err: np.ndarray
    A: np.ndarray
    o: np.ndarray
    lse: np.ndarray
    m: np.ndarray
    empty: np.ndarray
    parts: _ForwardParts
    o_terms: object = None  # OTerms
    lse_terms: object = None  # LseTerms
    o_capped: np.ndarray = None
    lse_capped: np.ndarray = None


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
    parts: _ForwardParts  # the per-entry pieces of the O analysis, reused for Delta in the backward (sec. 8)
    terms: object = None  # ForwardTerms, with explain only


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


def _forward_impl(q, k, v, scale, causal, window, mask, bias, precision, kind, eta, explain=False) -> _Forward:
    p, qf, kf, vf, s, vis, sc = _problem(q, k, v, scale, causal, window, mask, bias)
    # the forward's tile of this call (long N, band; short N unmasked: Nq given only without a mask)
    precision = _for_call(precision, causal, window, p.Nk, p.Nq if mask is None else None)
    M = _model(precision)  # after for_call: the tree depth of the call's forward tile (rowsum_depth, lg2_known)
    given, precision = precision, precision.fitted(p.Nq, p.Nk)
    lam = hoeffding_lambda(1.0, eta)
    # every quantity of the forward analysis belongs to one query row: blocks of rows keep the
    # (rows, Nk) temporaries small (cache-sized, no page faults of fresh 32 MB arrays at N = 2048)
    groups = _identical_keys(kf) if kind == "probabilistic" else None
    # the kernel's masked tile: keys from here on (Precision.exp_argument); None: no claim, as with a band or a dense
    # mask every tile may go through tl.where (kernels/triton_fwd.py `_fwd_shift`, decided per query block)
    ragged_from = (None if causal or window is not None or mask is not None
                   else (p.Nk // given.block_k) * given.block_k)
    blocks = _query_block_orders(p, given, causal, window, mask, vis)
    if blocks is None:
        R = _cat_rows([_forward_rows(p, M, precision, kind, lam, qf[..., r, :], kf, vf, s[..., r, :],
                                     vis[..., r, :], sc, bias is not None, explain, groups, ragged_from)
                       for r in _rows_chunks(p.Nq, p.Nk, 1, budget=ROW_BLOCK_ENTRIES)])
    else:  # a head with masked entries, the forward's query blocks stated: each block in its own order (sec. 6c)
        chunks = []
        for a0, a1, order in blocks:
            for r in _rows_chunks(a1 - a0, p.Nk, 1, budget=ROW_BLOCK_ENTRIES):
                r = slice(a0 + r.start, a0 + r.stop)
                chunks.append(_forward_rows(p, M, precision, kind, lam, qf[..., r, :], kf, vf, s[..., r, :],
                                            vis[..., r, :], sc, bias is not None, explain, groups, None, order))
        R = _cat_rows(chunks)
    fb = ForwardBound(o=R.err, lse=R.lse_err, kind=kind, precision=given)
    terms = (ForwardTerms(bound=fb, o=R.o_terms, lse=R.lse_terms, o_capped=R.o_capped, lse_capped=R.lse_capped)
             if explain else None)
    return _Forward(bound=fb, s=s, vis=vis, A=R.A, o=R.o, lse=R.lse, m=R.m, empty=R.empty,
                    qf=qf, kf=kf, vf=vf, scale=sc, problem=p, parts=R.parts, terms=terms)


# (rows x Nk) entries per block of query rows in the forward analysis
ROW_BLOCK_ENTRIES = 1 << 17


def _query_block_orders(p, given: Precision, causal, window, mask, vis):
    """[(a0, a1, order)] per query block [a0, a1) of the forward kernel (Precision.block_q_fwd rows): its visiting order
    (_TileOrder, masked: bounds.md sec. 6c), or None where no order is stated for it (the block visits no tile, or
    its heads visit theirs apart: a block-sparse mask's lists that differ per head). None as a whole: every row
    analysed as before (an unmasked problem: one order for every row, _tile_order; no block_q_fwd stated, or a tile
    order other than our kernel's).

    Which tiles a block visits, and which first, is proofs/bounds/visits.py's (tile_ranks, as the backward's outer
    blocks): under tile_lists "band" from the band's visibility alone (causal, window and the sequence end; a dense
    mask is applied elementwise on every tile), under "lists" from the whole visibility (a block-sparse mask's lists),
    with the kernel's own tile widths (given: before Precision.fitted, so a tile wider than N_k is ragged, partial).
    The unfused keys (their argument in two roundings, Precision.exp_argument): the partial tiles', every tile's
    under a dense mask without lists (kernels/triton_fwd.py `_fwd_shift`: MASKED or HAS_MASK)."""
    from flashcheck.reference.masks import visibility

    from .visits import EMPTY, PARTIAL, tile_ranks

    bq, bk = given.block_q_fwd, given.block_k
    if given.tile_order != "partial_first" or bq is None or vis.all() or p.Nk == 0 or p.Nq == 0:
        return None
    lists = given.tile_lists == "lists"
    cls = vis if lists else visibility(1, 1, p.Nq, p.Nk, causal=causal, window=window)
    ranks = tile_ranks(np.asarray(cls, dtype=bool), bq, bk, lists)  # (B|1, H|1, M, T)
    dense = mask is not None and not lists
    Nk, T = p.Nk, ranks.shape[-1]
    out = []
    for m in range(ranks.shape[-2]):
        a0, a1 = m * bq, min(p.Nq, (m + 1) * bq)
        heads = ranks[..., m, :].reshape(-1, T)
        r = heads[0]
        tiles = [int(t) for t in np.argsort(r, kind="stable") if r[t] != EMPTY]
        if not tiles or not (heads == r).all():
            out.append((a0, a1, None))
            continue
        ends = [min(Nk, (t + 1) * bk) for t in tiles]
        perm = np.concatenate([np.arange(t * bk, e) for t, e in zip(tiles, ends)])
        sizes = tuple(e - t * bk for t, e in zip(tiles, ends))
        unfused = np.repeat([dense or r[t] == PARTIAL for t in tiles], sizes)
        out.append((a0, a1, _TileOrder(perm, sizes, masked=True, n=Nk, unfused=unfused)))
    return out


def _cat_rows(chunks):
    """Join the per-block results of _forward_rows along the query-row axis (axis 2 of (B, H, rows, ...))."""
    if len(chunks) == 1:
        return chunks[0]
    first = chunks[0]
    if dataclasses.is_dataclass(first):
        return type(first)(**{f.name: _cat_rows([getattr(c, f.name) for c in chunks]) for f in dataclasses.fields(first)})
    if isinstance(first, tuple):
        return tuple(_cat_rows([c[i] for c in chunks]) for i in range(len(first)))
    if isinstance(first, np.ndarray) and first.ndim >= 3:
        return np.concatenate(chunks, axis=2)
    return first  # scalars: the same for every block


@dataclass(frozen=True)
class _TileOrder:
    """The key tiles of a row in the order the kernel visits them: `perm` lists the key indices in that order (None:
    ascending), `sizes` the tile widths along it.

    masked: the order of one query block of a head with masked entries (Precision.block_q_fwd, _query_block_orders;
    bounds.md sec. 6c): perm lists the keys of the tiles the block visits only (its partial tiles ascending, then its
    full ones), n the length of the whole key axis (undo puts 0 at the keys of the tiles never visited), and a masked
    entry of a visited tile is an exact zero of every chain (logit -inf: P~ = 0, outside the running max). unfused
    (visiting order): the keys whose exponent argument goes through tl.where, fl32(s2 - m) in two roundings (the
    block's partial tiles; every tile under a dense mask without lists: kernels/triton_fwd.py `_fwd_shift`)."""

    perm: np.ndarray | None
    sizes: tuple
    masked: bool = False
    n: int | None = None
    unfused: np.ndarray | None = None

    @property
    def starts(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(np.int64)

    def apply(self, x):  # keys (last axis) into visiting order
        return x if self.perm is None else x[..., self.perm]

    def undo(self, x):
        if self.perm is None:
            return x
        if self.n is not None:  # only the visited keys: the others 0 (False)
            out = np.zeros(x.shape[:-1] + (self.n,), dtype=x.dtype)
            out[..., self.perm] = x
            return out
        out = np.empty_like(x)
        out[..., self.perm] = x
        return out


def _tile_order(Nk: int, block_k: int, order: str) -> _TileOrder | None:
    """Visiting order of an unmasked row's key tiles under Precision.tile_order (None for "any")."""
    if order == "any":
        return None
    full, tail = divmod(Nk, block_k)
    if order == "partial_first" and tail and full:  # kernels/tiles.py: the ragged (masked) tile, then the full ones
        perm = np.concatenate([np.arange(full * block_k, Nk), np.arange(full * block_k)])
        return _TileOrder(perm, (tail,) + (block_k,) * full)
    return _TileOrder(None, (block_k,) * full + ((tail,) if tail else ()))


def _keys_in_order(x, order: _TileOrder):
    """(..., Nk, dv) rows of keys (K, V) in visiting order."""
    return x if order.perm is None else x[..., order.perm, :]


def _tile_changes(s, wc, vis, order: _TileOrder, exact_at_zero: bool):
    """Per tile, in visiting order: whether its alpha = exp2(m_old - m_new) can differ from 1 (tile t can
    move the computed running max only if max_{j in t} (s_j + e_j) > max_{j in earlier tiles} (s_j - e_j);
    the first visible tile rescales an empty accumulator: no error. Without exp2(0) == 1 exactly, every
    later visible tile counts; in a masked query block's order every tile of it is visited, so each one after the
    first visible key counts, whether or not the row sees anything in it: bounds.md sec. 6c)."""
    st = order.starts
    hi = np.maximum.reduceat(order.apply(np.where(vis, s + wc, -np.inf)), st, axis=-1)
    lo = np.maximum.reduceat(order.apply(np.where(vis, s - wc, -np.inf)), st, axis=-1)
    prev = np.maximum.accumulate(lo, axis=-1)
    prev = np.concatenate([np.full_like(prev[..., :1], -np.inf), prev[..., :-1]], axis=-1)
    seen = np.isfinite(prev)
    return seen & ((hi > prev) if exact_at_zero else (np.isfinite(hi) | order.masked))


def _rescale_changes(s, wc, vis, block_k: int, exact_at_zero: bool, order: _TileOrder | None = None):
    """c_j: how many rescales alpha = exp2(m_old - m_new) with m_new != m_old can come AFTER key j's tile
    (each multiplies key j's weight, in acc and in l alike, by a rounded alpha: sec. 5).

    With the visiting order known (unmasked rows): the tiles after j's that can move the max
    (_tile_changes). Order-free (order None, or masked keys in the block): every other tile t' whose
    largest possible logit exceeds the smallest possible max of j's tile (it could come after j's tile
    and move the max then)."""
    Nk = s.shape[-1]
    if order is not None and (order.masked or vis.all()):
        change = _tile_changes(s, wc, vis, order, exact_at_zero)
        later = np.cumsum(change[..., ::-1], axis=-1)[..., ::-1] - change  # changes in tiles after t
        return order.undo(np.repeat(later, order.sizes, axis=-1)).astype(np.float64)
    T = max(1, -(-Nk // block_k))
    pad = T * block_k - Nk

    def tiles(x):
        x = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, pad)], constant_values=-np.inf)
        return x.reshape(*x.shape[:-1], T, block_k).max(axis=-1)

    hi = tiles(np.where(vis, s + wc, -np.inf))
    lo = tiles(np.where(vis, s - wc, -np.inf))
    if exact_at_zero:
        can = np.isfinite(hi)[..., None, :] & (hi[..., None, :] > lo[..., :, None])  # (t, t'): t' after t moves it
    else:
        can = np.isfinite(hi)[..., None, :] & np.isfinite(lo)[..., :, None]
    can = can & ~np.eye(T, dtype=bool)
    later = can.sum(-1)
    return np.repeat(later, block_k, axis=-1)[..., :Nk].astype(np.float64)


def _l_sum_error(A, vis, wc, s, order: _TileOrder | None, M: _Model, mu_lin: float):
    """First-order relative error of the computed l = sum over tiles of l * alpha + rowsum(P_tile) (sec. 4),
    per row, in units of l (exact weights A; the perturbation of the weights themselves is in b).

    With the visiting order known (unmasked rows): tile t's rowsum of n_t positive terms, added in ANY
    order, errs by <= u sum_{m=2..n_t} S_m (first order), each partial sum S_m of m terms <= the sum of the
    m largest (so <= (n_t - 1) u R_t, R_t = the tile's share of l; about half that when the terms are
    alike); added in a tree of depth D (Precision.rowsum_depth), by <= u min(D, n_t) R_t, the smaller of the
    two; from the second tile on, the addition
    l + rowsum errs by <= u_l L_t (L_t = the share of the tiles visited so far; u_l the unit roundoff of l's
    format, Precision.l_accumulate) and l * alpha by <= u_l L_{t-1}, but only where alpha can differ from 1
    (an unchanged max gives alpha = exp2(0) = 1 exactly, _tile_changes); the first tile is exact
    (0 * alpha + rowsum, the fp32 rowsum exact in a wider l). A wider l is rounded once into the working
    format at the end: u L_T. Otherwise mu_lin (every key through block_k - 1 roundings at u, or D, 2T at u_l
    and the final conversion)."""
    if order is None or not (order.masked or vis.all()) or A.shape[-1] == 0:
        return np.full(A.shape[:-1], mu_lin)
    st = order.starts
    R = np.add.reduceat(order.apply(A), st, axis=-1)
    L = np.cumsum(R, axis=-1)
    change = _tile_changes(s, wc, vis, order, M.alpha_exact_at_zero)
    within = np.zeros(A.shape[:-1])
    Ao = order.apply(A)
    t0 = 0
    for w, n in _runs(order.sizes):  # runs of equal widths: one sort each
        tiles = Ao[..., t0:t0 + w * n].reshape(*Ao.shape[:-1], n, w)
        top = np.cumsum(-np.sort(-tiles, axis=-1), axis=-1)  # sums of the m largest
        any_order = top[..., 1:].sum(-1)
        if M.rowsum_depth is not None:  # a tree of known depth: each term under <= D partial sums
            any_order = np.minimum(any_order, min(M.rowsum_depth, w) * top[..., -1])
        within += any_order.sum(-1)
        t0 += w * n
    adds = L[..., 1:].sum(-1) + (change[..., 1:] * L[..., :-1]).sum(-1)
    return M.u_w * within + M.u_l * adds + M.u_lconv * L[..., -1]


def _logit_sides(lg, M: _Model):
    """(below, above): computed - exact logit in [-below, above] per key (either may be negative: an interval
    off centre). The worst case lg.wc on both sides, or, where the tensor-core dot's steps were evaluated on the
    data (lg.mma_sides: one-sided parts of a truncating accumulation), those in place of the dot's symmetric
    majorant, plus the argument's roundings (wc - dot_wc):
    - operands that enter the dot exactly (u_in = 0): dot_wc is the accumulation's alone;
    - fp32 operands truncated to tf32 as the H100 does (lg.conv, sec. 6a): the conversion's logit error is known
      with its sign, conv_j, up to its floor (subnormal operands): the interval is conv_j +- the rest.
    The known FMA-chain logits (fp32 ieee, lg.known_sides): the dot's and c's error known, conv_j +- its floor and
    the product's, bias add's and shift's roundings (no wider than wc on either side)."""
    if lg.known_sides is not None:  # the known FMA-chain logits (fp32 ieee, Precision.ieee_fma_chain)
        return lg.known_sides
    if lg.mma_sides is None or lg.dot_wc is None:
        return lg.wc, lg.wc
    arg = np.maximum(lg.wc - lg.dot_wc, 0.0)
    neg, pos = lg.mma_sides
    if not M.u_in:
        return np.minimum(neg + arg, lg.wc), np.minimum(pos + arg, lg.wc)
    if lg.conv is None or lg.conv_floor is None:
        return lg.wc, lg.wc
    return neg + arg + lg.conv_floor - lg.conv, pos + arg + lg.conv_floor + lg.conv


def _tile_p_interval(s, sides, order: _TileOrder, M: _Model, vis=None):
    """An interval [lo, hi] (float64, keys in their own order) that holds every key's computed P~_j =
    exp2(S2_j - m_t) as the kernel rounds it into the operand format: m_t the computed running max after key j's
    tile t (the online softmax of a known tile order, an unmasked row), in natural units within
    [max_{k seen} (s_k - below_k), max_{k seen} (s_k + above_k)], (below, above) = _logit_sides (which also hold
    the subtraction's rounding); the subtraction rounded once more (u |x|, charged again: sound, tiny), exp2 with
    relative error eps_exp, the float64 exp with 2^-50. vis (a masked query block's order, bounds.md sec. 6c): the
    masked keys are outside the running max and their P~ is 0 exactly ([0, 0])."""
    below, above = sides
    lo_t, hi_t = _tile_frames(s, sides, order, vis)
    so, bo, ao = order.apply(s), order.apply(below), order.apply(above)
    x_hi = so + ao - np.repeat(lo_t, order.sizes, axis=-1)
    x_lo = so - bo - np.repeat(hi_t, order.sizes, axis=-1)
    x_hi = x_hi + M.u_w * np.abs(x_hi)
    x_lo = x_lo - M.u_w * np.abs(x_lo)
    hi = np.exp(x_hi) * (1.0 + M.eps_exp) * (1.0 + 2.0**-50)
    lo = np.exp(x_lo) * (1.0 - M.eps_exp) * (1.0 - 2.0**-50)
    if vis is not None:
        seen = order.apply(vis)
        lo, hi = np.where(seen, lo, 0.0), np.where(seen, hi, 0.0)
    return order.undo(lo), order.undo(hi)


def _p_rounding_on_data(A, p_rho, vf):
    """|sum_j A_j rho_j v_jc|, rho_j = RN(P~_j) / P~_j - 1 the rounding of P~ into the operand format (the first
    order of P's rounding in O; l sums the unrounded P~), evaluated on the data (bounds.md sec. 6): P~_j's
    interval (_tile_p_interval) is ~2^-16 wide, an fp16 ulp 2^-10, so its rounded value is known for almost
    every key and rho_j with its sign (p_rho = (centre c, half-width h), common._rounding_on_data); the keys
    whose interval holds a rounding boundary have c = 0, h = u_p. Bound: |sum_j A_j c_j v_jc| +
    sum_j A_j h_j |v_jc| + the float64 evaluation of the first sum, gamma_{Nk+1}(2^-53) sum_j A_j |c_j| |v_jc|.
    (Delta contracts the same sum with dO: v_jc -> dP_j.)"""
    centre, half = p_rho
    return _signed_sum_bound(A * centre, A * half, vf, A.shape[-1] + 1)


def _pv_mma_error(A, vf, ends, mma):
    """_mma_steps_error of the products A_j v_jc (keys in visiting order) for every row and column c."""
    Nq, Nk = A.shape[-2:]
    dv = vf.shape[-1]
    out = np.zeros((*np.broadcast_shapes(A.shape[:-1], vf.shape[:-2] + (1,))[:-1], Nq, dv))
    for r in _rows_chunks(Nq, Nk, dv, budget=1 << 20):
        t = A[..., r, None, :] * np.swapaxes(vf, -1, -2)[..., None, :, :]  # (..., rows, dv, Nk)
        out[..., r, :] = _mma_steps_error(t, ends, mma)
    return out


def _signed_logit_conversion(A, lg, vf, o):
    """|sum_j A_j e_j (v_jc - O_c)| for the exact conversion errors e_j of the logits (lg.conv): the first-order
    effect on O, signed (bounds.md sec. 6a), plus its float64 evaluation error
    gamma_{Nk+2}(2^-53) (sum_j A_j |e_j| |v_jc| + sum_j A_j |e_j| |O_c|)."""
    Ac = A * lg.conv
    aAc = np.abs(Ac)
    g = float(gamma(A.shape[-1] + 2, 2.0**-53))
    return (np.abs(Ac @ vf - Ac.sum(-1)[..., None] * o)
            + g * (aAc @ np.abs(vf) + aAc.sum(-1)[..., None] * np.abs(o)))


def _v_conversion(A, vf):
    """|sum_j A_j (v~_jc - v_jc)| for V truncated to tf32 as the H100 does (exact, sec. 6a), plus the
    subnormal v (flushed or truncated: |v| each) and the float64 evaluation; None if V is not fp32 values."""
    from .logits import _fp32_exact, tf32_truncated

    if not _fp32_exact(vf):
        return None
    tiny = 2.0**-126
    av = np.abs(vf)
    dv = np.where(av < tiny, 0.0, tf32_truncated(vf) - vf)
    g = float(gamma(A.shape[-1] + 1, 2.0**-53))
    return np.abs(A @ dv) + A @ (av * (av < tiny)) + g * (A @ np.abs(dv))


def _ln2_error(fmt: str) -> float:
    """Relative error of the constant ln 2 as the kernel uses it (kernels/tiles.py LN2, a float64 literal,
    in the working format `fmt`): |fl(LN2) - ln 2| / ln 2, known, + 2^-53 for the literal itself."""
    ln2 = math.log(2.0)
    stored = float(np.float32(ln2)) if fmt == "float32" else ln2
    return abs(stored - ln2) / ln2 + 2.0**-53


def _identical_keys(kf):
    """Group ids (..., Nk) of bit-identical key rows per head, or None when every key is distinct. Keys with
    identical operands go through identical operations (the q.k dot, its roundings, the conversion, P's
    rounding within a tile): their errors are not independent, so the random model applies to groups."""
    flat = np.ascontiguousarray(kf, dtype=np.float64).reshape(-1, *kf.shape[-2:])
    ids, dup = [], False
    for x in flat:  # rows as opaque byte strings: bit-identical, one sort
        _, inv = np.unique(x.view(np.dtype((np.void, 8 * x.shape[-1]))).reshape(-1), return_inverse=True)
        inv = inv.reshape(-1)
        dup = dup or len(np.unique(inv)) < len(inv)
        ids.append(inv)
    return np.stack(ids).reshape(kf.shape[:-1]) if dup else None


def _group_sums(X, g):
    """sum over the keys of each group: X (..., Nk, c) with group ids g (Nk,) -> (..., G, c). One stable sort
    and a segmented sum: O(Nk) per row, where a dense one-hot product costs O(Nk G) (a few thousand groups
    of duplicated fp16 keys at N_k = 64k took minutes)."""
    order = np.argsort(g, kind="stable")
    gs = g[order]
    starts = np.flatnonzero(np.r_[True, gs[1:] != gs[:-1]])
    return np.add.reduceat(np.take(X, order, axis=-2), starts, axis=-2)


def _grouped_dev(W, groups, vf, o):
    """sum_g (sum_{j in g} W_ij |v_jc - O_ic|)^2: the variance proxy of sum_j W_ij delta_j (v_jc - O_ic) when
    the delta_j of one group may be equal (or dependent in any way; |delta_j| <= 1 each), independent across
    groups. With singleton groups it is sum_j W_ij^2 (v_jc - O_ic)^2."""
    lead = np.broadcast_shapes(W.shape[:-2], vf.shape[:-2], o.shape[:-2])
    Nq, Nk = W.shape[-2:]
    dv = vf.shape[-1]
    g = np.broadcast_to(groups, (*lead, Nk)).reshape(-1, Nk)
    Wf = np.broadcast_to(W, (*lead, Nq, Nk)).reshape(-1, Nq, Nk)
    vff = np.broadcast_to(vf, (*lead, Nk, dv)).reshape(-1, Nk, dv)
    of = np.broadcast_to(o, (*lead, Nq, dv)).reshape(-1, Nq, dv)
    out = np.zeros((len(g), Nq, dv))
    for h in range(len(g)):
        for r in _rows_chunks(Nq, Nk, dv, budget=1 << 20):
            X = Wf[h, r, :, None] * np.abs(vff[h][None] - of[h, r, None, :])  # (rows, Nk, dv)
            out[h, r] = (_group_sums(X, g[h]) ** 2).sum(-2)
    return out.reshape(*lead, Nq, dv)


def _runs(sizes):
    """[(width, count)] of consecutive equal tile widths."""
    out = []
    for w in sizes:
        if out and out[-1][0] == w:
            out[-1][1] += 1
        else:
            out.append([w, 1])
    return [tuple(x) for x in out]


def _step_ends(sizes, k_step: int):
    """Key positions (in visiting order, tiles of widths `sizes`) after which the accumulator is rounded
    (each MMA/FMA step: the last key of each k_step group within each tile) and after which each tile
    ends (the rescale acc * alpha)."""
    ends, tile_ends = [], []
    t0 = 0
    for w in sizes:
        t1 = t0 + w
        ends.extend(range(min(t0 + k_step, t1) - 1, t1 - 1, k_step))
        ends.append(t1 - 1)
        tile_ends.append(t1 - 1)
        t0 = t1
    return np.unique(np.asarray(ends)), np.asarray(tile_ends)


def _chain_steps(A, vf, ends, tile_ends, blocked: bool):
    """The exact values the P.V chain rounds, keys in visiting order, per block of rows r: yields (r, X, S_end)
    with X (..., rows, steps, dv) the partial sums of A_j v_jc at the product steps `ends` and S_end
    (..., rows, T, dv) the whole partial sums at the tile ends. recursive (tl.dot(p, v, acc)): a product step
    rounds the running partial sum, each tile end the rescale. blocked (acc * alpha + tl.dot(p, v)): a product
    step rounds the tile's own chain, whose partial sums start at the tile; each tile end rounds the whole
    partial sum twice, the addition into the accumulator and the rescale (the last tile's rescale, which
    never happens, counted too)."""
    Nq, Nk = A.shape[-2:]
    dv = vf.shape[-1]
    ends, tile_ends = np.asarray(ends), np.asarray(tile_ends)
    starts = np.concatenate([[0], tile_ends[:-1] + 1])
    tile_start = starts[np.searchsorted(tile_ends, ends)]  # the first key of each product step's tile
    for r in _rows_chunks(Nq, Nk, dv, budget=1 << 20):
        S = np.cumsum(A[..., r, :, None] * vf[..., None, :, :], axis=-2)  # (..., rows, Nk, dv)
        X = S[..., ends, :]
        if blocked:
            S0 = np.concatenate([np.zeros_like(S[..., :1, :]), S], axis=-2)  # S0[t]: the sum before key t
            X = X - S0[..., tile_start, :]
        yield r, X, S[..., tile_ends, :]


def _chain_shape(A, vf):
    """(..., Nq, dv): the shape of a per-entry sum over the P.V chain's steps."""
    return (*np.broadcast_shapes(A.shape[:-1], vf.shape[:-2] + (1,))[:-1], A.shape[-2], vf.shape[-1])


def _partial_abs_sums(A, vf, ends, tile_ends, products: int, blocked: bool = False):
    """sum over the accumulation steps s of |X_s| (_chain_steps; each product step counted `products` times,
    each tile end once, twice when blocked), X_s = C_s O + F_s the exact value step s rounds: the chain's
    first-order error sum_s delta_s X_s is <= u sum_s |X_s| whatever the signs of the delta_s (bounds.md
    sec. 6, "The accumulation is charged on the data")."""
    out = np.zeros(_chain_shape(A, vf))
    for r, X, S_end in _chain_steps(A, vf, ends, tile_ends, blocked):
        out[..., r, :] = products * np.abs(X).sum(-2) + (2 if blocked else 1) * np.abs(S_end).sum(-2)
    return out


@dataclass(frozen=True)
class _SecondOrderSums:
    """What the accumulation's second order needs of the steps (_second_order_partial_sums)."""

    wx: np.ndarray  # sum_r w_r |X_r| per row and column
    w: float  # sum_r w_r
    n: int  # the number of roundings N
    n_b: int  # bound on sum_r B_r / B: the steps that the summands' perturbation reaches


def _second_order_partial_sums(A, vf, ends, tile_ends, blocked: bool = False):
    """The accumulation's second-order remainder on the data (bounds.md sec. 6, "Second-order terms"), one
    rounding per step: sum over the rounding steps r of w_r |X_r| per column, X_r the exact value step r
    rounds (the partial sum of A_j v_jc that _chain_steps yields: from the tile start for a blocked chain's
    steps) and w_r the number of later roundings whose input carries step r's error; with W = sum_r w_r and
    N, the number of roundings. recursive: every later step (one chain). blocked: a chain step reaches the
    later steps of its tile's chain and every tile-end step from its tile's addition on; a tile-end step (the
    addition, then the rescale, per tile end; the last tile's rescale counted too) the later tile-end steps.
    Each |X_r| is evaluated in float64; its evaluation error (<= 2 gamma_{Nk+1}(2^-53) sum_j A_j |v_jc|) is
    the caller's. Returns _SecondOrderSums."""
    ends, tile_ends = np.asarray(ends), np.asarray(tile_ends)
    T, n_e = len(tile_ends), len(ends)
    tile = np.searchsorted(tile_ends, ends)  # the tile of each product step
    if blocked:
        first = np.searchsorted(tile, np.arange(T))  # index of each tile's first step
        later_in_tile = np.bincount(tile, minlength=T)[tile] - 1 - (np.arange(n_e) - first[tile])
        w_prod = later_in_tile + 2.0 * (T - tile)
        w_tile = 4.0 * T - 3.0 - 4.0 * np.arange(T)  # (2T - 1 - 2t) + (2T - 2 - 2t)
    else:  # time order: by key position, a tile end's rescale after the product step that ends there
        rank = np.arange(n_e) + tile  # product step i comes after the rescales of the earlier tiles
        w_prod = (n_e + T - 1 - rank).astype(np.float64)
        w_tile = (n_e + T - 1 - (np.searchsorted(ends, tile_ends) + 1 + np.arange(T))).astype(np.float64)
    out = np.zeros(_chain_shape(A, vf))
    for r, X, S_end in _chain_steps(A, vf, ends, tile_ends, blocked):
        out[..., r, :] = (np.abs(X) * w_prod[:, None]).sum(-2) + (np.abs(S_end) * w_tile[:, None]).sum(-2)
    # steps whose input carries a summand's perturbation: every step (recursive); a chain step only its own
    # tile's summands (sum_t n_t B_t <= max_t n_t B), a tile-end step all
    n_b = (np.bincount(tile, minlength=T).max() + 2 * T) if blocked else n_e + T
    return _SecondOrderSums(wx=out, w=float(w_prod.sum() + w_tile.sum()), n=n_e + (2 if blocked else 1) * T,
                            n_b=int(n_b))


def _accumulation_remainder(Ao, vo, ends, tile_ends, blocked, M: _Model, Av, A_absv):
    """Bound on sum_j A_j (1 + b_j) nu_j v_jc minus its first-order part (the P.V accumulation's and operand
    conversion's linear terms, modelled in var/det), for one rounding u per accumulation step on the data
    (bounds.md sec. 6, "Second-order terms", accumulation). B = sum_j A_j |beta_j| |v_jc| bounds the
    perturbation of the summands (weights and operand conversion); the steps r, their exact values X_r
    and counts after them w_r come from _second_order_partial_sums; Ao, vo: A and V with the keys in visiting
    order."""
    u = M.u_w
    rho = (1.0 + M.u_pv) * (1.0 + M.u_in) - 1.0
    B = (1.0 + rho) * Av - A_absv
    st = _second_order_partial_sums(Ao, vo, ends, tile_ends, blocked)
    slack = 2.0 * float(gamma(Ao.shape[-1] + 1, 2.0**-53)) * A_absv  # float64 evaluation of each |X_r|
    grow = 1.0 + float(gamma(st.n, u))  # 1 + gamma_N: the errors of the errors (sec. 6)
    return ((rho - M.u_pv - M.u_in) * A_absv + rho * (Av - A_absv) + st.n_b * u * B
            + grow * u * u * (st.wx + st.w * (B + slack)))


def _tile_frames(s, sides, order: _TileOrder, vis=None):
    """(lo_t, hi_t): an interval on the computed running max m_t after each tile t (visiting order, natural units)
    of an unmasked row: m_t = max over the keys seen of the computed logits, each within [s_k - below_k,
    s_k + above_k] (_logit_sides), so lo_t = max_{k seen} (s_k - below_k), hi_t = max_{k seen} (s_k + above_k)
    (the same interval _tile_p_interval uses). vis (a masked query block's order): the keys seen are the visible
    ones (a masked logit is -inf in the kernel's max); -inf before the row's first visible key (an empty acc)."""
    below, above = sides
    st = order.starts
    so, bo, ao = order.apply(s), order.apply(below), order.apply(above)
    up, down = so + ao, so - bo
    if vis is not None:
        seen = order.apply(vis)
        up, down = np.where(seen, up, -np.inf), np.where(seen, down, -np.inf)
    hi_t = np.maximum.accumulate(np.maximum.reduceat(up, st, axis=-1), axis=-1)
    lo_t = np.maximum.accumulate(np.maximum.reduceat(down, st, axis=-1), axis=-1)
    return lo_t, hi_t


def _rn_residue(xc, xw, half_g):
    """RN(K g + x) - (K g + x) for any integer K and any x in [xc - xw, xc + xw] (float64 arrays; g = 2 half_g a
    power of two, the grid): g (round(x / g) - x / g), known where x / g's interval lies inside one
    (k - 1/2, k + 1/2) (no jump, no tie: the ties' direction depends on K's parity). Returns (known, ce, he):
    the error lies in [ce - he, ce + he] where known. xc, xw must hold their own float64 roundings (the caller
    widens xw); the scaling by 1 / g is exact, frac = rc - k is exact (Sterbenz: |rc - k| <= 1/2 + ulp, k an
    integer) where |rc| < 2^50, and a rounded rc + 1/2 that reaches the next integer leaves |frac| > 1/2:
    not known."""
    ig = 0.5 / half_g
    rc = xc * ig
    rw = xw * ig
    frac = rc - np.floor(rc + 0.5)
    known = (np.abs(frac) + rw < 0.5 * (1.0 - 2.0**-50)) & (np.abs(rc) < 2.0**50)
    return known, -2.0 * half_g * frac, 2.0 * half_g * rw * (1.0 + 2.0**-50)


def _fma_chain_on_data(Ao, vo, p_lo, p_hi, b_o, F_lo, F_hi, change, sizes, u: float, grow, zero=None):
    """A bound on |sum_s delta_s X_s|, the first-order error of a recursive fp32 FMA chain (one rounding to nearest
    per key, acc <- RN(acc + P~_j v_jc), the product exact; each tile t >= 1 first rescales acc <- RN(acc alpha_t)),
    evaluated on the data (bounds.md sec. 6, "The FMA chain's roundings on the data"; bench/NOTES.md, "Round to
    nearest along O", the recipe). Not a model of round to nearest: each step's error is either known to an
    interval from the data or charged a worst case.

    Units. Row i, column c, keys j in visiting order (Ao, vo; tile t(j)). The kernel's accumulator in tile t is
    in the frame F_t = l exp(m - m_t) (m_t the computed running max after tile t): its exact counterpart is
    F_t X_j, X_j = sum_{k <= j} A_k v_kc (the exact normalized partial sum), F_t in [F_lo_t, F_hi_t]
    (_tile_frames). Key j's summand is x_j = P~_j v_jc with P~_j in [p_lo_j, p_hi_j] (_tile_p_interval: the
    frame's uncertainty, the logit error, the subtraction and exp2), and P~_j = F_t A_j (1 + beta_j),
    |beta_j| <= b_j (b_wc: the key's weight error, with the alphas up to tile t a subset of b_wc's).

    Distance of the computed values from the exact ones, normalized (tau_j = t_j / F_t, t_j = acc_{j-1} + x_j
    before the rounding): the summand x_j / F_t differs from A_j v_jc by <= A_j b_j |v_jc|; each rounding r errs
    by <= u |t_r| <= u (|X_r| + D_{r-1} + w_r), so D_j <= (1 + u)^N (W_j + u R_j), W_j = sum_{k <= j} A_k b_k |v_kc|,
    R_j = the sum of |X_r| over the roundings r up to j (the keys, and the rescales that can change acc: alpha
    != 1, `change`); the rescales' own relative errors multiply what was accumulated, their product over the tiles
    <= g_alpha; grow >= g_alpha (1 + 2 N u) (N u <= 1) and the float64 evaluation of the nonnegative cumsums
    (relative gamma_{2^24}(2^-53) < 2^-28). E_j = grow (W_j + u R_j) + (grow u N + 1) slack, slack =
    (gamma_{N_k+1}(2^-53) + 2^-48) sum_k A_k |v_kc| >= |X_j(float64) - X_j| (the cumsum and A's own evaluation),
    bounds |tau_j - X_j(float64)| and the same for the rounded acc_j; gap_j = |X_j| - E_j.

    Step j (key j, in tile t), three cases:
    - binade: |t_j| in [F_lo gap_j, F_hi (|X_j| + E_j)]; where both ends lie in one binade [2^e, 2^(e+1))
      (e >= -126: normal), RN's grid is g = 2^(e - 23) and |e_j| = |RN(t_j) - t_j| <= g / 2, so
      |delta_j X_j| = |e_j| |X_j| / |t_j| <= (g / 2) (|X_j| + slack) / (F_lo gap_j);
    - grid and residue: where moreover the computed acc_{j-1} is a multiple of g (|acc_{j-1}| >= F_lo (|X_{j-1}|
      - E_j) >= 2^e: the same or a higher binade; or acc = 0 before the first key), t_j = K g + x_j and
      e_j = g (round(x_j / g) - x_j / g), a function of x_j alone (RN is odd: t_j's sign does not matter); where
      x_j / g's interval [rho_c - rho_w, rho_c + rho_w] lies inside (k - 1/2, k + 1/2) (no jump, no tie), e_j is
      in ce +- he, ce = -g (rho_c - k), he = g rho_w. Then delta_j X_j = nu_j X_j / tau_j with nu_j = e_j / F_t in
      ce (1/F_lo + 1/F_hi) / 2 +- (he / F_lo + |ce| (1/F_lo - 1/F_hi) / 2) and |X_j / tau_j - 1| <= E_j / gap_j:
      these steps enter signed, |sum c_j| + sum (half-width_j + (|ce| + he) / F_lo E_j / gap_j);
    - otherwise u |X_j| (the worst case charged before).
    The rescales: exact (0) where alpha = exp2(0) = 1 certainly (`change` False), else u |X| of the partial sum
    they round. Each |X| carries the slack; the sums their float64 evaluation (2^-28 relative).

    Ao, p_lo, p_hi, b_o: (..., Nq, Nk) in visiting order; vo (..., Nk, dv); F_lo, F_hi, change: (..., Nq, T);
    grow: (..., Nq). zero (..., Nq, Nk) visiting order, or None: the keys whose P~_j is 0 exactly (masked: sec. 6c),
    whose step acc + 0 v_jc = acc rounds nothing (charged 0, not a residue). Returns that bound (..., Nq, dv) and sum_s |X_s| over the keys and every tile end
    (_partial_abs_sums of this chain, from the same cumsum). Vectorized over (row, column) chunks of ~2^17 entries, keys along
    the contiguous axis; the residue is evaluated on the few entries whose x interval is narrower than g."""
    Nq, Nk = Ao.shape[-2:]
    dv = vo.shape[-1]
    T = len(sizes)
    lead = np.broadcast_shapes(Ao.shape[:-2], vo.shape[:-2], F_lo.shape[:-2])
    flat = lambda x, tail: np.broadcast_to(x, (*lead, *tail)).reshape(-1, *tail)  # noqa: E731
    A_, pl, ph_, bb = (flat(x, (Nq, Nk)) for x in (Ao, p_lo, p_hi, b_o))
    Fl, Fh, chg = (flat(x, (Nq, T)) for x in (F_lo, F_hi, change))
    gr = flat(grow, (Nq,))
    zz = None if zero is None else flat(zero, (Nq, Nk))
    vT = np.ascontiguousarray(np.swapaxes(flat(vo, (Nk, dv)), -1, -2))  # (H, dv, Nk)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    tile = np.repeat(np.arange(T), sizes)
    g64 = float(gamma(Nk + 1, 2.0**-53)) + 2.0**-48
    ev = 1.0 + 2.0**-28  # float64 evaluation of sums of nonnegative terms (< 2^24 of them)
    n_r = Nk + T
    out = np.zeros((len(A_), Nq, dv))
    worst = np.zeros((len(A_), Nq, dv))
    tile_ends = starts + np.asarray(sizes) - 1
    cb = max(1, min(dv, (1 << 17) // Nk))
    for h in range(len(A_)):
        absvT = np.abs(vT[h])
        for i in range(Nq):
            a = A_[h, i]
            iFl = 1.0 / Fl[h, i][tile]  # per key (visiting order): 1 / F_lo, 1 / F_hi of its tile
            iFh = 1.0 / Fh[h, i][tile]
            Flo_k = Fl[h, i][tile] * (1.0 - 2.0**-50)  # the float64 products below must not round onto a
            Fhi_k = Fh[h, i][tile] * (1.0 + 2.0**-50)  # binade's edge: 2^-50 relative covers them
            ab = a * bb[h, i]
            pm = 0.5 * (pl[h, i] + ph_[h, i])
            pw = 0.5 * (ph_[h, i] - pl[h, i]) * (1.0 + 2.0**-50) + 2.0**-48 * pm  # holds the float64 roundings
            nz = None if zz is None else ~zz[h, i]  # the keys whose step can round (P~_j != 0)
            ch = chg[h, i, 1:]
            rs = starts[1:][ch]  # tiles whose rescale can round: at their first key, the previous partial sum
            for c0 in range(0, dv, cb):
                cs = slice(c0, min(dv, c0 + cb))
                v, av = vT[h, cs], absvT[cs]  # (cb, Nk)
                slack = g64 * (av @ a)  # (cb,)
                X = np.cumsum(a * v, axis=-1)
                aX = np.abs(X)
                inc = ab * av
                inc += u * aX if nz is None else u * aX * nz
                resc = aX[:, rs - 1]  # the rescale rounds the partial sum at the previous tile's end
                inc[:, rs] += u * resc
                E = np.cumsum(inc, axis=-1)
                E *= gr[h, i] * ev
                E += ((gr[h, i] * u * n_r + 1.0) * slack)[:, None]
                gap = aX - E
                lo = Flo_k * gap
                hi = aX + E
                hi *= Fhi_k
                blo = lo.view(np.int64) >> 52  # sign and exponent field: equal fields = one binade
                bhi = hi.view(np.int64) >> 52
                binade = (blo == bhi) & (blo >= 1023 - 126) & (blo < 2047)  # positive (a sign bit differs), normal, finite
                half_g = ((np.where(binade, blo, 1023 + 24) - 24) << 52).view(np.float64)  # g / 2 = 2^(e - 24)
                q = half_g * iFl / gap  # |e_j| / |t_j| <= q
                np.minimum(q, u, out=q)
                charge = np.where(binade, q, u) * aX
                if nz is not None:  # acc + 0 v = acc: no rounding
                    charge *= nz
                total = charge.sum(-1) + u * resc.sum(-1)
                # the residue, where x's interval is narrower than a grid step and the previous acc on the grid
                ci, kj = np.nonzero(binade & (pw * av < half_g) & (True if nz is None else nz))
                # the previous acc on the grid: >= 2^e = 2^24 g / 2 (the first key: acc = 0, on every grid)
                prev = aX[ci, np.maximum(kj - 1, 0)] - E[ci, kj]
                grid = (kj == 0) | (Flo_k[kj] * prev >= half_g[ci, kj] * 2.0**24)
                ci, kj = ci[grid], kj[grid]
                csum = np.zeros(len(v))
                extra = np.zeros(len(v))
                if len(ci):
                    known, ce, he = _rn_residue(pm[kj] * v[ci, kj], pw[kj] * av[ci, kj], half_g[ci, kj])
                    ci, kj, ce, he = ci[known], kj[known], ce[known], he[known]
                if len(ci):
                    il, ih = iFl[kj], iFh[kj]
                    cen = ce * (0.5 * (il + ih))
                    ace = np.abs(ce)
                    margin = he * il + ace * (0.5 * (il - ih)) + (ace + he) * il * E[ci, kj] / gap[ci, kj]
                    # replace the step's charge by its margin; the centre enters signed
                    extra = np.bincount(ci, weights=margin - charge[ci, kj], minlength=len(v)).astype(np.float64)
                    csum = np.bincount(ci, weights=cen, minlength=len(v)).astype(np.float64)
                    extra = extra + 2.0**-28 * np.bincount(ci, weights=np.abs(cen), minlength=len(v))
                out[h, i, cs] = (np.abs(csum) + extra + total + u * n_r * slack) * ev
                worst[h, i, cs] = aX.sum(-1) + aX[:, tile_ends].sum(-1)
    return out.reshape(*lead, Nq, dv), worst.reshape(*lead, Nq, dv)

def _fma_on_data(s, lg, M: _Model, order: _TileOrder, A, vf, b_wc, m, l, T: int, ka: "_KnownArguments | None" = None,
                 vis=None):
    """_fma_chain_on_data for unmasked rows of a known tile order (fp32 FMA chain): the frames' intervals
    F_t = l exp(m - m_t), P~'s interval, the rescales that can change acc, and the growth factor; inf (no claim)
    for rows where a P~ may be subnormal or flushed (p_lo < 2^-120); with sum_s |X_s| (_partial_abs_sums, from
    the same pass): (bound, sum). None for subnormal V (an FMA may flush it) and N_k >= 2^23.
    ka (Precision.exp_argument "fma", bounds.md sec. 6b), in its rows `ok`: the running max m_t is known, so the
    frame F_t = l exp(m - ln 2 m2_t) is a number (its float64 evaluation in the margin), P~_j = ex2(x_j) is within
    2^x_j (1 +- eps_exp), beta_j = exp(e_frame_j) (1 + eps) - 1 relative to F_t A_j, and the rescales that can
    change acc are those with a_t != 0.
    A masked query block's order (order.masked, bounds.md sec. 6c): a masked key's P~_j is 0 exactly, so its FMA
    acc <- RN(acc + 0 v_jc) = acc rounds nothing (`zero`, charged 0); before the row's first visible key acc = 0 and
    the frames are not needed (set to 1: every step there is exact, no rescale can change acc); the rescale
    arguments telescope from the first tile with a visible key."""
    u = M.u_w
    masked = vis is not None and order.masked
    sides = _logit_sides(lg, M)
    lo_t, hi_t = _tile_frames(s, sides, order, vis if masked else None)
    F_lo = l[..., None] * np.exp(m[..., None] - hi_t) * (1.0 - 2.0**-48)  # float64 exp and product: a few ulps
    F_hi = l[..., None] * np.exp(m[..., None] - lo_t) * (1.0 + 2.0**-48)
    p_lo, p_hi = (order.apply(x) for x in _tile_p_interval(s, sides, order, M, vis if masked else None))
    change = _tile_changes(s, lg.wc, vis if masked else np.ones(s.shape, dtype=bool), order, M.alpha_exact_at_zero)
    b_o = order.apply(b_wc)
    if ka is not None:
        ok = ka.ok[..., None]
        mk = math.log(2.0) * ka.m2  # natural units; float64: <= 2^-52 |.| each, the exp's argument <= 2^-51 (|m| + |mk|)
        slack = 2.0**-48 + 2.0**-50 * (np.abs(m[..., None]) + np.abs(mk))
        F = l[..., None] * np.exp(m[..., None] - mk)
        F_lo = np.where(ok, F * (1.0 - slack), F_lo)
        F_hi = np.where(ok, F * (1.0 + slack), F_hi)
        px = np.exp2(ka.x)  # numpy's exp2: within a few float64 ulps
        p_lo = np.where(ok, px * (1.0 - M.eps_exp) * (1.0 - 2.0**-50), p_lo)
        p_hi = np.where(ok, px * (1.0 + M.eps_exp) * (1.0 + 2.0**-50), p_hi)
        b_o = np.where(ok, order.apply(_exp_err(np.abs(ka.e_frame) + ka.floor, M.eps_exp)), b_o)
        if ka.ex2_ok is not None:  # the values known (Precision.ex2_known): P~_j exactly, e_frame holds ex2's error
            known = ka.ex2_ok[..., None]
            p_lo, p_hi = np.where(known, ka.px, p_lo), np.where(known, ka.px, p_hi)
            b_o = np.where(known, order.apply(_exp_err(np.abs(ka.e_frame) + ka.floor, 0.0)), b_o)
        change = np.where(ok, ka.change, change)
    # the rescales' relative errors: exp2 (eps_exp) of an argument m_{t-1} - m_t rounded (u |.|, log2 units);
    # the arguments telescope to m_T - m_1 <= hi_T - lo_1 (natural units)
    lo_first = lo_t[..., 0]
    zero = None
    if masked:  # the frames from the first tile with a visible key on (sec. 6c)
        before = ~np.isfinite(lo_t)
        F_lo, F_hi = np.where(before, 1.0, F_lo), np.where(before, 1.0, F_hi)
        lo_first = np.min(np.where(before, np.inf, lo_t), axis=-1)
        zero = ~order.apply(vis)
    g_alpha = (1.0 + M.eps_exp) ** T * np.exp(u * (hi_t[..., -1] - lo_first)) * (1.0 + 2.0**-40)
    grow = g_alpha * (1.0 + 2.0 * (A.shape[-1] + T) * u)
    av = np.abs(vf)
    if A.shape[-1] >= 2**23 or np.any((av > 0) & (av < 2.0**-126)):  # (N u <= 1 and the 2^-28 below need < 2^23)
        return None
    out, worst = _fma_chain_on_data(order.apply(A), _keys_in_order(vf, order), p_lo, p_hi, b_o,
                                    F_lo, F_hi, change, order.sizes, u, grow, zero)
    small = (p_lo if zero is None else np.where(zero, 1.0, p_lo)).min(-1) < 2.0**-120
    return np.where(small[..., None], np.inf, out), worst


@dataclass(frozen=True)
class _KnownArguments:
    """The exponent arguments of an unmasked row as the kernel computes them under Precision.exp_argument "fma"
    (bounds.md sec. 6b), keys in their own order unless said; rows where `ok` is False claim nothing."""

    ok: np.ndarray  # (..., rows): every value below in fp32's normal range (or 0) and finite
    e: np.ndarray  # (..., rows, Nk): key j's total exponent error, ln 2 (x_j + sum_{later t} a_t + m2_T) - s_j
    e_frame: np.ndarray  # the same in its own tile's frame: ln 2 (x_j + m2_t(j)) - s_j
    floor: np.ndarray  # |.| bound on the float64 evaluation of e and e_frame (and of s)
    c: np.ndarray  # (..., rows, Nk): the rescales after key j's tile that can differ from 1 (a_t != 0)
    x: np.ndarray  # (..., rows, Nk) visiting order: the fp32 argument of ex2, base 2
    m2: np.ndarray  # (..., rows, T): the running max after each tile, base 2 (fp32 values)
    a: np.ndarray  # (..., rows, T): the rescale arguments fl32(m2_{t-1} - m2_t) (0 for the first tile)
    change: np.ndarray  # (..., rows, T): alpha_t can differ from 1 (and acc is not empty)
    # Precision.ex2_known: the values P~_j = ex2(x_j) (visiting order) and the rows whose every ex2 value is a
    # normal fp32 (nothing flushed), where e, e_frame hold ex2's own errors too and c is 0; None / all False else
    px: np.ndarray | None = None
    ex2_ok: np.ndarray | None = None


def _lse_interval(ka: "_KnownArguments", order: "_TileOrder", lse, M: _Model, depth: int):
    """|stored LSE - LSE| for rows whose every P~ and alpha is known (Precision.lg2_known; bench/lse_interval.py
    measured it first). In the kernel's units (running max m2_T, base 2) l64 = sum_t fl32rowsum_t prod_{t' > t} alpha_t'
    through fp64 merges, each tile's fp32 rowsum within gamma_D of its exact sum of known P~ (D = the tree depth of the
    compiled rowsum), the merges and this float64 evaluation within (4T + 2 N_k) 2^-53: l64 in [L (1 - e), L (1 + e)].
    fl32 (round to nearest), lg2 (the measured function, non-decreasing on the normal range) and the two roundings of
    z = fl32(fl32(m2_T + lg2(l32)) fl32(ln 2)) are monotone, so z lies between its values at the two ends; the bound is
    the larger distance from the exact LSE (float64: within 2^-48 (|LSE| + 1)). Returns an _LseInterval: stored - exact
    LSE lies in [lo, hi], the stored LSE is one of the fp32 numbers in [z_lo, z_hi], fl32(l) in [l_lo, l_hi]; NaN where
    an end leaves fp32's normal range."""
    from flashcheck.proofs import ex2_model, lg2_model

    p = ka.px  # visiting order, exact fp32 values
    alpha = ex2_model.ex2(ka.a)
    L = np.zeros(p.shape[:-1])
    for t, (j0, w) in enumerate(zip(order.starts, order.sizes)):
        rs = p[..., j0:j0 + w].sum(-1)
        L = rs if t == 0 else L * alpha[..., t] + rs
    T, Nk = len(order.sizes), p.shape[-1]
    u = M.u_w
    e = float(gamma(depth, u)) + (4 * T + 2 * Nk + 8) * 2.0**-53
    ln2 = float(np.float32(math.log(2.0)))
    m2 = ka.m2[..., -1]

    def z(l64):
        with np.errstate(over="ignore", invalid="ignore"):
            l32 = l64.astype(np.float32).astype(np.float64)
            ok = np.isfinite(l32) & (l32 >= 2.0**-126)
            y = (m2 + lg2_model.lg2(np.where(ok, l32, 1.0))).astype(np.float32).astype(np.float64)
            return np.where(ok, (y * ln2).astype(np.float32).astype(np.float64), np.nan)

    l_lo, l_hi = L * (1.0 - e), L * (1.0 + e)
    z_lo, z_hi = z(l_lo), z(l_hi)
    slack = 2.0**-48 * (np.abs(lse) + 1.0)
    with np.errstate(invalid="ignore", over="ignore"):
        return _LseInterval(lo=z_lo - lse - slack, hi=z_hi - lse + slack, z_lo=z_lo, z_hi=z_hi,
                            l_lo=l_lo.astype(np.float32).astype(np.float64),
                            l_hi=l_hi.astype(np.float32).astype(np.float64))


@dataclass(frozen=True)
class _LseInterval:
    """_lse_interval per row: the stored LSE minus the exact one lies in [lo, hi]; the stored LSE is one of the fp32
    numbers z_lo <= z <= z_hi; the fp32 l the kernel divides by and takes log2 of lies in [l_lo, l_hi] (RN32 of
    l64's interval: round to nearest is monotone)."""

    lo: np.ndarray
    hi: np.ndarray
    z_lo: np.ndarray
    z_hi: np.ndarray
    l_lo: np.ndarray
    l_hi: np.ndarray


def _known_accumulator(ka: "_KnownArguments", order: "_TileOrder", vf):
    """The kernel's fp32 accumulator at the end of the key loop, exactly, for rows whose every P~ and alpha is known
    (Precision.ex2_known; bounds.md sec. 8, "Delta from the known accumulator"): per tile in visiting order
    acc <- fl32(acc alpha_t) (mul.f32: the product of two fp32 is exact in float64, rounded once), then
    tl.dot(P~, V, acc) as one ascending fp32 FMA chain continuing from acc (Precision.ieee_fma_chain; measured,
    bench/probe_fma_acc.py): the same steps _fma_chain_on_data bounds, here evaluated (every operand is a known fp32
    number). Returns (acc (..., rows, dv), ok (..., rows)): ok where every product, partial sum and rescaled acc
    stays in fp32's normal range or is 0 (no subnormal, whose flushing would differ)."""
    from flashcheck.proofs import ex2_model
    from flashcheck.proofs.fma_chain import F32_MIN_NORMAL, fma_chain_dot

    p = ka.px
    vo = _keys_in_order(vf, order)
    alpha = ex2_model.ex2(ka.a)
    acc = np.zeros(p.shape[:-1] + (vo.shape[-1],))
    ok = np.ones(p.shape[:-1], dtype=bool)
    for t, (j0, w) in enumerate(zip(order.starts, order.sizes)):
        acc = (acc * alpha[..., t, None]).astype(np.float32).astype(np.float64)
        ok &= ((acc == 0.0) | (np.abs(acc) >= F32_MIN_NORMAL)).all(-1)
        acc, normal = fma_chain_dot(p[..., j0:j0 + w], vo[..., j0:j0 + w, :], return_normal=True, acc0=acc)
        ok &= normal.all(-1)
    return acc, ok & np.isfinite(acc).all(-1)


def _alpha_arguments(m2):
    """a_t = fl32(m2_{t-1} - m2_t) per tile t >= 1 (one rounding: fma_chain.fma_step), 0 for the first tile
    (its alpha rescales an empty accumulator)."""
    from flashcheck.proofs.fma_chain import fma_step

    return np.concatenate([np.zeros_like(m2[..., :1]), fma_step(m2[..., :-1], -m2[..., 1:])], axis=-1)


def _known_arguments(qf, kf, s, sc, order: _TileOrder, ragged_from: int | None, M: _Model, chain=None,
                     vis=None) -> _KnownArguments:
    """Every exponent argument of the rows, exactly (Precision.exp_argument "fma", bounds.md sec. 6b): qk_j the
    ascending fp32 FMA chain, c = qk_scale2; s2_j = fl32(qk_j c) (qk_j c exact in float64, rounded once); m2_t the
    running max of s2 over the tiles in visiting order; x_j = fl32(qk_j c - m2_t) (one rounding) on full tiles,
    fl32(s2_j - m2_t) on the masked tile (keys >= ragged_from); a_t = fl32(m2_{t-1} - m2_t) (fma_chain.fma_step:
    exact two-sum, round-to-odd, one rounding). Key j's weight as computed is ex2(x_j) prod_{t > t(j)} ex2(a_t), so
    its exponent error against exp(s_j - m) is e_j (above) up to ex2's relative errors. chain: (qk, normal), the FMA
    chain's fp32 values and fma_chain_dot's normal-range mask (logits._fma_logit_error, computed once with the logits;
    None: computed here).

    floor (float64 evaluation): E2 = (x + S) + m2_T with S a suffix sum of <= T terms errs by <= gamma_{T+2}(2^-53)
    (|x| + sum |a| + |m2_T|); ln 2 (math.log, <= 2^-53 relative) times it and the product's rounding: 2^-51 ln 2 |E2|;
    s = scale q.k in float64 (any order): gamma_{d+2}(2^-53) scale sum |q||k|; the last subtraction 2^-52 |e|:
    the sum, taken twice.

    vis (a masked query block's order, order.unfused its two-rounding keys; bounds.md sec. 6c): a masked key's s2 is
    -inf in the kernel (tl.where), outside the running max, its x -inf and ex2(x) = 0; its e, e_frame, floor are 0
    (it carries no weight). Before the row's first visible key m2 is -inf and the kernel's alpha = ex2(-inf) = 0
    rescales an empty acc and l (0 either way): a_t is taken as 0 there (alpha 1, no change), as for a first tile."""
    from flashcheck.proofs.fma_chain import fma_chain_dot, fma_step, kernel_qk_scale2

    if vis is not None:
        return _known_arguments_masked(qf, kf, s, sc, order, M, chain, vis)
    kT = np.swapaxes(kf, -1, -2)
    qk, normal = fma_chain_dot(qf, kT, return_normal=True) if chain is None else chain
    pr = qk * kernel_qk_scale2(sc)  # exact
    with np.errstate(over="ignore", invalid="ignore"):
        s2 = pr.astype(np.float32).astype(np.float64)
    st = order.starts
    so, po = order.apply(s2), order.apply(pr)
    m2 = np.maximum.accumulate(np.maximum.reduceat(so, st, axis=-1), axis=-1)
    unfused = order.apply(np.arange(s.shape[-1]) >= ragged_from)
    mk = np.repeat(m2, order.sizes, axis=-1)
    x = np.where(unfused, fma_step(-mk, so), fma_step(-mk, po))
    a = _alpha_arguments(m2)
    first = np.arange(m2.shape[-1]) == 0
    return _arguments_errors(qf, kT, s, sc, order, M, normal & np.isfinite(pr), so, x, m2, a, first, None)


def _known_arguments_masked(qf, kf, s, sc, order: _TileOrder, M: _Model, chain, vis) -> _KnownArguments:
    """_known_arguments on a masked query block's rows (its docstring, vis)."""
    from flashcheck.proofs.fma_chain import fma_chain_dot, fma_step, kernel_qk_scale2

    kT = np.swapaxes(kf, -1, -2)
    qk, normal = fma_chain_dot(qf, kT, return_normal=True) if chain is None else chain
    pr = qk * kernel_qk_scale2(sc)  # exact
    with np.errstate(over="ignore", invalid="ignore"):
        s2 = pr.astype(np.float32).astype(np.float64)
    seen = order.apply(vis)
    so, po = np.where(seen, order.apply(s2), -np.inf), np.where(seen, order.apply(pr), 0.0)
    m2 = np.maximum.accumulate(np.maximum.reduceat(so, order.starts, axis=-1), axis=-1)
    mk = np.repeat(m2, order.sizes, axis=-1)
    mk0 = np.where(np.isfinite(mk), mk, 0.0)  # a visible key's tile has a finite max; the others are masked below
    x = np.where(order.unfused, fma_step(-mk0, np.where(seen, so, 0.0)), fma_step(-mk0, po))
    x = np.where(seen, x, -np.inf)
    prev = np.concatenate([np.full_like(m2[..., :1], -np.inf), m2[..., :-1]], axis=-1)
    first = ~np.isfinite(prev)  # nothing seen before tile t: alpha rescales an empty acc (exactly 0 either way)
    a = np.where(first, 0.0, _alpha_arguments(np.where(np.isfinite(m2), m2, 0.0)))
    fine = (normal & np.isfinite(pr)) | ~vis
    return _arguments_errors(qf, kT, s, sc, order, M, fine, so, x, m2, a, first, seen)


def _arguments_errors(qf, kT, s, sc, order: _TileOrder, M: _Model, fine, so, x, m2, a, first, seen) -> _KnownArguments:
    """The exponent errors e, e_frame, their float64 floor and the rescales of _known_arguments from the kernel's
    fp32 values (so = s2, x, m2, a in visiting order; fine: the keys whose FMA chain stayed normal and finite; first:
    the tiles whose alpha rescales an empty accumulator; seen: the visible keys of a masked block, None: every key)."""
    from flashcheck.proofs.fma_chain import F32_MIN_NORMAL

    T = m2.shape[-1]
    mk = np.repeat(m2, order.sizes, axis=-1)
    change = ~first & ((a != 0.0) if M.alpha_exact_at_zero else True)
    later = np.cumsum(change[..., ::-1], axis=-1)[..., ::-1] - change  # changes in tiles after t
    S = np.cumsum(a[..., ::-1], axis=-1)[..., ::-1] - a  # sum of a over the tiles after t
    Sabs = np.abs(a).sum(-1, keepdims=True)
    rep = lambda y: np.repeat(y, order.sizes, axis=-1)  # noqa: E731
    mT = m2[..., -1:]
    ln2 = math.log(2.0)
    E2 = (x + rep(S)) + mT
    so_exact = order.apply(s)
    e = ln2 * E2 - so_exact
    e_frame = ln2 * (x + mk) - so_exact
    absqk = sc * (np.abs(qf) @ np.abs(kT))
    g = float(gamma(T + 2, 2.0**-53))
    floor = 2.0 * (ln2 * g * (np.abs(x) + Sabs + np.abs(mT)) + 2.0**-51 * ln2 * (np.abs(E2) + np.abs(x + mk))
                   + float(gamma(qf.shape[-1] + 2, 2.0**-53)) * order.apply(absqk)
                   + 2.0**-52 * (np.abs(e) + np.abs(e_frame)))
    tiny = lambda y: (y != 0.0) & (np.abs(y) < F32_MIN_NORMAL)  # noqa: E731 (flush to zero would differ)
    px = ex2_ok = None
    later_c = rep(later).astype(np.float64)
    if M.ex2_known:  # the values too (flashcheck.proofs.ex2_model, Precision.ex2_known): ex2's own errors, signed
        from flashcheck.proofs import ex2_model

        px, pa = ex2_model.ex2(x), ex2_model.ex2(a)  # a_0 = 0 and every a_t = 0 give exactly 1
        if seen is not None:  # a masked key: ex2(-inf) = 0 exactly (tl.where), no flush
            px = np.where(seen, px, 0.0)
        big = px >= F32_MIN_NORMAL
        ex2_ok = (big if seen is None else big | ~seen).all(-1) & (pa >= F32_MIN_NORMAL).all(-1)  # nothing flushed
        with np.errstate(divide="ignore", invalid="ignore"):
            # rho = ln(ex2(y) / 2^y), the relative error as an exponent; float64: math.log, the product by ln 2 and
            # the difference each within 2^-52 of |ln ex2(y)| + ln 2 |y| (<= 2^-51 (ln 2 |y| + 1e-6)), taken twice
            rho, rho_a = np.log(px) - ln2 * x, np.log(pa) - ln2 * a
            if seen is not None:
                rho = np.where(seen, rho, 0.0)
            rho_a = np.where(change, rho_a, 0.0)  # alpha_t = 1 exactly where a_t = 0 (not a change)
        R = np.cumsum(rho_a[..., ::-1], axis=-1)[..., ::-1] - rho_a  # the later tiles' rescales, as S
        e = np.where(ex2_ok[..., None], e + rho + rep(R), e)
        e_frame = np.where(ex2_ok[..., None], e_frame + rho, e_frame)
        f_rho = 2.0 * 2.0**-51 * (ln2 * (np.abs(x) + Sabs) + 1e-6 * (T + 1))
        floor = np.where(ex2_ok[..., None], floor + f_rho + float(gamma(T + 2, 2.0**-53)) * (np.abs(rho) + rep(np.abs(R))),
                         floor)
        later_c = np.where(ex2_ok[..., None], 0.0, later_c)  # no rescale's error left unknown
    if seen is not None:  # a masked key carries no weight: nothing to charge
        e, e_frame, floor = (np.where(seen, y, 0.0) for y in (e, e_frame, floor))
        later_c = np.where(seen, later_c, 0.0)
    fin = np.isfinite(e) & np.isfinite(e_frame) & np.isfinite(floor)
    ok = fine.all(-1) & (fin & ~tiny(so) & ~tiny(x)).all(-1) & ~tiny(a).any(-1) & np.isfinite(m2[..., -1])
    if ex2_ok is not None:
        ex2_ok = ex2_ok & ok
    return _KnownArguments(ok=ok, e=order.undo(e), e_frame=order.undo(e_frame), floor=order.undo(floor),
                           c=order.undo(later_c), x=x, m2=m2, a=a, change=change, px=px, ex2_ok=ex2_ok)


_OWN = "own"  # _forward_rows: the rows' order from the precision (_tile_order), as for an unmasked problem


def _forward_rows(p, M: _Model, precision, kind, lam, qf, kf, vf, s, vis, sc, has_bias, explain=False,
                  groups=None, ragged_from: int | None = None, order=_OWN) -> _ForwardRows:
    """The forward analysis of a block of query rows (s, vis, qf restricted to those rows). With
    `explain` (probabilistic kind only) it also returns the named terms of the bounds (ForwardTerms).
    ragged_from: the first key of the kernel's masked (ragged) tile, from the block_k it was given (before
    Precision.fitted): Precision.exp_argument "fma" computes that tile's arguments in two roundings; None (a band,
    a window or a dense mask: which tiles are masked is the kernel's per query block): nothing claimed.
    order: the rows' visiting order where the caller states it (one query block of a masked head, _query_block_orders:
    a masked _TileOrder, or None for order-free); by default the precision's unmasked order (_tile_order)."""
    m, A, l, lse, empty = _softmax_parts(s, vis)
    o = A @ vf
    d, Nk = p.d, p.Nk
    u = M.u_w

    lg = _logit_errors(qf, kf, s, m, vis, sc, M, d, has_bias, detailed=kind == "probabilistic")
    if kind == "probabilistic" and lg.wc_known is not None:  # the known FMA-chain logits: their own majorant
        lg = dataclasses.replace(lg, wc=lg.wc_known, lin=lg.lin_known)
    # the computed shift m_hat <= max_j (s_j + e_j) may exceed m by `excess`
    excess = np.max(np.where(vis, s - m[..., None] + lg.wc, 0.0), axis=-1, initial=0.0)
    # Rescales (sec. 5): key j's weight is multiplied, in acc and in l alike, by the computed alphas of
    # the c_j later tiles that moved the max. Their arguments telescope: sum |m_old - m_new| over
    # them <= m_hat - s_hat_j, each subtraction rounded (u); each exp2 has relative error eps_exp.
    # Equal factors in numerator and denominator do NOT cancel between keys: a weight perturbation.
    block_path = order is not _OWN
    if not block_path:
        order = _tile_order(Nk, precision.block_k, precision.tile_order)
    # the order is known for these rows: an unmasked row's, or a masked query block's own (sec. 6c)
    known = order is not None and (order.masked or vis.all())
    c = np.where(vis, _rescale_changes(s, lg.wc, vis, precision.block_k, M.alpha_exact_at_zero, order), 0.0)
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
    eps_j = M.eps_exp  # ex2's relative error per key (0 where its value is known: Precision.ex2_known, below)
    # what the backward reads (Delta, sec. 8) stays the charge without the known arguments: _ForwardParts below
    b_wc0, Ab_wc0, Ab1_wc0, b_lin0, det0, e_key0, c0 = b_wc, Ab_wc, Ab1_wc, b_lin, lg.det + alpha_det, e_key, c
    ka = det_logit_known = None
    if (kind == "probabilistic" and M.exp_fma and known and not has_bias and lg.conv is not None and Nk
            and (ragged_from is not None or order.unfused is not None)):
        # the exponent arguments known (Precision.exp_argument "fma", bounds.md sec. 6b): key j's total exponent
        # error e_j with its sign (the logits', the product's, the shift's and the rescale arguments' roundings);
        # c_j the rescales that certainly change; only ex2's relative errors and the float64 floor stay unsigned
        ka = _known_arguments(qf, kf, s, sc, order, ragged_from, M, lg.qk[4][3:5], vis if order.masked else None)
        ok = ka.ok[..., None] & vis
        e_known = np.abs(ka.e) + ka.floor
        c = np.where(ok, ka.c, c)
        e_key = np.where(ok, e_known, e_key)
        if ka.ex2_ok is not None:  # Precision.ex2_known: ex2's errors are in e with their signs, none left unknown
            eps_j = np.where(ok & ka.ex2_ok[..., None], 0.0, M.eps_exp)
        eps_key = (1.0 + eps_j) ** (1.0 + c) - 1.0
        b_wc = np.where(vis, _exp_err(e_key, eps_key), 0.0)
        b_lin = np.where(ok, e_known + (1.0 + c) * eps_j, b_lin)
        alpha_det = np.where(ok, c * eps_j, alpha_det)
        det_logit_known = np.where(ok, ka.floor, np.nan)  # replaces det_logit below where known
        lg = dataclasses.replace(lg, conv=np.where(ok, ka.e, lg.conv), conv_floor=np.where(ok, ka.floor, lg.conv_floor))
        Ab_wc, Ab1_wc, _ = _weighted_exp_err(A, b_wc, e_key, eps_key, vis, log_a)

    # accumulation (sec. 4): P.V through the accumulator (recursive: over all keys, per product or per
    # MMA k-step), T rescales acc*alpha (RN); l: block_k-wide fp32 sum + 2 roundings per tile (RN)
    T = max(1, -(-Nk // precision.block_k))
    n_pv = _dot_steps(M, Nk, precision.block_k, products=M.pv_products)
    # the tile's rowsum: any order, or a tree of known depth (Precision.rowsum_depth)
    w_l = min(Nk, precision.block_k) if M.rowsum_depth is None else min(Nk, precision.block_k, M.rowsum_depth)
    n_l = w_l + 2 * T
    nu_wc = (1 + M.u_pv) * (1 + M.u_in) * (1 + gamma(n_pv, M.u_dacc)) * (1 + gamma(T, u)) - 1
    nu_lin = M.u_pv + M.u_in + n_pv * M.u_dacc + T * u
    if M.u_l == u and M.u_lconv == 0.0:  # l in the working format: every key through n_l roundings at u
        mu_wc = float(gamma(n_l, u))
        mu_lin = n_l * u
    else:  # a wider l: block_k at u (the tile's rowsum), 2T at u_l (merges, rescales), one conversion at the end
        w = w_l
        mu_wc = float((1 + gamma(w, u)) * (1 + gamma(2 * T, M.u_l)) * (1 + M.u_lconv) - 1)
        mu_lin = w * u + 2 * T * M.u_l + M.u_lconv
    # l's first-order error on these data (probabilistic kind: worst case, as l's summands are all positive)
    mu_det = _l_sum_error(A, vis, lg.wc, s, order, M, mu_lin)

    # absolute floors: ftz of exp results, subnormal rounding of P into the operand format; l is
    # divided by exp(excess) (a key far below m does not count with its own, possibly huge, error)
    n_vis = vis.sum(axis=-1)
    l_eff = l * np.exp(-excess)

    absv = np.abs(vf)
    W_b = Ab_wc
    W_lin = A * b_lin
    # the operand conversion known exactly (tf32 truncation, sec. 6a): its one-sided bound leaves the
    # logit's det and enters signed, sum_j A_j e_j (v_j - O), below; the floor (subnormals) stays unsigned
    conv = kind == "probabilistic" and lg.conv is not None
    det_logit = lg.det - lg.det_conv + lg.conv_floor if conv else lg.det
    if det_logit_known is not None:
        det_logit = np.where(np.isnan(det_logit_known), det_logit, det_logit_known)
    W_det = A * (det_logit + alpha_det + eps_j)
    W_vis = vis.astype(np.float64)
    (dev_b, dev_lin, dev_det, dev_vis, dev_A), (dev_AA,) = _weighted_dev(
        [W_b, W_lin, W_det, W_vis, A], [A * A], vf, o)
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
    def lower(e_key, c, eps):  # D / l's lower side for these key errors (above), and its inverse
        w_low = np.where(vis, np.exp(-e_key) * (1 - eps) ** (1.0 + c), 0.0)
        den_low = (A * w_low).sum(axis=-1) * (1 - mu_wc) - n_vis * M.floor_w / l_eff
        with np.errstate(divide="ignore", invalid="ignore"):
            inv = np.where(empty, 1.0, np.where(den_low > 0, 1.0 / np.maximum(den_low, 1e-300), np.inf))[..., None]
        return den_low, inv

    den_low, inv_den = lower(e_key, c, eps_j)
    inv_den0 = inv_den if ka is None else lower(e_key0, c0, M.eps_exp)[1]

    p_rho = None
    if kind == "worst_case":
        pre = num_wc * inv_den
    else:
        # first-order part: random (Azuma) + deterministic; the rest is the majorant remainder.
        # Round to nearest is only modelled as random where the summands are not systematic (sec. 6):
        # every first-order term sum_s delta_s X_s is split into its part along O (X_s = C_s O, bounded
        # worst-case: u |O| sum_s C_s <= n u |O|) and the fluctuation around O (random). Constant or
        # near-constant V, uniform rows, a large mean: the systematic part is then all deterministic.
        num_lin = dev_lin + nu_lin * A_absv + mu_lin * oabs
        # num_wc - num_lin, split: the P.V accumulation's majorant part (nu_wc Av - nu_lin A|v|) and the
        # rest (the weights' and l's nonlinear terms, the floors); the former may be replaced by its
        # data-evaluated bound below (sec. 6, "Second-order terms")
        rest = (dev_b - dev_lin) + (mu_wc * A1b[..., None] - mu_lin) * oabs + floors
        acc_rem = nu_wc * Av - nu_lin * A_absv
        (ri, rp), (di, dp) = _conv(M)
        rp = M.u_pv if rp else 0.0
        n_rn = (0 if M.tensor_core else n_pv) + T  # accumulation roundings to nearest
        # Masked rows and an unknown tile order: the chain's steps are not known, so its first order
        # sum_s delta_s X_s, X_s = C_s O + F_s, is charged worst case in both parts: u |O| sum_s C_s <= n u |O|
        # along O, and u sum_s |F_s| <= n u max_s |F_s| <= n u sum_j A_j |v_j - O| around it. The fluctuation
        # is NOT random under round to nearest: step_sign_o.py with one masked key (fp32 ieee, N_k = 16384)
        # was 2x over the random model of it (64 of 256 entries), which this branch used before. No part of
        # the accumulation is modelled as random any more.
        acc_c = np.full(oabs.shape, float(n_rn))  # sum_s C_s <= n
        acc_abs = n_rn * dev_A  # sum_s |F_s|; where the steps are known, sum_s |X_s| on the data (below)
        if n_rn and known:  # the tiles in visiting order (unmasked, or a masked query block's own: sec. 6c)
            ends, tile_ends = _step_ends(order.sizes, M.k_step)
            Ao, vo = order.apply(A), _keys_in_order(vf, order)
            # The chain's first order charged on the data, u sum_s |X_s|, in place of the order-free worst case
            # of the fluctuation and the along-O charge (acc_c): round to nearest is systematic when the
            # partial sums climb and fall back (V = +a then -a(1+eps) over uniform rows: O ~ 0, nothing along
            # O, the fluctuation one-signed per half; bench/adversaries/step_sign_o.py, 7x over the random
            # model at N_k = 65536)
            fma = (not M.tensor_core and M.k_step == 1 and M.pv_products == 1 and M.u_dacc == u and M.recursive
                   and not M.u_in)
            # an fp32 FMA chain: the same first order with each step's rounding evaluated on the data where its
            # grid and residue are certain (_fma_chain_on_data), beside sum_s |X_s| from the same pass; both
            # bounds hold, so their minimum does
            on_data = _fma_on_data(s, lg, M, order, A, vf, b_wc0, m, l, T, ka, vis) if fma else None
            if on_data is None:
                acc_abs = _partial_abs_sums(Ao, vo, ends, tile_ends, M.pv_products, blocked=not M.recursive)
            else:
                acc_abs = np.minimum(on_data[1], on_data[0] / u)
            acc_c = 0.0 * acc_c
            if not M.tensor_core and M.k_step == 1 and M.pv_products == 1 and M.u_dacc == u:
                # one rounding (u) per step of the exact partial sums X_r: the second order evaluated on them
                acc_rem = np.minimum(acc_rem, _accumulation_remainder(
                    Ao, vo, ends, tile_ends, not M.recursive, M, Av, A_absv))
        remainder = np.maximum(rest, 0.0) + np.maximum(acc_rem, 0.0)
        if groups is not None:  # bit-identical keys make identical errors: Azuma over groups (sec. 6)
            dev_AA = _grouped_dev(A, groups, vf, o)
        # P's rounding into the operand format, sum_j A_j delta_j v_jc (l sums the unrounded P): worst case,
        # u_p sum_j A_j |v_jc|. Round to nearest is a function of P's residue modulo the operand's ulp, which
        # the logits set: bench/adversaries/p_residue_o.py makes the keys of V = +1 round up and those of -1
        # round down (fp16, emulation: 0.68 / 0.40 / 0.48 of the random model's bound at N_k 4096 / 16384 /
        # 65536), so its random model (rp^2 dev_AA, along O rp |O|) is gone (bounds.md sec. 6).
        # the one random term: the inputs' rounding into the operand format (u_in, rounded); no part of the logit
        # error is modelled as random (logits.py, bounds.md sec. 3)
        var = ri**2 * dev_AA
        p_round = rp * A_absv
        p_trunc = (M.u_pv if dp else 0.0) * 0.5 * (A_absv + oabs)  # P truncated (tf32): one-sided, in `tr` below
        fmt = _DOT_OPERAND[precision.dot]
        if rp or (dp and M.conv_exact):  # rounded to nearest (fp16, bf16) or truncated as the H100 does (tf32)
            if known and not precision.p_split and fmt in _SIGNIFICAND_BITS:
                # the same first order evaluated on the data: each key's rounding known with its sign
                lo, hi = _tile_p_interval(s, _logit_sides(lg, M), order, M, vis if order.masked else None)
                p_rho = _rounding_on_data(lo, hi, fmt, M.u_pv, truncate=not rp)[:2]
                on_data = _p_rounding_on_data(A, p_rho, vf)
                if rp:
                    p_round = np.minimum(p_round, on_data)
                else:
                    p_trunc = np.minimum(p_trunc, on_data)
            elif rp:
                p_rho = (np.zeros_like(A), np.full_like(A, rp))
            else:
                p_rho = (np.full_like(A, -0.5 * M.u_pv), np.full_like(A, 0.5 * M.u_pv))
        det = dev_det + (ri + acc_c * u + mu_det[..., None]) * oabs + p_round + u * acc_abs
        tc = (n_pv * M.u_dacc if M.tensor_core else 0.0) * A_absv
        if M.mma is not None and M.recursive and known and not precision.p_split:
            # the P.V chain's tensor-core steps evaluated on the data (as for the logit dot, logits.py):
            # products A_j v_jc in visiting order, k_step per step within each tile; the computed terms and
            # partial sums differ from these by <= E (second order, added)
            ends, _ = _step_ends(order.sizes, M.k_step)
            E = Av * (1 + nu_wc) - A_absv
            tc = np.minimum(tc, _pv_mma_error(order.apply(A), _keys_in_order(vf, order), ends, M.mma)
                            + n_pv * (M.u_dacc + 2.0 ** (-22 - M.mma.extra_bits)) * E)
        det = det + tc
        tr = 0.0 * oabs
        if M.trunc:  # sum_j A_j v_jc theta_jc, theta in [-(u_p + u_in), 0]: one-sided (bounds.md sec. 6)
            v_conv = _v_conversion(A, vf) if conv else None
            tr = p_trunc + (0.0 if v_conv is not None else di) * 0.5 * (A_absv + oabs)
            if v_conv is not None:
                tr = tr + v_conv
        det = det + tr
        conv_o = _signed_logit_conversion(A, lg, vf, o) if conv else 0.0 * oabs
        det = det + conv_o
        # the worst case always holds, so it caps the probabilistic bound (concentrated rows)
        pre = np.minimum((lam * np.sqrt(var) + det + remainder) * inv_den, num_wc * inv_den)
        if explain:
            (x_logdet, x_alpha, x_exp), _ = _weighted_dev([A * det_logit, A * alpha_det, A * eps_j], [], vf, o)
            o_terms = OTerms(operand_random=lam * np.sqrt(var),
                           logit_det=x_logdet, rescale_alpha=x_alpha,
                           exp=x_exp, operand_along_o=ri * oabs + p_round,
                           accumulation_drift=acc_c * u * oabs + u * acc_abs,
                           l_sum=mu_det[..., None] * oabs, tensor_core_acc=tc, truncation=tr,
                           operand_conversion=conv_o, remainder=remainder)
            o_terms = _map_terms(o_terms, lambda x: x * inv_den)
            o_capped = (lam * np.sqrt(var) + det + remainder) >= num_wc
    # final division acc / l (fp32 O, what Delta uses with delta_from="fp32") and the store
    err32 = pre + M.eps_div * (oabs + pre)
    err = err32 + M.u_out * (oabs + err32) + M.floor_out
    err = np.where(empty[..., None], 0.0, err)
    if explain:
        o_terms = dataclasses.replace(o_terms, division=M.eps_div * (oabs + pre),
                                      output=M.u_out * (oabs + err32) + M.floor_out)

    # LSE = ln2 (m2 + log2 l): |log(l_hat / l)| (the rescales are in b: their arguments telescope,
    # sum |dm| <= m - s_j, not (T - 1) u R), the rounding of the sum and of the ln2 product (u each), the
    # constant ln2 in the working format (its exact relative error, _ln2_error, not u), and the log2 error.
    x_lse = A1b * (1 + mu_wc) - 1.0 + n_vis * M.floor_w / l_eff  # l_hat / l <= 1 + x_lse
    lse_low = den_low  # l_hat / l >= lse_low
    with np.errstate(divide="ignore", invalid="ignore"):
        log_wc = np.maximum(np.log1p(x_lse), np.where(lse_low > 0, -np.log(np.maximum(lse_low, 1e-300)), np.inf))
    lse_abs = np.abs(np.where(empty, 0.0, lse))
    log2l = np.abs(np.log2(l))
    log_err = M.eps_lg2 * (1.0 + log2l) * math.log(2.0)
    eta = _ln2_error(precision.accumulate)

    def roundings(e_l):
        """The two roundings, each by half an ulp of the rounded value's binade (_half_ulp, <= u |value|): y = m2 +
        log2 l in base 2, |y ln 2| <= |LSE| + e_l (l's part of the error) + log2's; then z = fl(y) fl(ln 2); and
        the constant's relative error. Returns (r_y, r_z, all three): r_y, r_z are round-to-nearest, which the
        backward takes as random over rows (_ForwardParts.lse_rn)."""
        ln2 = math.log(2.0)
        y_up = (lse_abs + e_l + log_err) / ln2
        r_y = _half_ulp(y_up, precision.accumulate) * ln2 * (1.0 + eta)
        r_z = _half_ulp((lse_abs + e_l + log_err + r_y) * (1.0 + eta), precision.accumulate)
        return r_y, r_z, r_y + r_z + eta * y_up * ln2

    if kind == "worst_case":
        r_y, r_z, lse_round = roundings(log_wc)
        rounding = lse_round + log_err
        lse_err = log_wc + rounding
        lse_det = lse_err
        capped = np.ones(lse_err.shape, dtype=bool)
    else:
        lin = (A * b_lin).sum(axis=-1) + mu_lin
        # majorant series of |log(l_hat / l)|: -log(1 - x+) (its linear part is lin)
        with np.errstate(divide="ignore", invalid="ignore"):
            series = np.where(x_lse < 1.0, -np.log1p(-np.minimum(x_lse, 0.999999)), np.inf)
        remainder = np.maximum(series - lin, 0.0)
        # no random part: the logit errors are charged worst case in det (logits.py, bounds.md sec. 3)
        det = (A * (det_logit + alpha_det + eps_j)).sum(axis=-1) + mu_det  # l's sum: systematic, worst case
        if lg.mma_sides is not None:  # the logits' tensor-core error by sign: sum_j A_j e_j in [-sum A neg, sum A pos]
            sym = (A * lg.det_mma).sum(-1)
            det = det - sym + np.minimum(sym, np.maximum(*((A * x).sum(-1) for x in lg.mma_sides)))
        if conv:  # first order sum_j A_j e_j, e_j exact; its float64 evaluation: gamma_{Nk}(2^-53) sum A |e|
            Ac = A * lg.conv
            lse_conv = np.abs(Ac.sum(-1)) + float(gamma(Nk + 1, 2.0**-53)) * np.abs(Ac).sum(-1)
            det = det + lse_conv
        r_y, r_z, lse_round = roundings(np.minimum(det + remainder, log_wc))
        rounding = lse_round + log_err
        lse_err = np.minimum(det + remainder, log_wc) + rounding
        capped = det + remainder >= log_wc
        lse_det = np.where(capped, log_wc, det + remainder) + rounding
        if explain:
            lse_logit_det = (A * det_logit).sum(-1)
            if lg.mma_sides is not None:
                sym = (A * lg.det_mma).sum(-1)
                lse_logit_det = lse_logit_det - sym + np.minimum(sym, np.maximum(*((A * x).sum(-1) for x in lg.mma_sides)))
            lse_terms = LseTerms(logit_det=lse_logit_det,
                                 operand_conversion=lse_conv if conv else 0.0 * lse_abs,
                             rescale_alpha=(A * alpha_det).sum(-1), exp=(A * eps_j).sum(-1),
                             l_sum=mu_det + 0.0 * lse_abs, remainder=remainder,
                             lse_rounding=lse_round, log2=log_err + 0.0 * lse_abs)
    nan_rows = np.full(lse.shape, np.nan)
    lse_iv = (nan_rows, nan_rows, np.zeros(lse.shape, dtype=bool), nan_rows, nan_rows)
    acc_known = None
    if kind == "probabilistic" and M.lg2_known and ka is not None and ka.ex2_ok is not None:
        # the stored LSE as an interval of known values (Precision.lg2_known, bounds.md sec. 7): a bound on its error
        # whatever the model above says, so the smaller of the two holds; the backward takes the interval signed
        iv = _lse_interval(ka, order, lse, M, precision.rowsum_depth)
        lo_off, hi_off = iv.lo, iv.hi
        iv_ok = ka.ex2_ok & ~empty & np.isfinite(lo_off) & np.isfinite(hi_off)
        lse_err = np.where(iv_ok, np.minimum(lse_err, np.maximum(hi_off, -lo_off)), lse_err)
        lse_iv = (np.where(iv_ok, lo_off, np.nan), np.where(iv_ok, hi_off, np.nan), iv_ok,
                  np.where(iv_ok, iv.z_lo, np.nan), np.where(iv_ok, iv.z_hi, np.nan))
        # and the accumulator the kernel divides by l: known exactly (bounds.md sec. 8, Delta from it)
        acc, acc_ok = _known_accumulator(ka, order, vf)
        acc_ok &= iv_ok & np.isfinite(iv.l_lo) & np.isfinite(iv.l_hi) & (iv.l_lo >= 2.0**-126)
        acc_known = (np.where(acc_ok[..., None], acc, 0.0), np.where(acc_ok, iv.l_lo, np.nan),
                     np.where(acc_ok, iv.l_hi, np.nan), acc_ok)
    if block_path and acc_known is None and kind == "probabilistic" and M.lg2_known:
        # a masked head's blocks join along the rows (_cat_rows): one without the known accumulator claims no row
        acc_known = (np.zeros(o.shape), nan_rows, nan_rows, np.zeros(lse.shape, dtype=bool))
    lse_err = np.where(empty, 0.0, lse_err)
    lse_rn = (np.where(empty, 0.0, r_y), np.where(empty, 0.0, r_z))

    o_shape = (p.B, p.Hq, s.shape[-2], vf.shape[-1])
    final = (err32 if precision.delta_from == "fp32" else err) - np.where(empty[..., None], 0.0, pre)
    extra = {}
    if explain:
        extra = dict(o_terms=_map_terms(o_terms, lambda x: np.broadcast_to(x, o_shape).copy()),
                     o_capped=np.broadcast_to(o_capped, o_shape).copy(), lse_terms=lse_terms, lse_capped=capped)
    return _ForwardRows(**extra, err=np.broadcast_to(err, o_shape).copy(), lse_err=lse_err, A=A, o=o, lse=lse, m=m,
                        empty=empty,
                        parts=_ForwardParts(b_wc=b_wc0, Ab_wc=Ab_wc0, Ab1_wc=Ab1_wc0, b_lin=b_lin0, det=det0,
                           inv_den=inv_den0, qk=lg.qk, l=l,
                           nu_wc=nu_wc, nu_lin=nu_lin,
                           mu_wc=mu_wc, mu_lin=mu_lin, floors=floors,
                           final=final, n_pv=n_pv, T=T, n_l=n_l,
                           lam=lam,
                           lse_det=np.where(empty, 0.0, lse_det),
                           l_sum_det=np.where(empty, 0.0, mu_det), lse_capped=capped | empty, lse_rn=lse_rn,
                           lse_iv=lse_iv, acc_known=acc_known,
                           p_rho=p_rho))


@dataclass(frozen=True)
class OTerms:
    """The probabilistic O bound split into its terms (each (B, Hq, Nq, dv), in units of O; bounds.md sec. 6).
    The random term (``operand_random``) enters the bound as lam sqrt(variance), the others add; the whole is
    capped by the worst case where that is smaller (ForwardTerms.o_capped). No part of the logit error is modelled
    as random (bounds.md sec. 3): it is in logit_det, operand_conversion and remainder."""

    operand_random: np.ndarray  # rounding of q, k, v into the dot operand format (u_in, rounded), around O
    logit_det: np.ndarray  # deterministic logit errors: tensor-core / tf32 truncation, the constant c
    rescale_alpha: np.ndarray  # argument roundings of the rescales alpha (telescoped) and of p's shift
    exp: np.ndarray  # exp2 relative error (ex2.approx or libm), per key
    operand_along_o: np.ndarray  # P's rounding into the operand format (worst case: u_p sum A|v|) and the inputs' along O
    accumulation_drift: np.ndarray  # accumulator roundings: u sum_s |X_s| on the data where the steps are known (fp32 FMA chain: each step evaluated on the data, _fma_chain_on_data), else along O u |O| sum_s C_s
    l_sum: np.ndarray  # the rounding of l's sum (mu |O|)
    tensor_core_acc: np.ndarray  # tensor-core accumulation steps of P.V (truncation: worst case)
    truncation: np.ndarray  # tf32 truncation of P and V (one-sided; V's exact when known)
    operand_conversion: np.ndarray  # tf32 truncation of q, k, known exactly: |sum_j A_j e_j (v_j - O)|
    remainder: np.ndarray  # second-order majorant remainder
    division: np.ndarray = None  # the final acc / l
    output: np.ndarray = None  # the store in the output dtype


@dataclass(frozen=True)
class LseTerms:
    """The probabilistic LSE bound split into its terms (each (B, Hq, Nq)); none of them random."""

    logit_det: np.ndarray
    operand_conversion: np.ndarray
    rescale_alpha: np.ndarray
    exp: np.ndarray
    l_sum: np.ndarray
    remainder: np.ndarray
    lse_rounding: np.ndarray  # gamma_3 |LSE|: m + log2 l, the product by ln 2, ln 2 itself
    log2: np.ndarray  # the log2 instruction


@dataclass(frozen=True)
class ForwardTerms:
    """forward_bound(kind="probabilistic") with its terms; *_capped: where the worst case is the bound."""

    bound: ForwardBound
    o: OTerms
    lse: LseTerms
    o_capped: np.ndarray
    lse_capped: np.ndarray


def _map_terms(terms, fn):
    return type(terms)(**{f.name: fn(getattr(terms, f.name)) for f in dataclasses.fields(terms)
                          if getattr(terms, f.name) is not None})


def forward_terms(q, k, v, *, scale=None, causal=False, window=None, mask=None, bias=None,
                  precision: Precision) -> ForwardTerms:
    """The probabilistic forward bound and its named terms (what dominates where: bench/bounds_attack.py
    --explain). Costs one more pass of weighted deviations than forward_bound."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        F = _forward_impl(q, k, v, scale, causal, window, mask, bias, precision, "probabilistic",
                          FAILURE_PROBABILITY, explain=True)
    return F.terms


def forward_bound(q, k, v, *, scale=None, causal=False, window=None, mask=None, bias=None,
                  precision: Precision, kind: str = "probabilistic") -> ForwardBound:
    """Elementwise bound on |O_kernel - O| (.o) and |LSE_kernel - LSE| (.lse) for a kernel that
    computes like `precision` on exactly these float64 inputs (proofs/bounds.md, sec. 5)."""
    return _forward(q, k, v, scale, causal, window, mask, bias, precision, kind).bound

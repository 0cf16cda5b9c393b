"""The backward's fp32 accumulations as known FMA chains (issue 8, Precision.ieee_fma_chain, bounds.md sec. 8):
under the claim, dQ = dS K over the keys and dK, dV over the query rows are each one ascending fp32 FMA chain
continuing from the accumulator (bench/probe_fma_acc.py), so the round-to-nearest model's step bounds are the
chain's own partial sums |sum_{t<=s} p_t| (plus the products' errors and the roundings so far) where that is
smaller than the tile bound |earlier tiles| + sum |p| of the tile.

The bound is checked where it matters most: products of alternating sign whose running sum stays near 0. The
ascending chain's error stays inside sum_s c_s (the accumulation's charge where its chain is not evaluated on the
data: worst case, no grouped random model since 2026-11-27b); the same products summed positives first (a kernel
that does not add them in the stated order) exceed it."""
from __future__ import annotations

import math

import numpy as np

from flashcheck.proofs.bounds.backward import _rn_accumulation_sq
from flashcheck.proofs.fma_chain import fma_chain_dot

U = 2.0**-24


def _alternating(n: int, seed: int):
    """(1, 1, 1, n) products a_1, -b_1, a_2, -b_2, ... (fp32 values near 1, b_i = a_i (1 + 1e-3 noise)) and the
    other operand 1: the ascending partial sums stay within ~1e-3 sqrt(n) of 0 or a_i."""
    rng = np.random.default_rng(seed)
    a = np.float32(1.0 + 0.5 * rng.random(n // 2)).astype(np.float64)
    b = np.float32(a * (1.0 + 1e-3 * rng.standard_normal(n // 2))).astype(np.float64)
    S = np.empty(n)
    S[0::2], S[1::2] = a, -b
    return S.reshape(1, 1, 1, n), np.ones((1, 1, n, 1))


def _chain_error(S, other, order):
    x = S[0, 0, 0][order]
    got = float(fma_chain_dot(x.reshape(1, -1), other[0, 0][order]).ravel()[0])
    return abs(got - math.fsum(x))


def _bound(S, other, chain: bool, block: int):
    acc_sq, _, det = _rn_accumulation_sq(S, other, np.zeros_like(S), U, block, np.array([[[True]]]), chain)
    assert not acc_sq.any(), "no part of the accumulation is modelled as random"
    return float(det.ravel()[0])


def test_the_chain_bound_holds_for_the_ascending_chain_and_is_sharper():
    for seed in range(4):
        S, other = _alternating(4096, seed)
        n = S.shape[-1]
        err = _chain_error(S, other, np.arange(n))
        chain, tiles = _bound(S, other, True, 64), _bound(S, other, False, 64)
        assert err <= chain, f"seed {seed}: ascending chain error {err:.3g} > chain bound {chain:.3g}"
        assert chain < 0.2 * tiles, f"seed {seed}: chain bound {chain:.3g} vs tile bound {tiles:.3g}"


def test_products_out_of_the_stated_order_exceed_the_chain_bound():
    """Positives first: the running sum climbs to ~2500 before coming back, and each step rounds at its ulp."""
    S, other = _alternating(4096, 0)
    n = S.shape[-1]
    err = _chain_error(S, other, np.r_[np.arange(0, n, 2), np.arange(1, n, 2)])
    assert err > _bound(S, other, True, 64), err

"""A kernel that states no accumulation order (tile_order "any": third-party fp32 kernels, SDPA math and efficient,
Flex on the CPU) may add dK's and dV's products over the query rows in any order, ascending included. Coherent
residues (bench/adversaries/constant_residue_rows.py: distinct products that share one residue modulo the partial
sum's ulp, so every addition rounds the same way) exceeded the grouped round-to-nearest model that such kernels' dK
and dV bounds used: 3.5x (dK) and 2.3x (dV) at N_q 1024, 2.8x / 2.4x at 2048, 3.6x / 3.2x at 4096, with the
ascending fp32 chain of the emulation. Since 2026-11-27b every chain not evaluated on the data is charged its worst
case (backward._rn_accumulation_sq, bounds.md sec. 8): the bound holds, at 0.91 / 0.73 (1024) and 0.48 / 0.47 (2048).

The same residues in O's P.V chain reach dQ through Delta (uniform rows, V's column = the coherent terms, dO = e_0,
K = 1: the exact dQ is 0, the kernel's is -scale (Delta^ - Delta)). Delta's accumulation kept the grouped model,
and dQ read the smaller of it and the known accumulator's bound: OUR kernel's emulation (every claim) was 1.86x over
at N_k 1024, 4.21x at 4096, 2.78x at 16384. Delta's accumulation is now charged its worst case too
(backward._delta_accumulation; the input: bench/adversaries/delta_residue.py): 0.989 / 0.988 / 0.995 (the known
accumulator's bound, tight).

The residues in l's sum, read through the LSE (bench/adversaries/l_residue_lse.py, 2026-11-27c): tile 0's rowsum
and every merge l + rowsum round down by ~2^-24 with distinct rowsums. A third-party precision's LSE bound is its
worst case here (0.64 at N_k 4096, 0.54 at 16384, 0.49 at 65536); one that claims l in fp64 while the kernel merges
in fp32 is exceeded 1.8x.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench", "adversaries"))


def _third_party_fp32():
    """The precision a third-party fp32 kernel declares (flashcheck/adapters.py _precision: tile_order "any")."""
    from flashcheck.adapters import _precision

    return _precision(input="float32", dot="ieee", accumulate="float32", output="float32", exp="libm",
                      block_k=64, block_q=64)


@pytest.mark.parametrize("n", [1024, 2048])
@pytest.mark.parametrize("which", ["dk", "dv"])
def test_coherent_residues_in_ascending_order_stay_within_an_any_order_bound(n, which):
    from constant_residue_rows import build_masked

    from bench.bounds_attack import run_source
    from flashcheck.proofs.bounds import backward_bound
    from flashcheck.reference.attention import attention
    from flashcheck.reference.backward import attention_backward

    x = build_masked(n, which, "none")
    q, k, v, do, mk = x.q, x.k, x.v, x.do, x.masks()
    (_, _, _, dk, dv), _ = run_source("emulation", "cpu", "float32", "ieee", q, k, v, do, **mk)
    O, L = attention(q, k, v, **mk)
    exact = attention_backward(q, k, v, O, L, do, **mk)
    got, want = (dk, exact[1]) if which == "dk" else (dv, exact[2])
    err = np.abs(got - want)
    assert err.max() > 0, "the input must make the chain err"
    for kind in ("probabilistic", "worst_case"):
        b = backward_bound(q, k, v, do, precision=_third_party_fp32(), kind=kind, **mk)
        bound = b.dk if which == "dk" else b.dv
        i = np.unravel_index(np.argmax(err / bound), err.shape)
        assert (err <= bound).all(), (f"{which} N_q {n} {kind}: error {err[i]:.3g} over the bound {bound[i]:.3g} at "
                                      f"{i} ({err[i] / bound[i]:.3g}x)")


@pytest.mark.parametrize("n", [1024, 4096])
@pytest.mark.parametrize("cancel", [False, True])
@pytest.mark.parametrize("who", ["ours", "any"])
def test_coherent_residues_through_delta_stay_within_the_dq_bound(n, cancel, who):
    from delta_residue import build

    from bench.bounds_attack import run_source
    from flashcheck.proofs.bounds import backward_bound
    from flashcheck.reference.attention import attention
    from flashcheck.reference.backward import attention_backward

    q, k, v, do = build(n, cancel)
    (_, _, dq, _, _), ours = run_source("emulation", "cpu", "float32", "ieee", q, k, v, do)
    O, L = attention(q, k, v)
    err = np.abs(dq - attention_backward(q, k, v, O, L, do)[0])
    assert err.max() > 1e-9, "Delta's coherent error must reach dQ"
    precision = ours if who == "ours" else _third_party_fp32()
    for kind in ("probabilistic", "worst_case"):
        bound = backward_bound(q, k, v, do, precision=precision, kind=kind).dq
        i = np.unravel_index(np.argmax(err / bound), err.shape)
        assert (err <= bound).all(), (f"dQ N_k {n} {who} {kind}: error {err[i]:.3g} over the bound {bound[i]:.3g} at "
                                      f"{i} ({err[i] / bound[i]:.3g}x)")


@pytest.mark.parametrize("l_accumulate, holds", [("float32", True), ("float64", False)])
def test_coherent_residues_in_l_stay_within_the_lse_bound(l_accumulate, holds):
    """A fused fp32 kernel inside a third-party precision's contract (64-key tiles, each rowsum and the merges left to
    right) on l_residue_lse's logits: its LSE is within the bound; stating l in fp64 (what our kernel does) for the
    same fp32 merges is caught."""
    from dataclasses import replace

    from l_residue_lse import TILE, case

    from flashcheck.proofs.bounds import forward_bound

    precision = replace(_third_party_fp32(), l_accumulate=l_accumulate)
    assert precision.block_k == TILE
    q, k, v, err = case(4096)
    bound = float(np.asarray(forward_bound(q, k, v, scale=1.0, precision=precision).lse)[0, 0, 0])
    assert (err <= bound) == holds, (f"l_accumulate={l_accumulate}: |LSE^ - LSE| = {err:.3g} against the "
                                     f"probabilistic bound {bound:.3g} ({err / bound:.3g}x)")

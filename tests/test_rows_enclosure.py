"""dK and dV enclosed (proofs/bounds.md sec. 8, "dK and dV enclosed"; backward._rows_chain_enclosure): where the
backward's recomputed P~ is one of the stored LSE's candidates (Precision.bwd_p_known), the dK/dV kernel's dS_ij and
P~_ij lie in the union of the candidates' values, and its fp32 accumulators (one FMA chain per key through the
group's query heads and their query tiles, ragged tile first) are enclosed on the data. The enclosure holds the
exact fp32 chain in the emulation's order, an enclosure that assumes another order is exceeded (the check can fail),
and the gradients' bounds that read it hold and are sharper."""
from __future__ import annotations

from unittest import mock

import numpy as np
import pytest

from tests.test_bwd_p_known import PR, _case

U = 2.0**-24


def _kernel_rows_chain(S, other, group: int, block_q: int):
    """The dK/dV kernel's fp32 accumulators (B, Hkv, Nk, c) of sum_i S_ij other_ic, exactly: per key one chain
    acc <- RN32(acc + S_ij other_ic) through head g of the group, then g + 1, each head's rows in the order of the
    kernel on a head with nothing masked (kernels/tiles.py: the ragged query tile first, then the full ones
    ascending), the products exact in float64."""
    from flashcheck.proofs.fma_chain import fma_step

    B, Hq, Nq, Nk = S.shape
    full = Nq // block_q * block_q
    rows = np.r_[np.arange(full, Nq), np.arange(full)] if 0 < full < Nq else np.arange(Nq)
    Sg = S[:, :, rows].reshape(B, Hq // group, group * Nq, Nk)
    og = other[:, :, rows].reshape(B, Hq // group, group * Nq, -1)
    acc = np.zeros((B, Hq // group, Nk, other.shape[-1]))
    for i in range(group * Nq):
        acc = fma_step(acc, Sg[:, :, i, :, None] * og[:, :, i, None, :])
    return acc


def _ordered_case():
    """Rows whose order sets the error: N_q = 100 (a ragged tile of 36 rows after the full tile of 64), one key, a
    large summand 1.5 on the ragged tile's first row and coherent small ones (one residue under half an ulp of
    [1, 2): every step after the large one rounds the same way, bench/adversaries/constant_residue_*.py) elsewhere.
    In the kernel's order the large one comes first and all 99 small ones round; in ascending order only the 35
    after it."""
    rng = np.random.default_rng(0)
    Nq = 100
    m = rng.integers(-50, 51, Nq)
    t = (2.0**-24 - 2.0**-31) + (m - int(round(m.mean()))) * 2.0**-23  # exact in fp32
    S = t.reshape(1, 1, Nq, 1).copy()
    S[0, 0, 64, 0] = 1.5
    other = np.ones((1, 1, Nq, 1))
    return S, other


def _enclosure(S, other, tile_order="partial_first", group=1, block_q=64):
    from flashcheck.proofs.bounds.backward import _rows_chain_enclosure

    vis = np.ones(S.shape, dtype=bool)
    return _rows_chain_enclosure(S, S, S, np.zeros_like(S), other, vis, block_q, group, tile_order, U)


def test_the_rows_enclosure_holds_the_kernels_chain():
    S, other = _ordered_case()
    err = np.abs(_kernel_rows_chain(S, other, 1, 64) - np.einsum("bhij,bhic->bhjc", S, other))
    bound = _enclosure(S, other)
    assert err.max() > 80 * 2.0**-24, f"the case does not make the order matter: error {err.max():.3g}"
    assert (err <= bound).all(), f"|acc - exact| {err.max():.3g} > enclosure {bound.max():.3g}"


def test_an_enclosure_in_another_order_is_caught():
    """The same chain enclosed as if the query tiles came in ascending order (the ragged tile last) is exceeded:
    the enclosure follows the stated order, so a wrong order shows."""
    S, other = _ordered_case()
    err = np.abs(_kernel_rows_chain(S, other, 1, 64) - np.einsum("bhij,bhic->bhjc", S, other))
    wrong = _enclosure(S, other, tile_order="ascending")
    assert (err > wrong).any(), f"ascending enclosure {wrong.max():.3g} holds the error {err.max():.3g}"


def test_the_rows_enclosure_holds_a_gqa_groups_chain():
    """Two query heads on one kv head: one accumulator runs through head 0's rows, then head 1's."""
    rng = np.random.default_rng(3)
    S = rng.standard_normal((1, 2, 100, 8)).astype(np.float32).astype(np.float64)
    other = rng.standard_normal((1, 2, 100, 4)).astype(np.float32).astype(np.float64)
    exact = np.einsum("bhij,bhic->bhjc", S, other).reshape(1, 1, 2, 8, 4).sum(axis=2)
    err = np.abs(_kernel_rows_chain(S, other, 2, 64) - exact)
    bound = _enclosure(S, other, group=2)
    worst = np.unravel_index(np.argmax(err / bound), err.shape)
    assert (err <= bound).all(), f"|acc - exact| {err[worst]:.3g} > enclosure {bound[worst]:.3g} at {worst}"


def _gradients(family, Nq=100):
    from flashcheck.proofs.bounds import Precision, backward_bound
    from flashcheck.proofs.emulation import fa2_backward
    from flashcheck.reference.attention import attention
    from flashcheck.reference.backward import attention_backward

    q, k, v, do, o, lse, o32 = _case(family, Nq=Nq)
    got = fa2_backward(q, k, v, o, lse, do, dtype="float32", dot="ieee", delta_o=o32, ieee_fma_chain=True,
                       block_k_dq=64, ex2="h100")
    O, L = attention(q, k, v)
    exact = attention_backward(q, k, v, O, L, do)
    return (q, k, v, do), got, exact, backward_bound(q, k, v, do, precision=Precision("float32", "ieee", **PR))


@pytest.mark.parametrize("family", ["random", "rising_logits", "constant_v", "v_large_mean", "repeated_keys"])
def test_dk_dv_bounds_with_the_rows_enclosed_hold(family):
    """Ragged N_q = 100 (the kernel's ragged query tile first) against the emulated kernel."""
    _, got, exact, bb = _gradients(family)
    for name, g, e, b in zip(("dK", "dV"), got[1:], exact[1:], (bb.dk, bb.dv)):
        err = np.abs(g - e)
        worst = np.unravel_index(np.argmax(err / b), err.shape)
        assert np.all(err <= b), f"{family}: {name} error {err[worst]:.3g} over its bound {b[worst]:.3g} at {worst}"


def test_the_rows_enclosure_sharpens_dv():
    """Random rows: dV's bound with the enclosure is under half of the bound without it."""
    from flashcheck.proofs.bounds import Precision, backward_bound
    from flashcheck.proofs.bounds import backward as bw

    args, _, _, bb = _gradients("random")
    with mock.patch.object(bw, "_rows_chain_enclosure", lambda lo, *a: np.full(lo.shape[:2] + (
            lo.shape[-1], a[3].shape[-1]), np.inf)):
        before = backward_bound(*args, precision=Precision("float32", "ieee", **PR))
    ratio = np.median(bb.dv / before.dv)
    assert ratio < 0.5, f"dV bound ratio with/without the enclosure {ratio:.3f}"

"""The backward's dQ loop has its own key tile width (Precision.block_k_dq): our dQ kernel visits its keys in tiles of
KernelConfig.dq.block_n, the ragged tile first, which need not be the forward's block_k (bf16/fp16 at d 128: the
forward over 128 keys a tile, dQ over 64). The precision of our kernel states it, and the dQ bound's ordered
accumulation model follows it (bench/NOTES.md, "dQ's key tile stated (issue 8, session 2026-11-26d)")."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from flashcheck.proofs.bounds import Precision, backward_bound, lse_gradient_bound
from flashcheck.proofs.emulation import fa2_backward, fa2_forward, round_to
from flashcheck.proofs.tightness import worst_ratio
from flashcheck.reference.attention import attention
from flashcheck.reference.backward import attention_backward

HEAD_DIMS = (16, 32, 64, 80, 96, 128, 256)
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MODES = ("default", "accurate")


def _dq_launch_block_n(dtype, d: int, mode: str) -> int:
    """BLOCK_N of the attn_bwd_dq_kernel launch a GPU call (interpret=False) of this dtype, head dim and mode makes."""
    from flashcheck.kernels.attention import Layout, launches

    x = Layout.dense(str(dtype).removeprefix("torch."), (1, 2, 200, d))
    (dq,) = [la for la in launches(x, x, x, grad=True, precision=mode, interpret=False)
             if la.kernel == "attn_bwd_dq_kernel"]
    return dict(dq.constexprs)["BLOCK_N"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_ours_precision_states_the_dq_kernels_key_tile(dtype, d, mode):
    """ours_precision (and the Arithmetic it reads) states the key tile width of the dQ kernel the GPU launches, not
    the forward's: at d 128 in bf16/fp16 (default mode) these differ (128 vs 64), where the model used to assume 128."""
    from flashcheck.adapters import ours_precision
    from flashcheck.kernels.attention import arithmetic, kernel_config

    want = _dq_launch_block_n(dtype, d, mode)
    assert kernel_config(d, dtype, interpret=False, precision=mode).dq.block_n == want
    a = arithmetic(dtype, head_dim=d, interpret=False, precision=mode)
    pr = ours_precision(dtype, head_dim=d, interpret=False, precision=mode)
    assert (a.block_k_dq, pr.block_k_dq, pr.dq_key_tile) == (want, want, want), (
        f"{dtype} d={d} {mode}: dQ kernel's BLOCK_N {want}, Arithmetic.block_k_dq {a.block_k_dq}, "
        f"Precision.block_k_dq {pr.block_k_dq} (block_k {pr.block_k})")


def test_a_block_sparse_mask_fixes_the_dq_key_tile():
    """With a block-sparse mask every kernel runs on its tile grid (kernels/attention.py _tiles): the dQ kernel's key
    tiles are the mask's block_k, whatever kernel_config would choose."""
    from flashcheck.adapters import ours_precision
    from flashcheck.kernels.attention import _tiles, arithmetic
    from flashcheck.kernels.block_mask import build_block_mask

    bm = build_block_mask(200, 200, block_q=32, block_k=16, causal=True, device="cpu")
    dq_tile = _tiles(128, 128, torch.bfloat16, bm.block_q, bm.block_k, [], interpret=False)[0].dq.block_n
    a = arithmetic(torch.bfloat16, head_dim=128, interpret=False, block_mask=bm)
    pr = ours_precision(torch.bfloat16, head_dim=128, interpret=False, block_mask=bm)
    assert (a.block_k_dq, pr.dq_key_tile) == (dq_tile, dq_tile) == (16, 16), (a, pr.block_k_dq)


def test_block_k_dq_is_validated():
    """block_k_dq is None or a positive int, like block_k; bad values name the field."""
    for bad in (0, -64, 64.0, True, "64"):
        with pytest.raises(ValueError, match="block_k_dq"):
            Precision("float16", "fp16", block_k_dq=bad)
    assert Precision("float16", "fp16", block_k=128).dq_key_tile == 128  # None: the forward's block_k
    assert Precision("float16", "fp16", block_k=128, block_k_dq=64).dq_key_tile == 64


def test_block_k_dq_none_bounds_as_block_k():
    """block_k_dq=None means the dQ loop runs over block_k: the bounds are those of block_k_dq=block_k, bit for bit
    (what the sha256 of bench/bounds_fingerprint.py relies on for every set-up that leaves it None)."""
    rng = np.random.default_rng(0)
    q, k, v, do = (round_to(rng.standard_normal(s), "float16") for s in ((1, 2, 8, 16), (1, 2, 100, 16),
                                                                          (1, 2, 100, 16), (1, 2, 8, 16)))
    none = Precision("float16", "fp16", exp="libm", block_k=32)
    same = dataclasses.replace(none, block_k_dq=32)
    for kind in ("probabilistic", "worst_case"):
        a, b = (backward_bound(q, k, v, do, precision=p, kind=kind) for p in (none, same))
        for name in ("dq", "dk", "dv"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=f"{kind} {name}")
        np.testing.assert_array_equal(*(lse_gradient_bound(q, k, precision=p, kind=kind) for p in (none, same)),
                                      err_msg=f"{kind} lse_gradient")


# ---- the bound against the emulation at a ragged N_k: dQ over 64-key tiles, the forward over 128 --------------------

NK, FWD_TILE, DQ_TILE = 200, 128, 64


def _stuck_accumulator(K: float = 1.9, rel: float = 0.3 * 2.0**-23, d: int = 16):
    """fp32 inputs on which the order of dQ's key tiles decides its error. q = 0 (uniform P), dO = e_0 (dP_j = v_j0),
    v_j0 = 1 but for the last 8 keys: dS_j = delta > 0 on keys 0..191. dQ's column 0 adds the products dS_j k_j0:
    -delta K at key 0, +delta K at key 128, 127 equal products delta K rel at keys 1..127 (each ~0.47 of an fp32 ulp of
    delta K: below half of it), zero elsewhere: exactly 127 delta K rel.

    The dQ kernel's 64-key tiles come as 192..199 (ragged, first), 0..63, 64..127, 128..191: the accumulator holds
    -delta K from key 0 on, each small product is under half its ulp and rounds away (one FMA each), 127 times the
    same loss, until key 128 cancels -delta K. In the 128-key tiles' order, 128..199 then 0..127, key 128 comes first
    and key 0 cancels it: the small products are added to an accumulator near 0, at no cost. The chain model
    (Precision.ieee_fma_chain: partial sums evaluated in the stated order, bounds.md sec. 8) charges each step the
    partial sum of ITS order."""
    q = np.zeros((1, 1, 2, d))
    k, v = np.zeros((1, 1, NK, d)), np.zeros((1, 1, NK, d))
    v[..., :192, 0] = 1.0
    v[..., 1] = np.linspace(-1.0, 1.0, NK)
    do = np.zeros((1, 1, 2, d))
    do[..., 0] = 1.0
    do[..., 1, 1] = 0.5
    k[..., 0, 0], k[..., 128, 0], k[..., 1:128, 0] = -K, K, K * rel
    k[..., 2] = 0.25
    return [round_to(x, "float32") for x in (q, k, v, do)]


def _random(dtype: str, seed: int = 0, d: int = 32):
    rng = np.random.default_rng(seed)
    return [round_to(rng.standard_normal(s), dtype) for s in ((1, 2, 8, d), (1, 2, NK, d), (1, 2, NK, d), (1, 2, 8, d))]


_CHAIN = Precision("float32", "ieee", exp="libm", l_accumulate="float64", delta_from="fp32", ieee_fma_chain=True,
                   block_k=FWD_TILE)


def _emulated(xs, dtype: str, dot: str, dq_tile: int, fma: bool):
    """(the emulation's dQ, dK, dV with the forward over FWD_TILE and dQ over dq_tile keys, the exact gradients)."""
    q, k, v, do = xs
    o, lse, o32 = fa2_forward(q, k, v, dtype=dtype, dot=dot, l_accumulate="float64", return_fp32_o=True,
                              ieee_fma_chain=fma, block_k=FWD_TILE)
    got = fa2_backward(q, k, v, o, lse, do, dtype=dtype, dot=dot, delta_o=o32, ieee_fma_chain=fma,
                       block_k_dq=dq_tile)
    O, L = attention(q, k, v)
    return got, attention_backward(q, k, v, O, L, do)


CASES = {  # name: (inputs, dtype, dot, the precision with the forward's tiles, FMA chains)
    "stuck-accumulator": (_stuck_accumulator, "float32", "ieee", _CHAIN, True),
    "random-fp32-chain": (lambda: _random("float32"), "float32", "ieee", _CHAIN, True),
    "random-fp16": (lambda: _random("float16"), "float16", "fp16",
                    Precision("float16", "fp16", exp="libm", l_accumulate="float64", delta_from="fp32",
                              block_k=FWD_TILE), False),
}


@pytest.mark.parametrize("kind", ("probabilistic", "worst_case"))
@pytest.mark.parametrize("case", list(CASES))
def test_backward_bound_with_the_dq_tile_holds_for_the_emulation(case, kind):
    """The emulation with dQ over 64-key tiles and the forward over 128 (N_k = 200: both ragged, different ragged
    tiles) stays within the backward bound that states block_k_dq = 64: observed error / bound <= 1 on dQ, dK, dV
    (NaN never agrees)."""
    make, dtype, dot, pr, fma = CASES[case]
    xs = make()
    got, exact = _emulated(xs, dtype, dot, DQ_TILE, fma)
    bb = backward_bound(*xs, precision=dataclasses.replace(pr, block_k_dq=DQ_TILE), kind=kind)
    for name, g, e, b in zip(("dQ", "dK", "dV"), got, exact, (bb.dq, bb.dk, bb.dv)):
        r = worst_ratio(np.abs(g - e), b)
        assert r <= 1.0, f"{case} {kind} {name}: error is {r:.3g} x the bound with block_k_dq={DQ_TILE}"


def test_dq_bound_stated_for_the_forwards_tile_is_exceeded_by_narrower_dq_tiles():
    """The dQ model depends on the field: on _stuck_accumulator the emulation with dQ over 64-key tiles exceeds the
    probabilistic dQ bound of the precision that leaves block_k_dq at None (the forward's 128, what ours_precision
    stated before at d 128), while the emulation over 128-key tiles stays within that same bound: the excess is the
    order of the tiles, which the bound with block_k_dq = 64 covers (test above)."""
    xs = _stuck_accumulator()
    assert _CHAIN.block_k_dq is None and _CHAIN.dq_key_tile == FWD_TILE
    bound = backward_bound(*xs, precision=_CHAIN).dq
    ratios = {}
    for tile in (FWD_TILE, DQ_TILE):
        (dq, _, _), (dq_exact, _, _) = _emulated(xs, "float32", "ieee", tile, True)
        ratios[tile] = worst_ratio(np.abs(dq - dq_exact), bound)
    assert ratios[FWD_TILE] <= 1.0, f"the 128-key dQ order exceeds its own bound: {ratios}"
    assert ratios[DQ_TILE] > 1.0, f"the mismatched model was not exceeded (error / bound by dQ tile): {ratios}"

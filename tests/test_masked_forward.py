"""The forward bound on heads with masked entries, each query block in its own tile order (proofs/bounds.md sec. 6c;
Precision.block_q_fwd).

Our forward kernel runs one program per query block of block_q_fwd rows; each visits its partial key tiles first
(the band's or a block-sparse mask's cuts, the ragged tile), then its full ones ascending, and skips the empty ones
(kernels/tiles.py; proofs/emulation.py fa2_forward walks the same loops, tests/test_masked_chains.py checks it against
the Triton kernel). Here: the bound's per-block order is the emulation's, the bound holds against the emulation of our
kernel with every claim (fp32 ieee: FMA chains, known exponent arguments, ex2 and lg2 tables; fp16 with the H100's
tensor-core steps), a bound stated in plain ascending order is exceeded by a coherent-residue input (so the order
matters and these tests can fail), fully masked rows keep O = 0, LSE = -inf with zero bounds, and unmasked problems
are unchanged.
"""
from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench", "adversaries"))


@dataclass(frozen=True)
class Case:
    """A random problem (1 batch, 2 heads) under one masking, fed to the emulation with every claim."""
    nq: int
    nk: int
    causal: bool | str = False
    window: tuple | None = None
    dense: float | None = None
    empty_rows: tuple = ()  # query rows the dense mask hides entirely
    lists: bool = False  # the band and dense mask as a block-sparse mask (tiles 64 x 32)
    dtype: str = "float32"


CASES = (
    Case(100, 150, causal=True), Case(64, 300, causal="bottom_right"), Case(100, 60, causal="bottom_right"),
    Case(80, 200, window=(30, 50)), Case(70, 150, dense=0.6, empty_rows=(3, 40)),
    Case(90, 130, causal=True, dense=0.8, lists=True), Case(130, 100, window=(20, 0), lists=True),
    Case(80, 200, causal="bottom_right", dtype="float16"), Case(70, 150, dense=0.6, dtype="float16"),
    Case(100, 150, causal=True, dtype="float16"),
)


def _problem(c: Case, seed: int = 0):
    """(q, k, v, masks for the references, run_source's mask arguments)."""
    import torch

    from flashcheck.kernels import build_block_mask
    from flashcheck.proofs.emulation import round_to

    rng = np.random.default_rng(seed)
    d = 32
    q, k, v = (round_to(rng.standard_normal((1, 2, n, d)), c.dtype) for n in (c.nq, c.nk, c.nk))
    dense = None
    if c.dense is not None:
        dense = rng.random((1, 2, c.nq, c.nk)) < c.dense
        dense[:, :, list(c.empty_rows)] = False
    masks = {"causal": c.causal, "window": c.window, "mask": dense}
    run = masks
    if c.lists:
        run = {"block_mask": build_block_mask(c.nq, c.nk, block_q=64, block_k=32, causal=c.causal, window=c.window,
                                              mask=None if dense is None else torch.as_tensor(dense))}
    return q, k, v, masks, run


def _emulated(c: Case, seed: int = 0):
    """(o, lse) of the emulation, (O, LSE) exact, the precision, q, k, v, masks."""
    from bench.bounds_attack import run_source
    from flashcheck.reference.attention import attention

    q, k, v, masks, run = _problem(c, seed)
    dot = "ieee" if c.dtype == "float32" else "fp16"
    (o, lse, *_), pr = run_source("emulation", "cpu", c.dtype, dot, q, k, v, np.zeros_like(q), mma="h100", **run)
    O, L = attention(q, k, v, **masks)
    return (o, lse), (O, L), pr, (q, k, v), masks


def _over(name, err, bound, what):
    """An assertion message: where the error exceeds the bound, by how much."""
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.where(err > 0, err / bound, 0.0)
    i = np.unravel_index(np.argmax(r), r.shape)
    return (f"{what} {name}: error {err[i]:.3g} over the bound {bound[i]:.3g} at {i} ({r[i]:.3g}x; "
            f"{int(np.sum(err > bound))} entries over)")


@pytest.mark.parametrize("c", CASES, ids=str)
def test_masked_heads_stay_within_both_forward_bounds(c):
    from flashcheck.proofs.bounds import forward_bound

    (o, lse), (O, L), pr, (q, k, v), masks = _emulated(c)
    assert pr.block_q_fwd == 64, "run_source must state the forward's query blocks"
    eo = np.abs(o - O)
    with np.errstate(invalid="ignore"):  # an empty row: -inf - -inf, compared as 0
        el = np.abs(np.where(np.isinf(L) & np.isinf(lse), 0.0, lse - L))
    for kind in ("probabilistic", "worst_case"):
        b = forward_bound(q, k, v, precision=pr, kind=kind, **masks)
        assert np.isfinite(b.o).all() and np.isfinite(b.lse).all(), f"{c} {kind}: a bound is not finite"
        assert (eo <= b.o).all(), _over("O", eo, b.o, f"{c} {kind}")
        assert (el <= b.lse).all(), _over("LSE", el, b.lse, f"{c} {kind}")


def test_the_per_block_bound_is_tighter_than_the_order_free_one():
    """The point of the orders: fp32 ieee bottom-right causal (N_q 64, N_k 300) O's median bound falls by over an
    order of magnitude against the order-free charge (the same precision without block_q_fwd)."""
    from flashcheck.proofs.bounds import forward_bound

    c = Case(64, 300, causal="bottom_right")
    (o, _), (O, _), pr, (q, k, v), masks = _emulated(c)
    per_block = forward_bound(q, k, v, precision=pr, **masks).o
    free = forward_bound(q, k, v, precision=dataclasses.replace(pr, block_q_fwd=None), **masks).o
    ratio = np.median(free / per_block)
    assert ratio > 10, f"order-free / per-block O bound: median {ratio:.3g}, expected > 10"


def _block_keys(c: Case):
    """Per query block: the keys in the bound's stated order (forward._query_block_orders) and in the emulation's walk
    (proofs/emulation.py _outer_visits)."""
    from flashcheck.proofs import emulation as em
    from flashcheck.proofs.bounds import forward
    from flashcheck.proofs.bounds.common import _problem as bproblem

    from flashcheck.proofs.bounds import Precision

    q, k, v, masks, run = _problem(c)
    bm = run.get("block_mask")
    pr = Precision("float32", "ieee", block_q_fwd=64, block_k=32 if bm is not None else 64,
                   tile_lists="lists" if bm is not None else "band",
                   **(dict(block_q_dq=64, block_k_dkdv=32) if bm is not None else {}))
    p, *_, vis, _ = bproblem(q, k, v, None, masks["causal"], masks["window"], masks["mask"], None)
    stated = forward._query_block_orders(p, pr, masks["causal"], masks["window"], masks["mask"], vis)
    pb = em._problem(q, k, v, "float32", "ieee", None, **({"causal": c.causal, "window": c.window, "mask": masks["mask"]}
                                                         if bm is None else dict(causal=False, window=None, mask=None)),
                     block_mask=bm)
    walks = em._outer_visits(c.nq, 64, c.nk, pr.block_k, pb.band, pb.block_mask, "kv", (1, 2))
    return stated, walks, pr


@pytest.mark.parametrize("c", (Case(100, 150, causal=True), Case(64, 300, causal="bottom_right"),
                               Case(80, 200, window=(30, 50)), Case(70, 150, dense=0.6),
                               Case(90, 130, causal=True, dense=0.8, lists=True)), ids=str)
def test_each_query_block_takes_the_emulations_order(c):
    """The keys each query block visits, in order, and which of them are unfused (a partial tile, or every tile under a
    dense mask without lists): the bound's stated order equals the emulation's walk of the kernel's loops."""
    from flashcheck.proofs.emulation import _visit_indices

    stated, walks, pr = _block_keys(c)
    assert stated is not None
    for b, h, rows, (visits,) in walks:
        keys = _visit_indices(visits, c.nk, pr.block_k).numpy()
        partial = np.concatenate([np.full(min(c.nk, j0 + pr.block_k) - j0, p) for j0, p in visits]) if visits else []
        for a0, a1, order in stated:
            if not (a0 <= int(rows.min()) < a1):
                continue
            assert order is not None, f"{c}: block [{a0}, {a1}) has no stated order"
            assert np.array_equal(order.perm, keys), (f"{c}: block [{a0}, {a1}) stated {order.perm[:8]}... against "
                                                      f"the emulation's {keys[:8]}...")
            want = np.asarray(partial, dtype=bool) | (c.dense is not None and not c.lists)
            assert np.array_equal(order.unfused, want), f"{c}: block [{a0}, {a1}): the unfused keys differ"


def test_known_lse_interval_and_accumulator_hold_the_emulations_values():
    """Masked blocks (fp32 ieee, every claim): the stored LSE of the emulation is one of the fp32 numbers in
    [z_lo, z_hi] (_ForwardParts.lse_iv) and its fp32 O = fl(acc / l32) with l32 in [l_lo, l_hi] (acc_known), on every
    row where the forward claims them; and they are claimed on most rows."""
    from flashcheck.proofs.bounds.forward import _forward

    c = Case(100, 150, causal=True)
    q, k, v, masks, run = _problem(c)
    from bench.bounds_attack import run_source

    (o, lse, *_), pr = run_source("emulation", "cpu", "float32", "ieee", q, k, v, np.zeros_like(q), **run)
    from flashcheck.proofs.emulation import fa2_forward

    _, _, o32 = fa2_forward(q, k, v, dtype="float32", dot="ieee", l_accumulate="float64", return_fp32_o=True,
                            ieee_fma_chain=True, rowsum="tree", ex2="h100", lg2="h100", block_q=64, **masks)
    F = _forward(q, k, v, None, c.causal, None, None, None, pr, "probabilistic")
    lo, hi, ok, z_lo, z_hi = F.parts.lse_iv
    assert ok.mean() > 0.9, f"the LSE interval is claimed on {ok.mean():.0%} of the rows only"
    inside = (lse >= z_lo) & (lse <= z_hi)
    assert inside[ok].all(), f"stored LSE outside [z_lo, z_hi] on {int((~inside & ok).sum())} claimed rows"
    acc, l_lo, l_hi, a_ok = F.parts.acc_known
    assert a_ok.mean() > 0.9, f"the accumulator is known on {a_ok.mean():.0%} of the rows only"
    q_lo, q_hi = acc / l_hi[..., None], acc / l_lo[..., None]
    lo_o, hi_o = np.minimum(q_lo, q_hi), np.maximum(q_lo, q_hi)
    slack = 2.0**-23 * np.abs(o32)  # the fp32 division's rounding
    held = (o32 >= lo_o - slack) & (o32 <= hi_o + slack)
    assert held[a_ok].all(), f"fp32 O outside acc / [l_lo, l_hi] on {int((~held & a_ok[..., None]).sum())} entries"


def _ascending(real):
    """_query_block_orders with each block's tiles in plain ascending order (the planted error)."""
    def stated(*args, **kw):
        out = real(*args, **kw)
        if out is None:
            return None
        planted = []
        for a0, a1, order in out:
            if order is not None:
                idx = np.argsort(order.perm, kind="stable")
                perm = order.perm[idx]
                tile_of = perm // 64
                sizes = tuple(int((tile_of == t).sum()) for t in np.unique(tile_of))
                order = dataclasses.replace(order, perm=perm, sizes=sizes, unfused=order.unfused[idx])
            planted.append((a0, a1, order))
        return planted
    return stated


def _step_sign_causal(n: int, nq: int, causal):
    """bench/adversaries/step_sign_o.py's input (uniform rows, V = +a then -a (1 + eps)) under a causal mask, fp32
    ieee emulation with every claim: max over O of error / probabilistic bound."""
    import step_sign_o

    from bench.bounds_attack import run_source
    from flashcheck.proofs.bounds import forward_bound
    from flashcheck.reference.attention import attention

    q, k, v = step_sign_o.build(n, 16, 1e-3, nq=nq)
    (o, *_), pr = run_source("emulation", "cpu", "float32", "ieee", q, k, v, np.zeros_like(q), causal=causal)
    O, _ = attention(q, k, v, causal=causal)
    err = np.abs(o - O)
    b = forward_bound(q, k, v, causal=causal, precision=pr).o
    return float(np.max(np.where(err > 0, err / b, 0.0)))


@pytest.mark.parametrize("n,nq,causal", ((256, 256, True), (512, 128, "bottom_right")))
def test_coherent_residues_in_each_blocks_order_stay_within_the_bound(n, nq, causal):
    """The step-sign input (every step of the climb rounds alike) under a causal mask: the FMA chain evaluated in each
    block's order holds (0.980 / 0.979 of the bound)."""
    ratio = _step_sign_causal(n, nq, causal)
    assert ratio <= 1.0, f"step-sign N_k {n} N_q {nq} causal {causal}: max error {ratio:.3g} x the bound"


def test_a_bound_stated_in_ascending_order_is_caught(monkeypatch):
    """The planted error: each block's tiles in plain ascending order (the partial tile where it lies, not first).
    The same input exceeds that bound (2.8x, 194 entries at N 256), so the order is what the tests above check."""
    from flashcheck.proofs.bounds import forward

    monkeypatch.setattr(forward, "_query_block_orders", _ascending(forward._query_block_orders))
    ratio = _step_sign_causal(256, 256, True)
    assert ratio > 1.0, f"the ascending-order bound was not exceeded ({ratio:.3g})"


def test_a_masked_key_holds_in_the_stated_order():
    """bench/adversaries/step_sign_o.py --masked-key (one masked key, fp32 ieee, emulation): the chain is now
    evaluated on the data with the masked key's exact zero step, where it was charged order-free."""
    import step_sign_o

    from flashcheck.proofs.bounds import forward_bound
    from flashcheck.reference.attention import attention

    n = 2048
    q, k, v = step_sign_o.build(n, 64, 1e-3)
    mask = np.ones((1, 1, q.shape[2], n), dtype=bool)
    mask[..., 1] = False
    o, pr = step_sign_o.run("emulation", "cpu", "float32", "ieee", q, k, v, mask, "fma")
    assert pr.block_q_fwd is not None
    O, _ = attention(q, k, v, mask=mask)
    err = np.abs(o - O)
    b = forward_bound(q, k, v, mask=mask, precision=pr).o
    assert (err <= b).all(), _over("O", err, b, "step-sign --masked-key")


def test_fully_masked_rows_give_zero_outputs_and_zero_bounds():
    """Rows that see nothing (bottom-right causal with N_q > N_k: rows 0..39; a dense mask's empty rows): O = 0 and
    LSE = -inf in the emulation and the reference, both bounds 0 there (compared exactly)."""
    from flashcheck.proofs.bounds import forward_bound

    for c, rows in ((Case(100, 60, causal="bottom_right"), list(range(40))),
                    (Case(70, 150, dense=0.6, empty_rows=(3, 40)), [3, 40])):
        (o, lse), (O, L), pr, (q, k, v), masks = _emulated(c)
        assert np.all(o[:, :, rows] == 0) and np.all(O[:, :, rows] == 0), f"{c}: O of an empty row is not 0"
        assert np.all(np.isneginf(lse[:, :, rows])) and np.all(np.isneginf(L[:, :, rows])), f"{c}: LSE not -inf"
        for kind in ("probabilistic", "worst_case"):
            b = forward_bound(q, k, v, precision=pr, kind=kind, **masks)
            assert np.all(b.o[:, :, rows] == 0) and np.all(b.lse[:, :, rows] == 0), f"{c} {kind}: nonzero bound"


def test_unmasked_problems_are_unchanged_by_the_stated_blocks():
    """block_q_fwd reads only heads with masked entries: on unmasked problems (ragged N, both dtypes, both kinds)
    the bounds are bit for bit those without it."""
    from bench.bounds_attack import run_source
    from flashcheck.proofs.bounds import backward_bound, forward_bound
    from flashcheck.proofs.emulation import round_to

    rng = np.random.default_rng(3)
    for dtype, dot, nq, nk in (("float32", "ieee", 70, 100), ("float16", "fp16", 64, 130)):
        q, k, v, do = (round_to(rng.standard_normal((1, 2, n, 32)), dtype) for n in (nq, nk, nk, nq))
        _, pr = run_source("emulation", "cpu", dtype, dot, q[:, :, :2], k[:, :, :2], v[:, :, :2], do[:, :, :2])
        free = dataclasses.replace(pr, block_q_fwd=None)
        for kind in ("probabilistic", "worst_case"):
            a, b = (forward_bound(q, k, v, precision=p, kind=kind) for p in (pr, free))
            assert np.array_equal(a.o, b.o) and np.array_equal(a.lse, b.lse), f"{dtype} {kind}: forward differs"
        a, b = (backward_bound(q, k, v, do, precision=p) for p in (pr, free))
        assert all(np.array_equal(x, y) for x, y in zip((a.dq, a.dk, a.dv), (b.dq, b.dk, b.dv))), f"{dtype}: backward"


@pytest.mark.parametrize("d", (16, 64, 128, 256))
@pytest.mark.parametrize("dtype", ("float16", "float32"))
def test_ours_precision_states_the_forward_query_block(dtype, d):
    """ours_precision's block_q_fwd is the forward kernel's BLOCK_M (KernelConfig.fwd.block_m), not Precision.block_q
    (the dK/dV kernel's query tile); a block-sparse mask's block_q."""
    import torch

    from flashcheck.adapters import ours_precision
    from flashcheck.kernels import build_block_mask
    from flashcheck.kernels.attention import kernel_config

    tdt = getattr(torch, dtype)
    pr = ours_precision(tdt, None, head_dim=d, interpret=True)
    assert pr.block_q_fwd == kernel_config(d, tdt, interpret=True).fwd.block_m
    bm = build_block_mask(64, 96, block_q=32, block_k=64, causal=True)
    assert ours_precision(tdt, None, head_dim=d, interpret=True, block_mask=bm).block_q_fwd == 32


@pytest.mark.parametrize("value", (0, True, 32.0, -64))
def test_precision_refuses_a_malformed_forward_query_block(value):
    from flashcheck.proofs.bounds import Precision

    with pytest.raises(ValueError, match="block_q_fwd"):
        Precision("float32", "ieee", block_q_fwd=value)

"""The fused backward (kernels/gluon_bwd_fused.py, issue 10): dQ's products inside the dK/dV kernel, the 128-key
partials added in descending key-tile order. Which calls run it, what the Precision states for them
(flashcheck.proofs.bounds.FusedDq; the bound's side: tests/test_bounds_fused_dq.py), and, on an sm_90 GPU, its
outputs within the derived bounds (unbanded calls: ragged N, Nq != Nk, GQA, N = 1, strided layouts), dK and dV bit for
bit the two Gluon kernels', dQ the same run to run.

kernel_config gives it ("auto" and "gluon") to unbanded, unmasked calls at head dim 64 with at least FUSED_QUERIES x
FUSED_KEYS; the GPU cases below force it on small shapes with given tiles (the kernel is right for any shape; the
threshold is speed: bench/fused_threshold.py)."""
from __future__ import annotations

import importlib
from dataclasses import replace

import numpy as np
import pytest
import torch

from flashcheck.strategies import Case, Shape, materialize
from tests.test_gluon_forward import _assert_all_within, needs_sm90
from tests.test_kernel_support import kernel_precision, run_kernel, to_numpy

ka = importlib.import_module("flashcheck.kernels.attention")  # the module (the package exports the function)


def _config(d=64, dtype=torch.bfloat16, **kw):
    return ka.kernel_config(d, dtype, interpret=False, **kw)


def _fused_tiles(dtype=torch.bfloat16):
    """Given tiles that run the fused backward on every unbanded call (the Gluon d = 64 tiles, dQ's flagged)."""
    g = _config(dtype=dtype, engine="gluon")
    return ka.KernelConfig(g.fwd, g.dkdv, ka.TileConfig(128, 128, 8, 2, gluon=True, fused=True))


# ------------------------------------------------------------------------------------------------ CPU: the dispatch

@pytest.mark.parametrize("engine", ["auto", "gluon"])
def test_kernel_config_gives_the_fused_tile_to_long_d64_calls_only(engine):
    long = dict(n_queries=ka.FUSED_QUERIES, n_keys=ka.FUSED_KEYS, engine=engine)
    dq = _config(**long).dq
    assert (dq.block_m, dq.block_n, dq.gluon, dq.fused) == (128, 128, True, True), dq
    assert ka.fused_tiles(_config(**long), 64, torch.bfloat16)
    assert ka.fused_tiles(_config(64, torch.float16, **long), 64, torch.float16)
    nb = ka.FUSED_BAND_KEYS
    assert ka.fused_tiles(_config(band=True, n_queries=nb, n_keys=nb, engine=engine), 64, torch.bfloat16)
    for what, cfg in [
            ("banded, fewer keys than FUSED_BAND_KEYS", _config(band=True, n_queries=nb, n_keys=nb - 1, engine=engine)),
            ("fewer queries", _config(**{**long, "n_queries": ka.FUSED_QUERIES - 1})),
            ("fewer keys", _config(**{**long, "n_keys": ka.FUSED_KEYS - 1})),
            ("more keys than queries", _config(**{**long, "n_keys": ka.FUSED_QUERIES + 128})),
            ("masked (no query count)", _config(**{**long, "n_queries": None})),
            ("head dim 128", _config(128, **long)),
            ("fp32", _config(dtype=torch.float32, **long)),
            ("precision accurate", _config(precision="accurate", **long)),
            ("triton engine", _config(**{**long, "engine": "triton"})),
            ("interpreter", ka.kernel_config(64, torch.bfloat16, interpret=True, **long))]:
        assert not cfg.dq.fused, f"{what}: {cfg.dq}"


def test_gqa_groups_above_the_measured_run_the_fused_backward_under_given_fused_tiles_only():
    """kernel_config does not see the heads: the launcher's _fused_dkdv keeps its fused tile from GQA groups above
    FUSED_MAX_GROUP (the ones measured, bench/NOTES.md "Session 2026-11-30b" and "30c"), as FusedDq.max_group
    states; given fused tiles run it at any group."""
    n, big = max(ka.FUSED_QUERIES, ka.FUSED_KEYS), ka.FUSED_MAX_GROUP + 1
    for group in range(1, ka.FUSED_MAX_GROUP + 1):
        assert ka._fused_dkdv(64, 64, torch.bfloat16, n, n, (), "auto", group) is not None, group
    assert ka._fused_dkdv(64, 64, torch.bfloat16, n, n, (), "auto", big) is None
    # banded (a band the kernel takes: causal): GQA groups up to FUSED_BAND_MAX_GROUP; a band it does not take (a
    # left window edge): none
    nb, band_big = ka.FUSED_BAND_KEYS, ka.FUSED_BAND_MAX_GROUP + 1
    causal, left = ka._band(True, None, nb, nb), ka._band(True, (nb - 2, None), nb, nb)
    assert ka._fused_dkdv(64, 64, torch.bfloat16, nb, nb, (), "auto", ka.FUSED_BAND_MAX_GROUP, *causal) is not None
    assert ka._fused_dkdv(64, 64, torch.bfloat16, nb, nb, (), "auto", band_big, *causal) is None
    assert ka._fused_dkdv(64, 64, torch.bfloat16, nb, nb, (), "auto", 1, *left) is None
    assert ka._fused_dkdv(64, 64, torch.bfloat16, nb, nb, tuple(_fused_tiles().flat()), "auto", band_big,
                          *causal) is not None
    assert ka._fused_dkdv(64, 64, torch.bfloat16, n, n, tuple(_fused_tiles().flat()), "auto", big) is not None


def test_the_fused_flag_travels_in_the_tiles_the_op_carries():
    cfg = _fused_tiles()
    flat = cfg.flat()
    assert len(flat) == 3 * ka._TILE_FIELDS and ka.KernelConfig.unflat(flat) == cfg
    assert flat[2 * ka._TILE_FIELDS + ka._GLUON_AT] == 1 and flat[-1] == 1  # dQ's gluon and fused flags


def test_arithmetic_states_the_fused_calls():
    """Arithmetic.fused_dq_*: kernel_config's threshold by default, every unbanded call under given fused tiles, none
    in the interpreter, at head dim 128 or with the flag off; those calls' dK/dV tile is the long calls'."""
    a = ka.arithmetic(torch.bfloat16, head_dim=64, interpret=False)
    assert (a.fused_dq_queries, a.fused_dq_keys, a.block_k_dq_fused) == (ka.FUSED_QUERIES, ka.FUSED_KEYS, 128), a
    assert (a.fused_dq_max_group, a.fused_dq_keys_at_most_queries) == (ka.FUSED_MAX_GROUP, True), a
    assert a.fused_rotate_keys == ka.FUSED_ROTATE_KEY_TILES * 128, a
    assert (a.block_k_dkdv_long, a.block_q_long) == (128, 128), a
    assert a.block_k_dq == 64  # the long calls that run the dQ kernel (larger GQA, N_k > N_q): gluon_bwd's key tile
    a = ka.arithmetic(torch.float16, head_dim=64, interpret=False, tiles=_fused_tiles(torch.float16))
    assert (a.fused_dq_queries, a.fused_dq_keys, a.block_k_dq_fused) == (1, 1, 128), a
    assert (a.fused_dq_max_group, a.fused_dq_keys_at_most_queries) == (None, False), a
    for what, a in [("interpreter", ka.arithmetic(torch.bfloat16, head_dim=64, interpret=True)),
                    ("d = 128", ka.arithmetic(torch.bfloat16, head_dim=128, interpret=False)),
                    ("fp32", ka.arithmetic(torch.float32, head_dim=64, interpret=False)),
                    ("flag off", ka.arithmetic(torch.bfloat16, head_dim=64, interpret=False,
                                               tiles=_config(engine="gluon")))]:
        assert a.fused_dq_keys is None and a.block_k_dq_fused is None, f"{what}: {a}"


def test_ours_precision_states_the_fused_dq_sum_for_the_calls_that_run_it():
    from flashcheck.adapters import ours_precision
    from flashcheck.proofs.bounds import FusedDq

    p = ours_precision(torch.bfloat16, head_dim=64, interpret=False)
    rotate = ka.FUSED_ROTATE_KEY_TILES * 128
    assert p.fused_dq == FusedDq(queries=ka.FUSED_QUERIES, keys=ka.FUSED_KEYS, block_k=128, value_dim=64,
                                 rotate_keys=rotate, max_group=ka.FUSED_MAX_GROUP, keys_at_most_queries=True,
                                 band_keys=ka.FUSED_BAND_KEYS, band_max_group=ka.FUSED_BAND_MAX_GROUP), p.fused_dq
    n = ka.FUSED_KEYS
    fused = p.for_call(False, None, n, n, 64, 1)
    assert (fused.dq_accumulation, fused.dq_key_tile) == ("blocked", 128), fused
    # the dK/dV query tiles in the rotated order up to the launcher's key-tile count, ascending beyond
    assert fused.dkdv_rotated == (n <= rotate), fused
    longer = max(n, rotate + 1)
    assert (p.for_call(False, None, longer, longer, 64, 1).dkdv_rotated,
            p.for_call(False, None, rotate, rotate, 64, 1).dkdv_rotated) == (False, True)
    assert fused.block_k == 128 and fused.block_k_dkdv == 128  # the long calls' forward and dK/dV tiles
    # causal calls (bands without a left edge) from FUSED_BAND_KEYS keys, GQA groups up to FUSED_BAND_MAX_GROUP, in the
    # descending order (the dK/dV kernel's chains)
    nb = ka.FUSED_BAND_KEYS
    for causal, window in [(True, None), ("bottom_right", None), (False, (None, 0)), (True, (nb, None))]:
        banded = p.for_call(causal, window, nb, nb, 64, ka.FUSED_BAND_MAX_GROUP)
        assert (banded.dq_accumulation, banded.dq_key_tile, banded.dkdv_rotated) == ("blocked", 128, False), (
            causal, window, banded)
    # the kernel runs the fused form for dv = d only (_fused_dkdv): another dv, or none given, is the dQ kernel's sum
    for what, call in [("causal, no group", p.for_call(True, None, nb, nb, 64)),
                       ("causal, fewer keys", p.for_call(True, None, nb - 1, nb, 64, 1)),
                       ("causal, larger GQA", p.for_call(True, None, nb, nb, 64, ka.FUSED_BAND_MAX_GROUP + 1)),
                       ("a left window edge", p.for_call(True, (nb - 2, None), nb, nb, 64, 1)),
                       ("causal, more keys than queries", p.for_call("bottom_right", None, nb + 1, nb, 64, 1)),
                       ("fewer queries", p.for_call(False, None, n, n - 1, 64)),
                       ("no query count", p.for_call(False, None, n)), ("dv 32", p.for_call(False, None, n, n, 32)),
                       ("no dv", p.for_call(False, None, n, n)),
                       ("larger GQA", p.for_call(False, None, n, n, 64, ka.FUSED_MAX_GROUP + 1)),
                       ("no group", p.for_call(False, None, n, n, 64)),
                       ("more keys than queries", p.for_call(False, None, n + 1, n, 64, 1))]:
        assert call.dq_accumulation is None, f"{what}: {call}"
    assert ours_precision(torch.bfloat16, head_dim=64, interpret=True).fused_dq is None


def test_the_fused_launch_lists_the_kernel_arguments_in_order():
    from flashcheck.kernels import gluon_bwd_fused

    q, kv = ka.Layout.dense("bfloat16", (2, 4, 300, 64)), ka.Layout.dense("bfloat16", (2, 2, 257, 64))
    g = _fused_tiles()
    launch = ka._gluon_fused_launch(q, kv, False, 0, 0, g.dkdv)
    assert ka._arguments_in_order(gluon_bwd_fused.attn_bwd_fused_gluon_kernel, launch, 11)
    assert launch.grid == (3, 4) and dict(launch.constexprs)["GROUP"] == 2, launch


def test_full_tile_turn_counts_the_key_tiles_that_add_before_each_in_the_rotated_order():
    """gluon_bwd_fused.full_tile_turn (the writer's wait target, plain integer arithmetic) against the order it states
    (the emulation's rotated_add_ranks: key tile r visits full query tile q at step (q − r) mod n_full, q takes the
    adds by (step, r)); every count from 0 to n_kt − 1 once a query tile, so no two programs add at once and none
    waits for itself."""
    from flashcheck.kernels.gluon_bwd_fused import full_tile_turn
    from flashcheck.proofs.emulation import rotated_add_ranks

    turn = full_tile_turn.fn  # the jitted function's Python source, on Python ints
    for n_full in range(1, 20):
        for n_kt in range(1, 50):
            for q in range(n_full):
                by_order = rotated_add_ranks(q, n_kt, n_full)
                got = [turn(q, r, n_full, n_kt) for r in by_order]
                assert got == list(range(n_kt)), f"n_full {n_full}, n_kt {n_kt}, query tile {q}: turns {got}"


BAND_SHAPES = [(9, 9), (16, 7), (13, 10), (5, 17), (12, 12)]
BANDS = [(True, None), ("bottom_right", None), (False, (None, 2)), (False, (3, 1)), ("bottom_right", (5, None)),
         (False, (0, 0)), (True, (None, 3)), (False, (None, 30))]


def test_the_launcher_and_the_precision_take_the_same_bands():
    """attention._fused_band (on the kernel's offsets) and precision.fused_band (on the call's arguments) agree on
    every band and shape here, and each takes and refuses some."""
    from flashcheck.proofs.bounds.precision import fused_band

    seen = set()
    for nq, nk in BAND_SHAPES:
        for causal, window in BANDS:
            want = fused_band(causal, window, nq, nk)
            got = ka._fused_band(*ka._band(causal, window, nq, nk), nq, nk)
            assert got == want, (f"N_q {nq}, N_k {nk}, causal {causal}, window {window}: launcher {got}, "
                                 f"Precision {want}")
            seen.add(got)
    assert seen == {True, False}


def test_band_tile_turn_counts_the_higher_key_tiles_that_see_each_query_tile():
    """gluon_bwd_fused.band_tile_turn (the writer's wait target under a band, plain integer arithmetic) against the
    order it states, on every band the launcher gives the kernel (attention._fused_band): each query tile takes the
    partials of the key tiles that visit it (the emulation's port of kernels/tiles.py band ranges, the dK/dV kernel's)
    from the highest down; every count from 0 on once a query tile. Causal both alignments, windows without a left
    edge, ragged N_q and N_k, tiles of 4 x 4. (Where a key tile sees no row, its rounded range still visits a query
    tile, with a turn of -1: those bands are not taken.)"""
    from flashcheck.kernels.gluon_bwd_fused import band_tile_turn
    from flashcheck.proofs.emulation import _Band, _band_range

    turn, bm, bn = band_tile_turn.fn, 4, 4
    taken = 0
    for nq, nk in BAND_SHAPES:
        for causal, window in BANDS:
            if not ka._fused_band(*ka._band(causal, window, nq, nk), nq, nk):
                continue
            taken += 1
            band = _Band.of(causal, window, nq, nk)
            n_kt = -(-nk // bn)
            seen = {}  # query tile start -> key tile starts that visit it
            for j0 in range(0, nk, bn):
                lo, _, _, hi = _band_range(j0, min(j0 + bn, nk), nq, band.transposed(), bm)
                for m0 in range(lo, hi, bm):
                    seen.setdefault(m0, []).append(j0)
            for m0, starts in seen.items():
                got = [turn(m0, j0, nq, n_kt, band.off_hi, bm, bn) for j0 in sorted(starts, reverse=True)]
                assert got == list(range(len(starts))), (
                    f"N_q {nq}, N_k {nk}, causal {causal}, window {window}, query tile {m0}: turns {got}")
    assert taken >= 10, taken


def test_the_fused_launch_rotates_only_where_a_heads_key_tile_programs_all_fit():
    q, kv = ka.Layout.dense("bfloat16", (1, 4, 4096, 64)), ka.Layout.dense("bfloat16", (1, 4, 4096, 64))
    t = _fused_tiles().dkdv
    assert ka._gluon_fused_launch(q, kv, False, 0, 0, t, 132).ints[3] == 1  # 32 key tiles
    assert ka._gluon_fused_launch(q, kv, False, 0, 0, t, 16).ints[3] == 0  # more than the SMs
    long = ka.Layout.dense("bfloat16", (1, 4, 128 * (ka.FUSED_ROTATE_KEY_TILES + 1), 64))
    assert ka._gluon_fused_launch(q, long, False, 0, 0, t, 100000).ints[3] == 0


def test_a_fused_tile_runs_the_fused_kernel_on_unmasked_calls_unbanded_or_with_a_band_it_takes_only(monkeypatch):
    """Simulated on the CPU (the device check says sm_90, nothing runs): the fused tiles' unbanded call launches the
    fused kernel alone after the preprocess, and so does a causal one (a band without a left edge: BAND, the
    descending order, rotate 0); a window with a left edge the two Gluon kernels with the same dQ tile (what the
    Precision's for_call states there: the dQ kernel's chain over 128-key tiles); another device is refused."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(ka, "_gluon_device", lambda device: True)
    made = []
    monkeypatch.setattr(ka, "_launch", lambda kernel, launch, *leading, fitting=False: made.append(launch))
    q, do = (torch.randn(1, 4, 130, 64, dtype=torch.bfloat16) for _ in range(2))
    k, v = (torch.randn(1, 2, 200, 64, dtype=torch.bfloat16) for _ in range(2))
    lse = torch.zeros(1, 4, 130)
    tiles = _fused_tiles().flat()
    fused = ["attn_bwd_preprocess_kernel", "attn_bwd_fused_gluon_kernel"]
    for causal, window, want in [(False, None, fused), ("bottom_right", None, fused),
                                 ("bottom_right", (100, None), ["attn_bwd_preprocess_kernel",
                                                                "attn_bwd_dkdv_gluon_kernel",
                                                                "attn_bwd_dq_gluon_kernel"])]:
        made.clear()
        band = ka._band(causal, window, 130, 200)
        ka._bwd_impl(q, k, v, q, None, lse, do, None, None, [], 0.125, *band, 0, 0, "bf16", tiles)
        assert [x.kernel for x in made] == want, (causal, window, made)
        if want == fused:
            assert dict(made[-1].constexprs)["BAND"] == bool(causal) and made[-1].ints[3] == int(not causal), made
    assert dict(made[-1].constexprs)["BLOCK_N"] == 128  # the dQ kernel over 128-key tiles
    monkeypatch.setattr(ka, "_gluon_device", lambda device: False)
    with pytest.raises(ValueError, match="tiles: a fused dQ tile"):
        ka._bwd_impl(q, k, v, q, None, lse, do, None, None, [], 0.125, False, 0, 0, 0, 0, "bf16", tiles)


@pytest.mark.parametrize("causal", [False, True])
def test_launches_with_gluon_predict_the_fused_records_on_sm90(causal, monkeypatch):
    """launches(gluon=True) (what validate's warm-up compiles) lists the fused launch for a call kernel_config gives
    it, unbanded (FUSED_KEYS) or causal (FUSED_BAND_KEYS: BAND, rotate 0), the record attention()'s backward makes on
    an sm_90 device (simulated on the CPU, nothing runs)."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv("FLASHCHECK_FORWARD_ENGINE", raising=False)
    monkeypatch.setattr(ka, "_gluon_device", lambda device: True)
    made = []
    monkeypatch.setattr(ka, "_launch", lambda kernel, launch, *leading, fitting=False: made.append(launch))
    n = ka.FUSED_BAND_KEYS if causal else ka.FUSED_KEYS
    q, k, v = (torch.randn(1, 2, n, 64, dtype=torch.bfloat16) for _ in range(3))
    dot, p_split, save_res = ka._modes(torch.bfloat16, None, "default", "fp32", True)
    band = ka._band(causal, None, n, n)
    o, lse, o_res = ka._fwd_impl(q, k, v, None, [], 0.125, *band, 0, 0, dot, p_split, save_res, [])
    ka._bwd_impl(q, k, v, o, o_res, lse, torch.randn_like(o), None, None, [], 0.125, *band, 0, 0, dot, [])
    want = ka.launches(*(ka.Layout.of(x) for x in (q, k, v)), causal=causal, grad=True, interpret=False, gluon=True)
    assert tuple(made) == want
    assert [x.kernel for x in want][-2:] == ["attn_bwd_preprocess_kernel", "attn_bwd_fused_gluon_kernel"], want
    assert dict(want[-1].constexprs)["BAND"] == causal and want[-1].ints[3] == int(not causal), want[-1]


_COMPILE_FUSED = """
import json, sys
from bench.compile_forward import compile_gluon_fused, sass_counts
out = {f"g{g}": sass_counts(compile_gluon_fused("bfloat16", g)) for g in (1, 2)}
out["g1_band"] = sass_counts(compile_gluon_fused("bfloat16", 1, band=True))
print(json.dumps(out))
"""
# Local-memory instructions (LDL + STL) in the fused kernel's SASS, GQA 1 and 2, as compiled by each Triton version
# when it landed (2026-11-28e; its dK/dV part alone spills 28 / 66 unbanded on 3.6 / 3.9: the partial's 32 registers
# a thread and the stage's store come on top), timed then at 1.04-1.13x the two kernels (bench/fused_threshold.py).
# A change that spills more is timed again before it lands. The LSE read first (2026-11-30b): 3.6 g2 152 -> 120; 3.9
# g2 345 -> 357 (its tile loops 269 -> 281; the device's 3.6 timed it, GQA 1 16k 1.018x, 8k 0.999x). The rotated order
# (2026-11-30b): 3.6 g1 59, g2 120 -> 157 (0.83x the two kernels at GQA 2), 3.9 g1 64 -> 66, g2 357 -> 343; timed on
# 3.6 at GQA 1 1.03-1.11x the two kernels (bench/fused_order.py). The head loop unrolled (2026-11-30b): 3.6 g2 151
# (88 in the tile loops, were 129), 3.9 g2 102; GQA 2 then 1.05-1.07x the two kernels. dS before dV's issue
# (2026-11-30c): 3.6 g1 39 (12 in the loops), g2 119, 3.9 g1 0, g2 3 (1.08-1.17x the two kernels); banded (new) 3.6
# g1 141 (85 in the loops), 3.9 151 (1.04-1.05x at causal 4k-16k).
FUSED_LOCAL = {"3.6.0": {"g1": 39, "g2": 119, "g1_band": 141}, "3.9.0": {"g1": 0, "g2": 3, "g1_band": 151}}


def test_the_fused_backward_compiles_for_sm90_with_its_recorded_spills():
    import triton

    from tests.compiled_record import compiled

    got = compiled(_COMPILE_FUSED)
    for name, counts in got.items():
        assert counts["hgmma"] > 0, got
        if triton.__version__ in FUSED_LOCAL:
            assert counts["local"] <= FUSED_LOCAL[triton.__version__][name], (
                f"fused kernel {name}: {counts['local']} local-memory instructions, recorded "
                f"{FUSED_LOCAL[triton.__version__][name]} for Triton {triton.__version__}")


# ------------------------------------------------------------------------------------------------ GPU: the outputs

CASES = [
    Case(Shape(2, 4, 4, 256, 256, 64), seed=11),
    Case(Shape(1, 4, 2, 200, 333, 64), seed=12),  # GQA 2, ragged, Nq != Nk
    Case(Shape(1, 2, 2, 390, 130, 64), seed=13),  # more queries than keys
    Case(Shape(1, 2, 2, 1, 129, 64), seed=14),  # one query row
    Case(Shape(1, 2, 2, 129, 1, 64), seed=15),  # one key
    # bands the kernel takes (no left edge, every key seen: attention._fused_band), the descending order
    Case(Shape(1, 4, 4, 300, 300, 64), causal=True, seed=16),  # ragged, a diagonal inside two query tiles
    Case(Shape(1, 2, 2, 390, 260, 64), causal="bottom_right", seed=17),  # 130 rows see no key (dQ 0 there)
    Case(Shape(1, 4, 2, 400, 400, 64), causal=True, values="large_logits", seed=18),  # GQA 2 under given tiles
    Case(Shape(1, 2, 2, 300, 300, 64), window=(None, 64), seed=19),  # a window without a left side
]


@pytest.mark.gpu
@needs_sm90
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_the_fused_backward_is_within_bound(case, dtype):
    tiles = _fused_tiles(getattr(torch, dtype))
    inp = materialize(case, dtype)
    out = run_kernel(inp, case, dtype, backward=True, tiles=tiles)
    prec = kernel_precision(dtype, case.shape.d, tiles=tiles)
    assert prec.for_call(case.causal, case.window, case.shape.Nk, case.shape.Nq,
                         case.shape.dv).dq_accumulation == "blocked"
    _assert_all_within(inp, case, dtype, out, prec)


def _grads(q, k, v, do, tiles, causal=False):
    from flashcheck.kernels import attention

    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    o = attention(q, k, v, tiles=tiles, causal=causal)
    return torch.autograd.grad(o, (q, k, v), do)


@pytest.mark.gpu
@needs_sm90
@pytest.mark.parametrize("rotated", [False, True], ids=["descending", "rotated"])
def test_fused_gradients_are_the_same_run_to_run_and_unrotated_dk_dv_are_the_two_kernels(rotated, monkeypatch):
    """dQ, dK, dV bit for bit run to run in both orders (GQA 2, ragged N_q = 700 over 5 full query tiles, N_k = 1000
    over 8 key tiles: more key tiles than full query tiles); in the descending order (FUSED_ROTATE_KEY_TILES = 0) dK
    and dV are the two kernels' bit for bit (the same query tiles in the same order); rotated, each key block's
    query tiles come in another order (the Precision's dkdv_rotated), and dQ's adds too."""
    monkeypatch.setattr(ka, "FUSED_ROTATE_KEY_TILES", ka.FUSED_ROTATE_KEY_TILES if rotated else 0)
    ka._gluon_fused_launch.cache_clear()
    g = torch.Generator(device="cuda").manual_seed(0)
    q, do = (torch.randn(2, 4, 700, 64, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    k, v = (torch.randn(2, 2, 1000, 64, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    fused = _fused_tiles()
    plain = ka.KernelConfig(fused.fwd, fused.dkdv, replace(fused.dq, fused=False))
    a, b, c = _grads(q, k, v, do, fused), _grads(q, k, v, do, fused), _grads(q, k, v, do, plain)
    ka._gluon_fused_launch.cache_clear()
    for name, x, y, z in zip(("dQ", "dK", "dV"), a, b, c):
        np.testing.assert_array_equal(to_numpy(x), to_numpy(y), err_msg=f"{name}: fused, run to run")
        if name != "dQ" and not rotated:
            np.testing.assert_array_equal(to_numpy(x), to_numpy(z), err_msg=f"{name}: fused against the two kernels")
    if rotated:
        assert not torch.equal(a[1], c[1]), "dK: the rotated order gave the two kernels' bits (not rotated?)"


@pytest.mark.gpu
@needs_sm90
@pytest.mark.parametrize("causal", [True, "bottom_right"])
def test_banded_fused_gradients_are_the_same_run_to_run_and_dk_dv_are_the_two_kernels(causal):
    """Under a causal band (the descending order, no rotation) dQ, dK, dV bit for bit run to run, and dK, dV the two
    kernels' bit for bit (each key block's query tiles in the dK/dV kernel's order: partial first, then the full ones
    ascending). GQA 2, ragged N_q = 700, N_k = 600 (bottom-right: the first 100 rows see no key)."""
    g = torch.Generator(device="cuda").manual_seed(2)
    q, do = (torch.randn(2, 4, 700, 64, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    k, v = (torch.randn(2, 2, 600, 64, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    fused = _fused_tiles()
    plain = ka.KernelConfig(fused.fwd, fused.dkdv, replace(fused.dq, fused=False))
    a, b, c = (_grads(q, k, v, do, t, causal) for t in (fused, fused, plain))
    for name, x, y, z in zip(("dQ", "dK", "dV"), a, b, c):
        np.testing.assert_array_equal(to_numpy(x), to_numpy(y), err_msg=f"{name}: banded fused, run to run")
        if name != "dQ":
            np.testing.assert_array_equal(to_numpy(x), to_numpy(z), err_msg=f"{name}: banded fused, the two kernels")
    if causal == "bottom_right":
        assert not a[0][:, :, :100].any(), "dQ of rows that see no key is not 0"


@pytest.mark.gpu
@needs_sm90
def test_the_fused_backward_reads_strided_layouts_as_their_values():
    """(B, N, H, d) storage seen as (B, H, N, d), and a view at an odd offset (not TMA-readable: copied): the
    gradients are the contiguous copy's, bit for bit."""
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v, do = (torch.randn(2, 300, 4, 64, device="cuda", dtype=torch.bfloat16, generator=g).transpose(1, 2)
                   for _ in range(4))
    odd = torch.randn(2 * 4 * 300 * 64 + 1, device="cuda", dtype=torch.bfloat16, generator=g)[1:].view(2, 4, 300, 64)
    fused = _fused_tiles()
    for x in (q, odd):
        got = _grads(x, k, v, do, fused)
        want = _grads(x.contiguous(), k.contiguous(), v.contiguous(), do.contiguous(), fused)
        for name, a, b in zip(("dQ", "dK", "dV"), got, want):
            np.testing.assert_array_equal(to_numpy(a), to_numpy(b), err_msg=name)

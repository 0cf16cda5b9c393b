"""The Gluon forward engine (kernels/gluon_fwd.py, issue 10): which calls it runs, what the bounds read for it, and,
on an H100, its outputs within the derived bounds on every kind of call in its domain (ragged N, Nq != Nk, both
causal alignments, windows, GQA, N = 1, fully masked rows, strided layouts, the backward after it).

kernel_config gives it by default at d = 128, and its forward at d = 64 for calls with N_k >= LONG_KEYS
(FLASHCHECK_FORWARD_ENGINE "auto"; "gluon" at d = 64 whatever N, "triton" never; or tiles from
kernel_config(engine=...)): the whole GPU suite ran on it (bench/NOTES.md, "Session 2026-11-27g"). Its tiles are
triton_fwd's 128 x 128 / 8 warps with TileConfig.gluon set: calls outside its domain
run triton_fwd with those tiles, so the arithmetic the bounds read is one, and the compile record's claim for gluon
tiles holds for both engines' code (flashcheck.adapters._compiled_record)."""
from __future__ import annotations

import contextlib
import importlib
from dataclasses import replace

import numpy as np
import pytest
import torch

from flashcheck.strategies import Case, Shape, materialize
from tests.test_kernel_support import (CUDA, assert_within, kernel_precision, record, reference_backward,
                                       reference_forward, run_kernel, to_numpy)

ka = importlib.import_module("flashcheck.kernels.attention")  # the module (the package exports the function)


def _gluon_tiles(d: int, dtype: str = "bfloat16"):
    return ka.kernel_config(d, getattr(torch, dtype), interpret=False, engine="gluon")


def _runs_gluon(q, k, v, *, dense=False, sparse=False, band=False, p_split=False, tiles=None, engine="gluon"):
    t = _gluon_tiles(q.shape[3], q.dtype) if tiles is None else tiles
    return ka._gluon_forward(q, k, v, dense, sparse, band, p_split, tuple(t.flat()), False, engine) is not None


def _layout(shape, dtype="bfloat16", aligned=True, strides=None):
    lay = ka.Layout.dense(dtype, shape)
    return ka.Layout(dtype, shape, strides or lay.strides, aligned)


# ------------------------------------------------------------------------------------------------ CPU: the dispatch

def test_kernel_config_gives_gluon_tiles_only_in_its_domain():
    g = _gluon_tiles(128)
    assert (g.fwd.block_m, g.fwd.block_n, g.fwd.num_warps, g.fwd.gluon) == (128, 128, 8, True)
    assert g.dkdv.gluon and g.dq.gluon  # gluon_bwd's dK/dV and dQ tiles (branch gluon-bwd)
    assert ka.kernel_config(128, torch.bfloat16, interpret=False, engine="gluon", band=True).fwd == g.fwd
    for d, dtype, precision in ((80, torch.bfloat16, "default"), (128, torch.float32, "default"),
                                (128, torch.float16, "accurate"), (32, torch.float16, "default")):
        assert not ka.kernel_config(d, dtype, interpret=False, precision=precision, engine="gluon").fwd.gluon
    assert not ka.kernel_config(128, torch.bfloat16, interpret=True, engine="gluon").fwd.gluon


def test_the_engine_is_chosen_by_name_and_a_bad_name_is_refused(monkeypatch):
    monkeypatch.delenv("FLASHCHECK_FORWARD_ENGINE", raising=False)
    assert ka.forward_engine() == "auto"  # Gluon at d = 128 only
    assert ka.kernel_config(128, torch.bfloat16, interpret=False).fwd.gluon
    assert not ka.kernel_config(64, torch.bfloat16, interpret=False).fwd.gluon
    assert not ka.kernel_config(96, torch.bfloat16, interpret=False).fwd.gluon
    monkeypatch.setenv("FLASHCHECK_FORWARD_ENGINE", "gluon")
    assert ka.kernel_config(128, torch.bfloat16, interpret=False).fwd.gluon
    assert ka.kernel_config(64, torch.bfloat16, interpret=False).fwd.gluon
    monkeypatch.setenv("FLASHCHECK_FORWARD_ENGINE", "triton")
    assert not ka.kernel_config(128, torch.bfloat16, interpret=False).fwd.gluon
    monkeypatch.setenv("FLASHCHECK_FORWARD_ENGINE", "cuda")
    with pytest.raises(ValueError, match="FLASHCHECK_FORWARD_ENGINE"):
        ka.forward_engine()
    with pytest.raises(ValueError, match="engine"):
        ka.kernel_config(128, torch.bfloat16, interpret=False, engine="fast")


def test_the_gluon_launch_lists_the_kernel_arguments_in_order():
    """The launch record's leading arguments (five descriptors: Q, K, V, O, O_res; LSE, sm_scale), ints and
    constexprs are the kernel's parameters in order: what a direct launch hands to the binary (kernels/attention.py
    _direct)."""
    from flashcheck.kernels import gluon_fwd

    q, k = _layout((2, 4, 300, 128)), _layout((2, 2, 257, 128))
    t = _gluon_tiles(128).fwd
    launch = ka._gluon_launch(q, k, True, 0, 0, True, t)
    assert ka._arguments_in_order(gluon_fwd.attn_fwd_gluon_kernel, launch, 7)
    # three query blocks of 8 heads, banded: PERSISTENT, 24 programs (at most one a multiprocessor)
    assert dict(launch.constexprs)["GROUP"] == 2 and launch.grid == (24, 1)


def test_a_paired_launch_runs_two_query_blocks_a_program(monkeypatch):
    """PAIRED programs (attention._gluon_paired) take blocks n_blocks − 1 − p and p: ceil(n_blocks / 2) programs a
    head, the flag among the constexprs in the kernel's order; unpaired, one program a block."""
    from flashcheck.kernels import gluon_fwd

    q, k = _layout((2, 4, 300, 128)), _layout((2, 2, 257, 128))
    t = _gluon_tiles(128).fwd
    for paired, grid in ((True, (2, 8)), (False, (3, 8))):
        with _launching(monkeypatch, _gluon_paired=_answering(paired), _gluon_persistent=_answering(False)):
            launch = ka._gluon_launch(q, k, True, 0, 0, True, t)
        assert ka._arguments_in_order(gluon_fwd.attn_fwd_gluon_kernel, launch, 7)
        assert dict(launch.constexprs)["PAIRED"] is paired and launch.grid == grid


def test_a_persistent_launch_runs_at_most_one_program_a_multiprocessor(monkeypatch):
    """PERSISTENT programs (attention._gluon_persistent) loop over the query blocks of every head: min(blocks x heads,
    multiprocessors) programs in one grid dimension, the flag among the constexprs in the kernel's order, the batch x
    head count BH after the ints."""
    from flashcheck.kernels import gluon_fwd

    q, k = _layout((2, 4, 300, 128)), _layout((2, 2, 257, 128))
    for sms, grid in ((132, (24, 1)), (5, (5, 1))):
        with _launching(monkeypatch, _gluon_persistent=_answering(True)):
            launch = ka._gluon_launch(q, k, False, 0, 0, False, _gluon_tiles(128).fwd, sms=sms)
        assert ka._arguments_in_order(gluon_fwd.attn_fwd_gluon_kernel, launch, 7)
        c = dict(launch.constexprs)
        assert c["PERSISTENT"] is True and c["PAIRED"] is False and launch.grid == grid, launch
        assert launch.ints[-1] == 8, launch.ints


def test_short_calls_are_persistent_where_their_programs_share_the_blocks_evenly():
    """The launcher's rules: unbanded calls with at most PERSIST_KEYS keys PERSISTENT (attention._gluon_persistent,
    one query block alone included), banded ones with at most BAND_PERSIST_KEYS keys whose static schedule is even
    (attention._persistent_imbalance at most PERSIST_IMBALANCE: on 132 programs 1.5 for 16 heads of 16 causal blocks,
    1.03 for 64); otherwise two query blocks a program (attention._gluon_paired) wherever there are two and at most
    PAIR_KEYS keys (a band's pair is gluon_fwd._consumer_band_pair's: bench/NOTES.md "Session 2026-11-29g"); one
    block alone, or more keys, one a program."""
    from flashcheck.kernels import gluon_fwd

    t = _gluon_tiles(128).fwd
    for nq, nk, heads, band, paired, persistent in (
            (300, 257, 4, True, False, True), (300, 257, 4, False, False, True), (128, 257, 4, True, False, True),
            (128, 257, 4, False, False, True), (2048, 2048, 16, True, True, False),
            (2048, 2048, 64, True, False, True), (300, ka.BAND_PERSIST_KEYS, 4, True, False, True),
            (300, ka.PERSIST_KEYS, 4, False, False, True), (300, ka.BAND_PERSIST_KEYS + 1, 4, True, False, False),
            (300, max(ka.PAIR_KEYS, ka.PERSIST_KEYS) + 1, 4, False, False, False)):
        q, k = _layout((1, heads, nq, 128)), _layout((1, heads // 2, nk, 128))
        launch = ka._gluon_launch(q, k, *ka._band("bottom_right" if band else False, None, nq, nk), False, t, sms=132)
        assert ka._arguments_in_order(gluon_fwd.attn_fwd_gluon_kernel, launch, 7)
        c = dict(launch.constexprs)
        assert (c["PAIRED"], c["PERSISTENT"]) == (paired, persistent), (nq, nk, heads, band)


def test_the_persistent_imbalance_is_the_banded_schedules():
    """attention._persistent_imbalance reads gluon_fwd's banded PERSISTENT order (item_w, item_block), worked by hand:
    4 causal blocks (1-4 key tiles) of 2 heads on 3 programs; items w = 0..7 are blocks 3, 2, 1, 0 of head 0, then of
    head 1 (4, 3, 2, 1, 4, 3, 2, 1 tiles); round 0 gives programs 0, 1, 2 items 0, 1, 2, round 1 (reversed) items 5,
    4, 3, round 2 items 6, 7 to programs 0, 1: loads 9, 8, 3 against a mean of 20 / 3. Fewer items than programs:
    one each, the heaviest block the least any order takes (1)."""
    band, lo, hi = ka._band(True, None, 512, 512)
    assert ka._persistent_imbalance(512, 512, lo, hi, 2, 3) == pytest.approx(9 / (20 / 3))
    assert ka._persistent_imbalance(512, 512, lo, hi, 2, 8) == 1.0


def test_the_launchers_key_tiles_are_the_kernels():
    """attention._key_tiles (the launcher's count of a query block's key tiles) is kernels/tiles.py `_band_range`'s
    hi − lo over the tile, as proofs/emulation.py states it apart, on causal, window and one-sided bands."""
    from flashcheck.proofs.emulation import _Band, _band_range

    for nq, nk, causal, window in ((300, 257, True, None), (130, 390, "bottom_right", (31, 4)),
                                   (1000, 1000, False, (0, 200)), (77, 700, "top_left", None),
                                   (512, 64, False, (5, 5))):
        band = _Band.of(causal, window, nq, nk)
        on, lo_off, hi_off = ka._band(causal, window, nq, nk)
        assert (band.on, band.off_lo, band.off_hi) == (on, lo_off, hi_off), (nq, nk, causal, window)
        for a0 in range(0, nq, 128):
            a1 = min(a0 + 128, nq)
            lo, _, _, hi = _band_range(a0, a1, nk, band, 128)
            assert ka._key_tiles(a0, a1, nk, lo_off, hi_off, 128) == (hi - lo) // 128, (nq, nk, causal, window, a0)


@pytest.mark.parametrize("version_wide", [True, False])
def test_a_wide_launch_runs_three_consumer_warpgroups_a_program(version_wide, monkeypatch):
    """WIDE programs (attention._gluon_wide: unbanded, unpaired, d = 64, at least WIDE_ROWS queries and keys, a Triton
    among WIDE_TRITONS) hold 192 query rows, three consumer warpgroups' 64: ceil(N_q / 192) programs a head; banded,
    d = 128, fewer rows, or another Triton: 128."""
    import triton

    from flashcheck.kernels import gluon_fwd

    n = ka.WIDE_ROWS
    with _launching(monkeypatch, WIDE_TRITONS=(triton.__version__, ) if version_wide else ("0.0.", )):
        for d, nq, nk, band, wide in ((64, n + 4, n + 100, False, version_wide), (64, n + 4, n + 100, True, False),
                                      (64, n - 1, n + 100, False, False), (64, n + 4, n - 1, False, False),
                                      (128, n + 4, n + 100, False, False)):
            q, k = _layout((2, 4, nq, d)), _layout((2, 2, nk, d))
            launch = ka._gluon_launch(q, k, band, 0, nk - nq if band else 0, False, _gluon_tiles(d).fwd)
            block_m = 192 if wide else 128
            assert ka._arguments_in_order(gluon_fwd.attn_fwd_gluon_kernel, launch, 7)
            assert dict(launch.constexprs)["BLOCK_M"] == block_m, (d, nq, nk, band)
            assert launch.grid == (-(-nq // block_m), 8), (d, nq, nk, band)


def _answering(value: bool):
    """A launch rule (attention._gluon_paired, _gluon_wide) that answers `value` whatever the call."""
    return lambda *args: value


@contextlib.contextmanager
def _launching(monkeypatch, **attributes):
    """kernels/attention.py's `attributes` (launch rules, constants) replaced inside, the cached launch records
    cleared on the way in and out: no other test sees a forced record."""
    with monkeypatch.context() as m:
        for name, value in attributes.items():
            m.setattr(ka, name, value)
        ka._gluon_launch.cache_clear()
        try:
            yield
        finally:
            ka._gluon_launch.cache_clear()


def test_gluon_runs_the_calls_in_its_domain_and_only_those():
    q = _layout((2, 4, 300, 128))
    kv = _layout((2, 2, 257, 128))
    assert _runs_gluon(q, kv, kv) and _runs_gluon(q, kv, kv, band=True)
    # (B, N, H, d) storage seen as (B, H, N, d): strides in 16-byte multiples, fine for TMA
    assert _runs_gluon(_layout((2, 4, 300, 128), strides=(300 * 4 * 128, 128, 4 * 128, 1)), kv, kv)
    assert not _runs_gluon(q, kv, kv, dense=True)  # dense masks: triton_fwd
    assert not _runs_gluon(q, kv, kv, sparse=True)
    assert not _runs_gluon(q, kv, kv, p_split=True)
    assert not _runs_gluon(q, _layout((2, 2, 257, 128), aligned=False), kv)  # TMA needs a 16-byte aligned base
    assert not _runs_gluon(q, _layout((2, 2, 257, 128), strides=(257 * 2 * 136, 257 * 136, 136 + 4, 1)), kv)
    assert not _runs_gluon(_layout((2, 4, 300, 128), strides=(0, 300 * 128, 128, 1)), kv, kv)  # broadcast batch
    # no key (a TMA box needs a row), even a slice of a larger tensor whose strides TMA would take: triton_fwd's
    empty = _layout((2, 2, 0, 128), strides=(257 * 2 * 128, 257 * 128, 128, 1))
    assert not _runs_gluon(q, empty, empty)
    assert not _runs_gluon(_layout((2, 4, 300, 64)), _layout((2, 2, 257, 64)), _layout((2, 2, 257, 128)))  # d != dv
    assert not _runs_gluon(_layout((1, 1, 9, 128), "float32"), _layout((1, 1, 9, 128), "float32"),
                           _layout((1, 1, 9, 128), "float32"))
    tri = ka.kernel_config(128, torch.bfloat16, interpret=False, engine="triton")
    assert not _runs_gluon(q, kv, kv, tiles=tri)  # tiles without the flag: triton_fwd


def test_the_arithmetic_of_gluon_tiles_is_one_tile_banded_or_not():
    a = ka.arithmetic(torch.bfloat16, head_dim=128, interpret=False, tiles=_gluon_tiles(128))
    assert (a.block_k, a.block_q_fwd, a.block_k_band, a.block_q_fwd_band, a.l_accumulate) == (128, 128, None, None,
                                                                                             "float64")
    a = ka.arithmetic(torch.float16, head_dim=64, interpret=False, tiles=_gluon_tiles(64, "float16"))
    assert (a.block_k, a.block_q_fwd) == (128, 128)


def test_the_rowsum_claim_for_gluon_tiles_holds_for_both_engines(monkeypatch):
    """Gluon tiles' rowsum depth is the deeper of gluon_fwd's and triton_fwd's (same tiles) records, None where either
    lacks one: a call outside gluon_fwd's domain runs triton_fwd."""
    import triton

    from flashcheck import adapters

    configs = adapters._compiled_configs(triton.__version__)
    if configs is None:
        pytest.skip(f"no compile record for Triton {triton.__version__}")
    for d in (64, 128):
        tiles = _gluon_tiles(d)
        rec = adapters._compiled_record("bfloat16", "bf16", d, "default", tiles)
        depths = [c["rowsum_depth"] for c in configs if (c["dtype"], c["block_d"], c["block_m"], c["block_n"],
                                                         c["num_warps"], c["p_split"]) == ("bfloat16", d, 128, 128,
                                                                                           8, False)]
        assert len(depths) == 2, depths  # one entry per engine
        want = None if None in depths else max(depths)
        assert rec is not None and rec["rowsum_depth"] == want and rec["exp_argument"] == "unknown", rec
    fake = [dict(c) for c in configs if c.get("engine") != "gluon"]
    monkeypatch.setattr(adapters, "_compiled_configs", lambda version: tuple(fake))
    assert adapters._compiled_record("bfloat16", "bf16", 128, "default", _gluon_tiles(128)) is None


_COMPILE = """
import json
from bench.compile_forward import compile_gluon, rowsum_depths, sass_counts
from bench.sass_defs import sass_of, undefined_descriptor_reads
out = {}
for name, d, band, paired, block_m, persistent in (
        ("banded", 128, True, False, 128, False), ("paired", 128, False, True, 128, False),
        ("banded_paired", 128, True, True, 128, False), ("wide", 64, False, False, 192, False),
        ("persistent", 128, False, False, 128, True), ("persistent_d64", 64, False, False, 128, True),
        ("banded_persistent", 128, True, False, 128, True)):
    ck = compile_gluon("bfloat16", d, band, True, 2 if d == 128 else 3, paired=paired, block_m=block_m,
                       persistent=persistent)
    ptx, sass = ck.asm["ptx"], sass_of(ck)
    out[name] = {"d": d, "wgmma": ptx.count("wgmma.mma_async"), "setmaxnreg": "setmaxnreg" in ptx,
                 "rowsum": rowsum_depths(ptx), "stale": len(undefined_descriptor_reads(sass)),
                 **sass_counts(ck, sass=sass)}
print(json.dumps(out))
"""


def test_gluon_forward_compiles_for_sm90_with_the_recorded_rowsum_tree():
    """The kernel builds for sm_90 without a GPU (in a process of its own: under TRITON_INTERPRET tiles.py's
    functions are the interpreter's, which Gluon cannot call), and its tile rowsum is the record's tree: every rowsum
    covers the 128 keys of the tile (plus alpha's depth-0 sinks), no deeper than the record says. The PAIRED build
    (two copies of the block code, attention._gluon_paired; under a band one unpipelined loop over the light block's
    tiles and the heavy one's partial ones, gluon_fwd._consumer_band_pair) and the WIDE one (three consumer warpgroups
    at d = 64 and 160 registers, attention._gluon_wide) likewise, and keep everything in registers (a local-memory load
    or store in the SASS is a spill). The PERSISTENT builds (a loop around the block, attention._gluon_persistent)
    likewise, and no wgmma reads a descriptor some path leaves unwritten (bench/sass_defs.py: what ptxas 12.8 did to
    a loop around the block, bench/NOTES.md "Session 2026-11-29i"); nor does any other build."""
    import triton

    from flashcheck import adapters
    from tests.compiled_record import compiled

    got = compiled(_COMPILE)
    configs = adapters._compiled_configs(triton.__version__) or ()
    for name, g in got.items():
        (entry,) = [c for c in configs if c.get("engine") == "gluon" and (c["dtype"], c["block_d"]) == ("bfloat16",
                                                                                                       g["d"])]
        assert g["wgmma"] > 0 and g["setmaxnreg"], (name, g)
        r = g["rowsum"]
        assert set(r["widths"]) == {1, 128}, (name, r)
        assert max(r["depths"]) <= entry["rowsum_depth"], (name, r, entry)
    assert got["paired"]["local"] == 0 and got["banded_paired"]["local"] == 0, got
    assert all(got[x]["local"] == 0 for x in ("persistent", "persistent_d64", "banded_persistent")), got
    assert all(g["stale"] == 0 for g in got.values()), got
    # banded pairs hold one copy of each tile loop (gluon_fwd._consumer_band_pair), as one block a program does
    assert got["banded_paired"]["wgmma"] == got["banded"]["wgmma"], got
    if triton.__version__ in WIDE_LOCAL:
        assert got["wide"]["local"] <= WIDE_LOCAL[triton.__version__], (
            f"WIDE build: {got['wide']['local']} local-memory instructions, recorded {WIDE_LOCAL[triton.__version__]}"
            f" for Triton {triton.__version__}")


# Local-memory instructions of the forward's WIDE build (three consumer warpgroups at 160 registers, d = 64, O_res
# written: attention._gluon_wide), by Triton version. 3.6 (in attention.WIDE_TRITONS): 12, all in the epilogue (O_res's
# acc − O beside the stores; without O_res none), the tile loops spill-free (SASS, 2026-11-29e); 3.9 (not in it): 33,
# 29 of them inside the tile loops. A change that spills more is timed again before it lands.
WIDE_LOCAL = {"3.6.0": 12, "3.9.0": 33}


def test_gluon_bwd_runs_the_backwards_in_its_domain_and_lists_its_arguments_in_order():
    """gluon_bwd's dK/dV and dQ kernels (branch gluon-bwd): chosen by the tiles' flags, for the tensors of a backward
    in gluon_fwd's domain; their launch records list the kernels' parameters in order."""
    from flashcheck.kernels import gluon_bwd

    q, kv = _layout((2, 4, 300, 128)), _layout((2, 2, 257, 128))
    g = _gluon_tiles(128)
    assert (g.dkdv.block_m, g.dkdv.block_n, g.dkdv.gluon) == (64, 128, True)
    assert (g.dq.block_m, g.dq.block_n, g.dq.gluon) == (128, 64, True)
    t = tuple(g.flat())
    assert ka._gluon_backward(q, kv, kv, q, q, kv, kv, False, False, True, t, False, "gluon") == (g.dkdv, g.dq)
    none = (None, None)
    assert ka._gluon_backward(q, kv, kv, q, q, kv, kv, True, False, True, t, False, "gluon") == none  # dense mask
    assert ka._gluon_backward(q, kv, kv, _layout((2, 4, 300, 128), aligned=False), q, kv, kv, False, False, True, t,
                              False, "gluon") == none  # dO that TMA cannot read
    tri = tuple(ka.kernel_config(128, torch.bfloat16, interpret=False, engine="triton").flat())
    assert ka._gluon_backward(q, kv, kv, q, q, kv, kv, False, False, True, tri, False, "triton") == none
    launch = ka._gluon_dkdv_launch(q, kv, True, 0, 0, g.dkdv)
    assert ka._arguments_in_order(gluon_bwd.attn_bwd_dkdv_gluon_kernel, launch, 9)
    assert launch.grid == (3, 4) and dict(launch.constexprs)["GROUP"] == 2
    launch = ka._gluon_dq_launch(q, kv, True, 0, 0, g.dq)
    assert ka._arguments_in_order(gluon_bwd.attn_bwd_dq_gluon_kernel, launch, 8)
    assert launch.grid == (3, 8) and dict(launch.constexprs)["HEAVY_FIRST"]


@pytest.mark.parametrize("d, nk, causal", [(128, 257, "bottom_right"), (128, 64, False), (64, ka.LONG_KEYS, False),
                                            (64, 100, "bottom_right"), (64, ka.SHORT_KEYS, False),
                                            (64, ka.SHORT_KEYS, "bottom_right")])
def test_launches_with_gluon_are_the_records_the_launcher_makes_on_sm90(d, nk, causal, monkeypatch):
    """launches(gluon=True), what validate's warm-up keys its compiles on (flashcheck.adapters.ours_compile_key, with
    gluon_device()), predicts the records attention() and its backward launch on an sm_90 device: the Gluon kernels'
    where they run the call, triton's elsewhere (d = 64 below SHORT_KEYS keys; the backward below LONG_KEYS banded).
    Simulated on the CPU: the device check says sm_90, the launches are recorded, nothing runs."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv("FLASHCHECK_FORWARD_ENGINE", raising=False)
    monkeypatch.setattr(ka, "_gluon_device", lambda device: True)
    made = []
    monkeypatch.setattr(ka, "_launch", lambda kernel, launch, *leading, fitting=False: made.append(launch))
    q = torch.randn(1, 4, 130, d, dtype=torch.bfloat16)
    k, v = (torch.randn(1, 2, nk, d, dtype=torch.bfloat16) for _ in range(2))
    # attention()'s forward and backward below its CPU-tensor checks, with its arguments for these calls
    dot, p_split, save_res = ka._modes(torch.bfloat16, None, "default", "fp32", True)
    band = ka._band(causal, None, 130, nk)
    o, lse, o_res = ka._fwd_impl(q, k, v, None, [], d ** -0.5, *band, 0, 0, dot, p_split, save_res, [])
    ka._bwd_impl(q, k, v, o, o_res, lse, torch.randn_like(o), None, None, [], d ** -0.5, *band, 0, 0, dot, [])
    want = ka.launches(*(ka.Layout.of(x) for x in (q, k, v)), causal=causal, grad=True, interpret=False, gluon=True)
    assert tuple(made) == want
    gluon = d == 128 or nk >= (ka.LONG_KEYS if causal else ka.SHORT_KEYS)
    fwd = d == 128 or nk >= ka.SHORT_KEYS
    assert [x.kernel.endswith("_gluon_kernel") for x in want] == [fwd, False, gluon, gluon]
    plain = ka.launches(*(ka.Layout.of(x) for x in (q, k, v)), causal=causal, grad=True, interpret=False)
    assert not any(x.kernel.endswith("_gluon_kernel") for x in plain)  # another GPU: triton's records


_COMPILE_BWD = """
import json, sys
from bench.compile_forward import compile_gluon_dkdv, compile_gluon_dq, sass_counts
from bench.sass_defs import loads_before_products, sass_of
a = [int(x) for x in sys.argv[1:]]  # dQ's block_n, stages, then one (head dim, block_m, stages) per dK/dV tile
out = {}
for name, ck in [("dq", compile_gluon_dq("bfloat16", 128, True, 2, a[0], a[1]))] + [
        (f"dkdv{m}" + ("" if d == 128 else f"_d{d}"), compile_gluon_dkdv("bfloat16", d, True, 2, m, st))
        for d, m, st in zip(a[2::3], a[3::3], a[4::3])]:
    sass = sass_of(ck)
    out[name] = dict(sass_counts(ck, sass=sass), loads_first=loads_before_products(sass))
print(json.dumps(out))
"""


# Local-memory instructions (LDL + STL) in the SASS of the dK/dV kernel's 64-row tile, d = 128, GQA 2, banded, as
# compiled by each Triton version when the tile was chosen: spilled temporaries (Sᵀ, dPᵀ, Pᵀ, dSᵀ beside dK, dV in 240
# registers), measured faster than the spill-free 32-row tile on the H100 (bench/NOTES.md, "Session 2026-11-27g"); since
# LSE and Δ come through the ring (2026-11-28: 117 -> 28 on 3.6, 218 -> 120 on 3.9; the unbanded GQA 1 kernel 57 -> 66
# on 3.6, none on 3.9; the hot loops reload a few loop-invariant values, none of the tile's). A change that spills more
# is timed again before it lands. Branch lpt-order (the programs' order under a band, tiles.grouped_block, computed
# once a program): 28 -> 32 on 3.6, 120 -> 122 on 3.9, all outside the tile loops (their spills the same; to be timed).
DKDV_LOCAL = {"3.6.0": 32, "3.9.0": 122}
# The same count for the d = 64 kernel's 128-row tile, 2-deep ring (GQA 2, banded), taken 2026-11-27h as 1.04-1.18x the
# 64-row tile (bench/NOTES.md): with 128 query columns Sᵀ, dPᵀ (64 registers each) beside dK, dV spill more.
# lpt-order: 252 -> 256 on 3.6 (the tile loops instruction for instruction the same), 303 -> 301 on 3.9.
DKDV64_LOCAL = {"3.6.0": 256, "3.9.0": 303}


def test_gluon_bwd_compiles_for_sm90_with_its_recorded_spills():
    """The dK/dV and dQ kernels build for sm_90 on the CPU (in a process of its own, as the forward's), GQA and
    banded: the dQ kernel keeps everything in registers (a local-memory load or store in the SASS is a spill); the
    dK/dV kernel's 64-row tile spills no more than recorded for this Triton, its 32-row tile nothing; the 64-row
    tile's LSE loads come before each tile's products."""
    import triton

    from tests.compiled_record import compiled

    g, g64 = _gluon_tiles(128), _gluon_tiles(64)
    assert (g.dkdv.block_m, g64.dkdv.block_m) == (64, 128)
    got = compiled(_COMPILE_BWD, g.dq.block_n, g.dq.num_stages, 128, g.dkdv.block_m, g.dkdv.num_stages, 128, 32, 4,
                   64, g64.dkdv.block_m, g64.dkdv.num_stages)
    assert got["dq"]["hgmma"] > 0 and got["dq"]["local"] == 0, got
    assert got["dkdv64"]["hgmma"] > 0, got
    if triton.__version__ in DKDV_LOCAL:
        assert got["dkdv64"]["local"] <= DKDV_LOCAL[triton.__version__], (
            f"dK/dV kernel: {got['dkdv64']['local']} local-memory instructions, recorded "
            f"{DKDV_LOCAL[triton.__version__]} for Triton {triton.__version__}")
    d64 = got["dkdv128_d64"]
    assert d64["hgmma"] > 0, got
    if triton.__version__ in DKDV64_LOCAL:
        assert d64["local"] <= DKDV64_LOCAL[triton.__version__], (
            f"dK/dV kernel at d = 64: {d64['local']} local-memory instructions, recorded "
            f"{DKDV64_LOCAL[triton.__version__]} for Triton {triton.__version__}")
    spill_free = got["dkdv32"]
    assert spill_free["hgmma"] > 0 and spill_free["local"] == 0, spill_free
    # the d = 128 tile reads its LSE slice (64 values: 8 LDS.64 a thread) before issuing Sᵀ and dPᵀ, every tile
    # (gluon_bwd LSE_FIRST: 6.02 -> 5.14 ms at 16k on the H200; main before it: 0 loads there)
    first = got["dkdv64"]["loads_first"]
    assert len(first) >= 2 and min(first) >= g.dkdv.block_m // 8, (
        f"dK/dV kernel, d = 128: LDS.64 before each tile's first product {first}, want >= {g.dkdv.block_m // 8}")


# ------------------------------------------------------------------------------------------------ GPU: the outputs

needs_sm90 = pytest.mark.skipif(not (CUDA and torch.cuda.get_device_capability() == (9, 0)),
                                reason="needs an sm_90 GPU (run on the device machine)")

CASES = [
    Case(Shape(2, 4, 4, 256, 256, 128), seed=1),
    Case(Shape(2, 4, 4, 256, 256, 128), causal=True, seed=2),
    Case(Shape(1, 4, 2, 200, 333, 64), causal="top_left", seed=3),
    Case(Shape(1, 4, 2, 200, 333, 64), causal="bottom_right", seed=4),
    Case(Shape(1, 4, 1, 333, 200, 128), causal="bottom_right", seed=5),  # rows with nothing visible: O 0, LSE -inf
    Case(Shape(1, 2, 2, 130, 390, 128), window=(31, 4), seed=6),
    Case(Shape(1, 2, 2, 1, 1, 128), seed=7),
    Case(Shape(1, 2, 2, 1, 129, 64), causal="bottom_right", seed=8),
    Case(Shape(1, 2, 1, 200, 333, 128), seed=20),  # unbanded d = 128: the ragged key tile pipelined with the full ones
]


def _case_layouts(case, dtype):
    """(q's layout, k's and v's, whether the call is banded) of a dense contiguous case: what the launcher's domain
    checks (_gluon_forward, _gluon_backward, launches) read."""
    q = ka.Layout.dense(dtype, (case.shape.B, case.shape.Hq, case.shape.Nq, case.shape.d))
    kv = ka.Layout.dense(dtype, (case.shape.B, case.shape.Hkv, case.shape.Nk, case.shape.d))
    band, _, _ = ka._band(case.causal, case.window, case.shape.Nq, case.shape.Nk)
    return q, kv, band


@pytest.mark.gpu
@needs_sm90
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_gluon_forward_and_the_backward_after_it_within_bound(case, dtype):
    tiles = _gluon_tiles(case.shape.d, dtype)
    q, kv, band = _case_layouts(case, dtype)
    assert _runs_gluon(q, kv, kv, band=band, tiles=tiles)
    inp = materialize(case, dtype)
    out = run_kernel(inp, case, dtype, backward=True, tiles=tiles)
    _assert_all_within(inp, case, dtype, out, kernel_precision(dtype, case.shape.d, tiles=tiles))


def _assert_all_within(inp, case, dtype, out, prec):
    """O, LSE, dQ, dK, dV of a run (`run_kernel(backward=True)`) against the float64 reference, each within the
    bound of `prec`; the worst ratios recorded."""
    from flashcheck.proofs.bounds import backward_bound, forward_bound

    ref_o, ref_lse = reference_forward(inp, case)
    kw = dict(scale=inp.scale, causal=case.causal, window=case.window, mask=inp.mask, precision=prec)
    fb = forward_bound(inp.q, inp.k, inp.v, **kw)
    r = [assert_within("O", out[0], ref_o, fb.o), assert_within("LSE", out[1], ref_lse, fb.lse)]
    bb = backward_bound(inp.q, inp.k, inp.v, inp.do, **kw)
    ref = reference_backward(inp, case, ref_o, ref_lse)
    r += [assert_within(n, g, w, b) for n, g, w, b in zip(("dQ", "dK", "dV"), out[2:], ref, (bb.dq, bb.dk, bb.dv))]
    record(f"{case} {dtype}: worst |err|/bound {[round(x, 3) for x in r]}")


@pytest.mark.gpu
@needs_sm90
def test_gluon_forward_reads_strided_layouts_as_their_values():
    """(B, N, H, d) storage seen as (B, H, N, d): TMA reads it through its strides; the result is the contiguous
    copy's, bit for bit."""
    from flashcheck.kernels import attention

    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(2, 300, 4, 128, device="cuda", dtype=torch.bfloat16, generator=g).transpose(1, 2)
               for _ in range(3))
    tiles = _gluon_tiles(128)
    assert _runs_gluon(ka.Layout.of(q), ka.Layout.of(k), ka.Layout.of(v), band=True, tiles=tiles)
    o1, l1 = attention(q, k, v, causal=True, return_lse=True, tiles=tiles)
    o2, l2 = attention(q.contiguous(), k.contiguous(), v.contiguous(), causal=True, return_lse=True, tiles=tiles)
    np.testing.assert_array_equal(to_numpy(o1), to_numpy(o2))
    np.testing.assert_array_equal(to_numpy(l1), to_numpy(l2))


@pytest.mark.gpu
@needs_sm90
@pytest.mark.parametrize("scale", [-0.125, 0.0])
def test_gluon_tiles_at_a_scale_not_above_zero_run_triton_fwd(scale):
    """gluon_fwd takes each full tile's running max from the raw logits, rowmax(S) · c (rowmax(fl(S · c)) only for
    c > 0): at a scale <= 0 the launcher runs triton_fwd with the Gluon tiles, bit for bit the call whose forward tile
    does not ask for Gluon."""
    from flashcheck.kernels import attention

    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(1, 2, 300, 128, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    tiles = _gluon_tiles(128)
    plain = ka.KernelConfig(replace(tiles.fwd, gluon=False), tiles.dkdv, tiles.dq)
    o1, l1 = attention(q, k, v, scale=scale, return_lse=True, tiles=tiles)
    o2, l2 = attention(q, k, v, scale=scale, return_lse=True, tiles=plain)
    np.testing.assert_array_equal(to_numpy(o1), to_numpy(o2))
    np.testing.assert_array_equal(to_numpy(l1), to_numpy(l2))


PAIR_CASES = CASES + [
    Case(Shape(2, 2, 1, 1000, 1000, 128), causal="bottom_right", seed=11),  # 8 blocks of 1-8 tiles: the ring's phases
    Case(Shape(1, 2, 2, 1000, 1100, 64), seed=12),  # run on across a program's two blocks (3-deep ring at d = 64)
    Case(Shape(1, 2, 2, 700, 900, 64), window=(200, 0), seed=13),
]


@pytest.mark.gpu
@needs_sm90
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("case", PAIR_CASES, ids=str)
def test_paired_programs_give_every_row_what_one_block_programs_give(case, dtype, monkeypatch):
    """Two query blocks a program (PAIRED) or one: O, LSE and the gradients (the backward reads O_res) bit for bit:
    which program computes a block changes nothing in its arithmetic, odd block counts and blocks without a key
    (rows with nothing visible) included."""
    tiles = _gluon_tiles(case.shape.d, dtype)
    inp = materialize(case, dtype)
    got = []
    for paired in (False, True):
        with _launching(monkeypatch, _gluon_paired=_answering(paired), _gluon_persistent=_answering(False)):
            got.append(run_kernel(inp, case, dtype, backward=True, tiles=tiles))
    for name, a, b in zip(("O", "LSE", "dQ", "dK", "dV"), *got):
        assert not np.isnan(a).any(), f"{name}: NaN (unpaired)"  # NaN is never agreement
        np.testing.assert_array_equal(b, a, err_msg=f"{name}: paired != unpaired")


PERSIST_CASES = PAIR_CASES + [
    Case(Shape(2, 8, 4, 1024, 1024, 128), seed=31),  # 128 blocks: one a program on 132 multiprocessors
    Case(Shape(2, 8, 2, 1000, 1000, 64), seed=32),  # a ragged last key tile
    Case(Shape(1, 4, 1, 333, 200, 128), seed=33),  # GQA 4
    # banded, heaviest first in a snake over the rounds: 16 items on 3 programs, the last round partial
    Case(Shape(2, 8, 2, 1000, 1000, 64), causal="bottom_right", seed=34),
]


@pytest.mark.gpu
@needs_sm90
@pytest.mark.parametrize("programs", [3, None])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("case", PERSIST_CASES, ids=str)
def test_persistent_programs_give_every_row_what_one_block_programs_give(case, dtype, programs, monkeypatch):
    """A program an SM looping over the query blocks (PERSISTENT; `programs` of them: 3, so that each runs many
    blocks through its three Q buffers, or the device's multiprocessors) or one block a program: O, LSE and the
    gradients (the backward reads O_res) bit for bit, banded (heaviest first, a snake over the rounds, the last one
    partial), ragged, GQA and keyless blocks included (bench/NOTES.md "Session 2026-11-29i": under Triton 3.6 a loop
    around the block needs its pipelined Q view apart, bench/sass_defs.py)."""
    tiles = _gluon_tiles(case.shape.d, dtype)
    inp = materialize(case, dtype)
    got = []
    for persistent in (False, True):
        with _launching(monkeypatch, _gluon_paired=_answering(False), _gluon_persistent=_answering(persistent),
                        _sm_count=(lambda device: programs) if programs else ka._sm_count):
            got.append(run_kernel(inp, case, dtype, backward=True, tiles=tiles))
    for name, a, b in zip(("O", "LSE", "dQ", "dK", "dV"), *got):
        assert not np.isnan(a).any(), f"{name}: NaN (one block a program)"  # NaN is never agreement
        np.testing.assert_array_equal(b, a, err_msg=f"{name}: persistent != one block a program")


WIDE_CASES = [
    Case(Shape(1, 2, 2, 1000, 1100, 64), seed=21),  # 6 programs of 192 rows, the last one 40: rows past N_q
    Case(Shape(1, 4, 2, 450, 700, 64), seed=22),  # GQA, a ragged last key tile, 3 programs
    Case(Shape(1, 2, 2, 1, 129, 64), seed=23),  # one query row, two key tiles
]


@pytest.mark.gpu
@needs_sm90
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("case", WIDE_CASES, ids=str)
def test_wide_programs_give_every_row_what_two_warpgroup_programs_give(case, dtype, monkeypatch):
    """Three consumer warpgroups a program (WIDE, 192 rows) or two: O, LSE and the gradients (the backward reads O_res)
    bit for bit (unbanded, a row's key tiles and their order do not depend on the rows a program holds), rows past
    N_q in the last program included."""
    tiles = _gluon_tiles(case.shape.d, dtype)
    inp = materialize(case, dtype)
    got = []
    for wide in (False, True):
        with _launching(monkeypatch, _gluon_paired=_answering(False), _gluon_wide=_answering(wide),
                        _gluon_persistent=_answering(False)):
            got.append(run_kernel(inp, case, dtype, backward=True, tiles=tiles))
    for name, a, b in zip(("O", "LSE", "dQ", "dK", "dV"), *got):
        assert not np.isnan(a).any(), f"{name}: NaN (two warpgroups)"  # NaN is never agreement
        np.testing.assert_array_equal(b, a, err_msg=f"{name}: three warpgroups != two")


LONG_CASES = [
    Case(Shape(1, 4, 2, 200, 4096, 64), causal="bottom_right", seed=9),
    Case(Shape(1, 2, 1, 130, 2100, 64), seed=10),  # a ragged last key tile
    # from LONG_KEYS on: paired programs (N_k <= PAIR_KEYS), then the Gluon backward; banded too (one loop of each kind)
    Case(Shape(1, 2, 1, 256, 2048, 64), seed=16),
    Case(Shape(1, 2, 1, 300, 2048, 64), causal="bottom_right", seed=17),
]


@pytest.mark.gpu
@needs_sm90
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("case", LONG_CASES, ids=str)
def test_auto_runs_the_gluon_kernels_on_long_d64_calls_within_bound(case, dtype, monkeypatch):
    """The default engine at d = 64 with N_k >= LONG_KEYS: gluon_fwd's 128 x 128 tile and gluon_bwd's kernels, the
    outputs within the bounds of the Precision the adapter states for the default tiles (Precision.for_call takes
    the long tile and the backward's outer blocks from the key count: tests/test_long_tile.py)."""
    monkeypatch.delenv("FLASHCHECK_FORWARD_ENGINE", raising=False)
    q, kv, band = _case_layouts(case, dtype)
    assert ka._gluon_forward(q, kv, kv, False, False, band, False, (), False, "auto") is not None
    assert None not in ka._gluon_backward(q, kv, kv, q, q, kv, kv, False, False, band, (), False, "auto")
    inp = materialize(case, dtype)
    out = run_kernel(inp, case, dtype, backward=True)
    prec = kernel_precision(dtype, case.shape.d)
    assert prec.long_keys == ka.LONG_KEYS <= case.shape.Nk
    _assert_all_within(inp, case, dtype, out, prec)


SHORT_CASES = [
    Case(Shape(1, 4, 2, 300, ka.SHORT_KEYS, 64), seed=14),
    # paired programs (N_k <= PAIR_KEYS; 3 blocks: one runs alone), a ragged last key tile (N_q 1024 here took 94 s
    # of bounds a dtype in the GPU suite)
    Case(Shape(1, 2, 1, 384, 2000, 64), seed=15),
]  # (every short call of more than one query block is paired: SHORT_KEYS to LONG_KEYS lies within PAIR_KEYS)


@pytest.mark.gpu
@needs_sm90
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("case", SHORT_CASES, ids=str)
def test_auto_runs_the_gluon_kernels_on_short_unbanded_d64_calls_within_bound(case, dtype, monkeypatch):
    """The default engine at d = 64 on unbanded calls with SHORT_KEYS to LONG_KEYS keys: gluon_fwd's 128 x 128 tile and
    gluon_bwd's kernels; the outputs within the bounds of the Precision the adapter states for the default tiles
    (Precision.for_call takes the short tile and its backward's blocks from the key count and the band:
    tests/test_short_tile.py)."""
    monkeypatch.delenv("FLASHCHECK_FORWARD_ENGINE", raising=False)
    q, kv, _ = _case_layouts(case, dtype)
    assert ka._gluon_forward(q, kv, kv, False, False, False, False, (), False, "auto") is not None
    assert None not in ka._gluon_backward(q, kv, kv, q, q, kv, kv, False, False, False, (), False, "auto")
    inp = materialize(case, dtype)
    out = run_kernel(inp, case, dtype, backward=True)
    prec = kernel_precision(dtype, case.shape.d)
    assert prec.short_keys == ka.SHORT_KEYS <= case.shape.Nk < ka.LONG_KEYS
    _assert_all_within(inp, case, dtype, out, prec)


BAND_SHORT_CASES = [
    Case(Shape(1, 4, 2, 300, ka.SHORT_KEYS, 64), causal="bottom_right", seed=20),
    # a ragged last key tile, a window (several partial tiles a block), Nq > Nk top-left
    Case(Shape(1, 2, 1, 256, 1500, 64), causal=True, window=(700, 0), seed=21),
    Case(Shape(1, 2, 2, 1300, 1100, 64), causal="top_left", seed=22),
]


@pytest.mark.gpu
@needs_sm90
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("case", BAND_SHORT_CASES, ids=str)
def test_auto_runs_the_gluon_forward_on_short_banded_d64_calls_within_bound(case, dtype, monkeypatch):
    """The default engine at d = 64 on banded calls with SHORT_KEYS to LONG_KEYS keys: gluon_fwd's 128 x 128 tile
    (PERSISTENT where attention._gluon_persistent says) and triton_bwd's kernels; the outputs within the bounds of the
    Precision the adapter states for the default tiles (Precision.for_call takes the band tile from band_keys keys:
    tests/test_band_short_tile.py)."""
    monkeypatch.delenv("FLASHCHECK_FORWARD_ENGINE", raising=False)
    q, kv, band = _case_layouts(case, dtype)
    assert band and ka._gluon_forward(q, kv, kv, False, False, band, False, (), False, "auto") is not None
    assert ka._gluon_backward(q, kv, kv, q, q, kv, kv, False, False, band, (), False, "auto") == (None, None)
    inp = materialize(case, dtype)
    out = run_kernel(inp, case, dtype, backward=True)
    prec = kernel_precision(dtype, case.shape.d)
    assert prec.band_keys == ka.SHORT_KEYS <= case.shape.Nk < ka.LONG_KEYS
    _assert_all_within(inp, case, dtype, out, prec)


MASKED_D64_CASES = [
    Case(Shape(1, 2, 1, 200, ka.SHORT_KEYS + 70, 64), mask="random", seed=17),
    Case(Shape(1, 2, 2, 130, 3000, 64), mask="fully_masked_rows", seed=18),
    Case(Shape(1, 2, 1, 130, ka.LONG_KEYS + 30, 64), mask="random", seed=19),  # long: the Gluon tiles' range
]


@pytest.mark.gpu
@needs_sm90
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("case", MASKED_D64_CASES, ids=str)
def test_auto_runs_triton_own_tiles_on_dense_masked_d64_calls_within_bound(case, dtype, monkeypatch):
    """A dense mask keeps the Gluon kernels out (they take none), and their tiles with them, from SHORT_KEYS keys on
    and from LONG_KEYS on: triton_fwd's own 64 x 64 tile (at the 128 x 128 one it ran 0.76-0.82x: bench/
    dense_short.py) and triton_bwd's; the outputs within the bounds of the Precision the adapter states
    (Precision.for_call without a query count: the default tiles)."""
    monkeypatch.delenv("FLASHCHECK_FORWARD_ENGINE", raising=False)
    q, kv, _ = _case_layouts(case, dtype)
    recs = ka.launches(q, kv, kv, mask_shape=(case.shape.Nq, case.shape.Nk), grad=True, interpret=False, gluon=True)
    assert [(r.kernel, dict(r.constexprs)["BLOCK_N"]) for r in recs[:1] + recs[2:]] == [
        ("attn_fwd_kernel", 64), ("attn_bwd_dkdv_kernel", 64), ("attn_bwd_dq_kernel", 64)]
    inp = materialize(case, dtype)
    out = run_kernel(inp, case, dtype, backward=True)
    prec = kernel_precision(dtype, case.shape.d)
    assert prec.short_keys <= case.shape.Nk and prec.for_call(False, None, case.shape.Nk).block_k == 64
    _assert_all_within(inp, case, dtype, out, prec)

"""Banded calls' own forward tile (issue 10): kernel_config gives the d = 128 fp16 / bf16 forward 64 x 64 tiles under
a band (causal, or a window with a side given) and 128 x 128 otherwise (bench/NOTES.md "Session 2026-11-27d"). The
tile is part of the arithmetic the bounds read, so it is stated (Arithmetic.block_k_band, Precision.band_forward)
and the bounds substitute it for banded calls (Precision.banded). The band tile is triton_fwd's: these tests run
under the triton engine (the Gluon kernels keep one tile: test_the_gluon_engine_has_no_band_tile)."""
from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch

from flashcheck.proofs.bounds import BandForward, Precision, backward_bound, forward_bound, is_band

ka = importlib.import_module("flashcheck.kernels.attention")  # the module (the package exports the function)


@pytest.fixture(autouse=True)
def _triton_engine(monkeypatch):
    monkeypatch.setenv("FLASHCHECK_FORWARD_ENGINE", "triton")


def _forward_tile(d: int, causal, window=None, dtype="bfloat16"):
    q = ka.Layout.dense(dtype, (1, 2, 300, d))
    (fwd,) = ka.launches(q, q, q, causal=causal, window=window, interpret=False)
    c = dict(fwd.constexprs)
    return c["BLOCK_M"], c["BLOCK_N"], fwd.num_warps


def test_banded_d128_calls_launch_64x64_tiles():
    assert _forward_tile(128, False) == (128, 128, 8)
    assert _forward_tile(128, "bottom_right") == (64, 64, 4)
    assert _forward_tile(128, False, window=(20, None)) == (64, 64, 4)
    assert _forward_tile(128, False, window=(None, None)) == (128, 128, 8)  # no side given: no band
    assert _forward_tile(64, True) == _forward_tile(64, False) == (64, 64, 4)  # d = 64: one tile


def test_the_arithmetic_states_the_band_tile_where_it_differs():
    a = ka.arithmetic(torch.bfloat16, head_dim=128, interpret=False)
    assert (a.block_k, a.block_q_fwd, a.block_k_band, a.block_q_fwd_band) == (128, 128, 64, 64), a
    for kw in (dict(head_dim=64), dict(head_dim=128, precision="accurate"), dict(head_dim=128, interpret=True),
               dict(head_dim=128, tiles=ka.kernel_config(128, torch.bfloat16, interpret=False))):
        a = ka.arithmetic(torch.bfloat16, **{"interpret": False, **kw})
        assert a.block_k_band is None and a.block_q_fwd_band is None, (kw, a)
    assert ka.arithmetic(torch.float32, head_dim=128, interpret=False).block_k_band is None


def test_ours_precision_carries_the_band_tile():
    from flashcheck.adapters import ours_precision

    band = ours_precision(torch.bfloat16, head_dim=128, interpret=False).band_forward
    assert (band.block_k, band.block_q_fwd) == (64, 64), band
    assert ours_precision(torch.bfloat16, head_dim=64, interpret=False).band_forward is None
    assert ours_precision(torch.float16, head_dim=128, interpret=True).band_forward is None  # 16 x 16 everywhere


@pytest.mark.parametrize("engine", ["auto", "gluon"])
def test_the_gluon_engine_has_no_band_tile(monkeypatch, engine):
    """gluon_fwd runs banded calls with its one 128 x 128 tile: no band tile stated, none substituted."""
    monkeypatch.setenv("FLASHCHECK_FORWARD_ENGINE", engine)
    assert _forward_tile(128, "bottom_right") == _forward_tile(128, False) == (128, 128, 8)
    a = ka.arithmetic(torch.bfloat16, head_dim=128, interpret=False)
    assert (a.block_k, a.block_q_fwd, a.block_k_band, a.block_q_fwd_band) == (128, 128, None, None), a
    from flashcheck.adapters import ours_precision

    assert ours_precision(torch.float16, head_dim=128, interpret=False).band_forward is None


def test_banded_substitutes_the_forward_tile_only_under_a_band():
    p = Precision("bfloat16", "bf16", block_k=128, block_q=64, block_q_fwd=128, rowsum_depth=33,
                  band_forward=BandForward(block_k=64, block_q_fwd=64, rowsum_depth=None))
    assert p.banded(False, None) is p and p.banded(False, (None, None)) is p
    assert p.banded(np.False_, None) is p and p.banded(np.True_, None).block_k == 64  # check_causal admits numpy bools
    for causal, window in ((True, None), ("top_left", None), ("bottom_right", None), (False, (5, None)),
                           (False, (None, 0))):
        assert is_band(causal, window)
        b = p.banded(causal, window)
        assert (b.block_k, b.block_q_fwd, b.rowsum_depth, b.band_forward) == (64, 64, None, None), (causal, window)
        assert b.dq_key_tile == 128 and b.block_q == 64  # the backward's tiles stay
        assert b.banded(causal, window) is b
    with pytest.raises(ValueError, match="band_forward"):
        Precision("bfloat16", "bf16", band_forward=(64, 64))
    with pytest.raises(ValueError, match="BandForward.block_k"):
        BandForward(block_k=0)


def _problem(nq=40, nk=300, d=16, seed=0):
    g = np.random.default_rng(seed)
    return [g.standard_normal((1, 1, n, d)) for n in (nq, nk, nk)] + [g.standard_normal((1, 1, nq, d))]


def test_the_bounds_read_the_band_tile_for_banded_calls():
    """forward_bound / backward_bound of a banded call are those of the band's tile; of an unbanded call, those of the
    unbanded tile; and the two tiles give different bounds here (N_k = 300: 3 tiles of 128 against 5 of 64), so the
    substitution is seen."""
    q, k, v, do = _problem()
    base = Precision("bfloat16", "bf16", block_k=128, block_q=64, block_q_fwd=128, l_accumulate="float64")
    p = Precision("bfloat16", "bf16", block_k=128, block_q=64, block_q_fwd=128, l_accumulate="float64",
                  band_forward=BandForward(block_k=64, block_q_fwd=64))
    band = p.banded("bottom_right", None)
    for fn, args in ((forward_bound, (q, k, v)), (backward_bound, (q, k, v, do))):
        got = fn(*args, causal="bottom_right", precision=p)
        want = fn(*args, causal="bottom_right", precision=band)
        other = fn(*args, causal="bottom_right", precision=base)
        for name in ("o", "lse") if fn is forward_bound else ("dq", "dk", "dv"):
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=f"{fn.__name__} {name}")
        assert any(not np.array_equal(getattr(want, n), getattr(other, n))
                   for n in (("o", "lse") if fn is forward_bound else ("dq", "dk", "dv"))), fn.__name__
        plain = fn(*args, causal=False, precision=p)
        plain_base = fn(*args, causal=False, precision=base)
        for name in ("o", "lse") if fn is forward_bound else ("dq", "dk", "dv"):
            np.testing.assert_array_equal(getattr(plain, name), getattr(plain_base, name), err_msg=name)

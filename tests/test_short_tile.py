"""The tiles of short unbanded calls (issue 10): the "auto" engine gives the Gluon kernels' tiles, gluon_fwd's 128 x 128
forward and gluon_bwd's backward, to fp16 / bf16 calls at head dim 64 with SHORT_KEYS to LONG_KEYS keys and no band
(measured faster there: the forward paired 1.065x triton_fwd at N = 1k, bench/NOTES.md "Session 2026-11-29b"; the
backward 1.03-1.06x triton_bwd at 1k, "Session 2026-11-29f"), banded calls keeping triton's tiles below LONG_KEYS (the
Gluon forward 0.85x, its backward 0.94x at N = 1k causal). The tiles are part of the arithmetic the bounds read, so
the Precision states them (`Precision.short_forward` with its backward outer blocks, `short_keys`) and the bounds take
the call's (`Precision.for_call`) from its key count and band, as they take the long tile (tests/test_long_tile.py)."""
from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch

from flashcheck.proofs.bounds import BandForward, Precision, backward_bound, forward_bound

ka = importlib.import_module("flashcheck.kernels.attention")  # the module (the package exports the function)
SHORT, LONG = ka.SHORT_KEYS, ka.LONG_KEYS


def _cfg(d=64, dtype=torch.bfloat16, **kw):
    return ka.kernel_config(d, dtype, interpret=False, **kw)


def test_auto_gives_the_gluon_tiles_to_short_unbanded_unmasked_d64_calls(monkeypatch):
    monkeypatch.delenv("FLASHCHECK_FORWARD_ENGINE", raising=False)
    base = _cfg()
    for dtype in (torch.bfloat16, torch.float16):
        for nk in (SHORT, LONG - 1):
            c = _cfg(dtype=dtype, n_keys=nk, n_queries=1)
            assert c.fwd.gluon and (c.fwd.block_m, c.fwd.block_n, c.fwd.num_warps) == (128, 128, 8), (dtype, nk)
            assert c.dkdv.gluon and c.dq.gluon and not c.dq.fused, (dtype, nk)
            assert c == _cfg(dtype=dtype, n_keys=LONG, n_queries=1)  # the long unmasked calls' tiles, all three
    # below, or masked (no query count): triton's; banded, gluon_fwd's tile with triton_bwd's (tests/
    # test_band_short_tile.py)
    assert _cfg(n_keys=SHORT - 1, n_queries=1) == base and _cfg(n_keys=SHORT) == base
    banded = _cfg(n_keys=LONG - 1, n_queries=1, band=True)
    assert banded.fwd == _cfg(n_keys=LONG, n_queries=1).fwd and (banded.dkdv, banded.dq) == (base.dkdv, base.dq)


def test_the_short_tile_changes_nothing_elsewhere(monkeypatch):
    monkeypatch.delenv("FLASHCHECK_FORWARD_ENGINE", raising=False)
    for kw in (dict(dtype=torch.float32), dict(precision="accurate"), dict(d=128), dict(d=80), dict(d=32),
               dict(engine="triton"), dict(engine="gluon")):
        assert _cfg(**{"n_keys": SHORT, "n_queries": 1, **kw}) == _cfg(**kw), kw
    monkeypatch.setenv("FLASHCHECK_FORWARD_ENGINE", "triton")
    assert _cfg(n_keys=SHORT, n_queries=1) == _cfg()


def test_short_unbanded_calls_run_the_gluon_kernels(monkeypatch):
    """The launcher's choice for calls without tiles: the Gluon kernels, forward and backward, for unbanded calls from
    SHORT_KEYS keys on (banded ones below LONG_KEYS: gluon_fwd and triton_bwd; fewer keys: triton_fwd, triton_bwd;
    the launch records too); a dense mask keeps them out, and its forward then runs triton_fwd's own 64 x 64 tile (at
    the short tile it ran 0.76-0.78x that: bench/dense_short.py)."""
    monkeypatch.delenv("FLASHCHECK_FORWARD_ENGINE", raising=False)
    q = ka.Layout.dense("bfloat16", (1, 4, 256, 64))
    for nk, band, fwd, gluon in ((SHORT, False, True, True), (LONG - 1, False, True, True),
                                 (SHORT - 1, False, False, False), (SHORT - 1, True, False, False),
                                 (SHORT, True, True, False), (LONG - 1, True, True, False)):
        kv = ka.Layout.dense("bfloat16", (1, 2, nk, 64))
        assert (ka._gluon_forward(q, kv, kv, False, False, band, False, (), False, "auto") is not None) == fwd
        assert (ka._gluon_backward(q, kv, kv, q, q, kv, kv, False, False, band, (), False, "auto")
                != (None, None)) == gluon, (nk, band)
        causal = "bottom_right" if band else False
        recs = ka.launches(q, kv, kv, causal=causal, grad=True, interpret=False, gluon=True)
        assert (recs[0].kernel == "attn_fwd_gluon_kernel") == fwd, (nk, band)
        assert [x.kernel.endswith("_gluon_kernel") for x in recs[2:]] == [gluon] * 2, (nk, band)
        if not gluon:
            assert [(dict(x.constexprs)["BLOCK_M"], dict(x.constexprs)["BLOCK_N"]) for x in recs[2:]] == [(64, 64)] * 2
        if not band:
            recs = ka.launches(q, kv, kv, mask_shape=(256, nk), grad=True, interpret=False, gluon=True)
            assert [(x.kernel, dict(x.constexprs)["BLOCK_M"], dict(x.constexprs)["BLOCK_N"]) for x in recs[:1]] == [
                ("attn_fwd_kernel", 64, 64)], nk


def test_the_arithmetic_and_precision_state_the_short_tile(monkeypatch):
    from flashcheck.adapters import ours_precision

    monkeypatch.delenv("FLASHCHECK_FORWARD_ENGINE", raising=False)
    a = ka.arithmetic(torch.bfloat16, head_dim=64, interpret=False)
    assert (a.block_k, a.block_q_fwd, a.block_k_short, a.block_q_fwd_short, a.short_keys) == (64, 64, 128, 128, SHORT)
    p = ours_precision(torch.float16, head_dim=64, interpret=False)
    s = p.short_forward
    assert p.short_keys == SHORT and (s.block_k, s.block_q_fwd) == (128, 128)
    assert s.rowsum_depth == p.long_forward.rowsum_depth  # one tile, one compile record
    assert (s.block_q_dq, s.block_k_dkdv, s.block_q) == (128, 128, 128)  # the Gluon backward's, as the long calls'
    lf = p.long_forward
    assert (s.block_q_dq, s.block_k_dkdv, s.block_q) == (lf.block_q_dq, lf.block_k_dkdv, lf.block_q)
    assert (a.block_q_dq_short, a.block_k_dkdv_short, a.block_q_short) == (128, 128, 128)
    for kw in (dict(head_dim=128), dict(head_dim=64, tiles=_cfg()), dict(head_dim=64, precision="accurate")):
        a = ka.arithmetic(torch.bfloat16, interpret=False, **kw)
        assert (a.block_k_short, a.block_q_fwd_short, a.short_keys) == (None,) * 3, kw
    assert ours_precision(torch.float32, head_dim=64, interpret=False).short_forward is None
    assert ka.arithmetic(torch.bfloat16, head_dim=64, interpret=True).short_keys is None


def _precision(short_outer=False, **kw):
    outer = dict(block_q_dq=128, block_k_dkdv=128, block_q=128) if short_outer else {}
    return Precision("bfloat16", "bf16", block_k=64, block_q=64, block_q_fwd=64, rowsum_depth=6,
                     l_accumulate="float64", block_q_dq=64, block_k_dkdv=64,
                     short_forward=BandForward(block_k=128, block_q_fwd=128, rowsum_depth=None, **outer),
                     short_keys=300, **kw)


def test_for_call_substitutes_the_short_tile_for_unbanded_unmasked_calls_only():
    p = _precision(band_forward=BandForward(block_k=32, block_q_fwd=32, rowsum_depth=5),
                   long_forward=BandForward(block_k=256, block_q_fwd=128, rowsum_depth=None, block_q_dq=128),
                   long_keys=1000)
    assert p.for_call(False, None, 299, 40) is p
    assert p.for_call(False, None, 300) is p  # no query count: a dense mask
    s = p.for_call(False, None, 300, 40)
    assert (s.block_k, s.block_q_fwd, s.rowsum_depth) == (128, 128, None)
    assert (s.short_forward, s.long_forward, s.band_forward) == (None, None, None)
    assert s.dq_key_tile == 64 and (s.block_q_dq, s.block_k_dkdv, s.block_q) == (64, 64, 64)  # the backward's stay
    for causal, window in ((True, None), ("bottom_right", None), (False, (10, 0))):
        assert p.for_call(causal, window, 300, 40).block_k == 32  # banded: the band's tile
    for causal in (False, True):
        b = p.for_call(causal, None, 1000, 40)
        assert (b.block_k, b.block_q_dq) == (256, 128), causal  # the long tile first
    assert p.for_call(False, None, 1000) is p  # a dense mask: neither
    for kw in (dict(short_keys=None), dict(short_keys=0), dict(short_keys=True)):
        with pytest.raises(ValueError, match="short_keys"):
            Precision("bfloat16", "bf16", short_forward=BandForward(block_k=128), **kw)
    with pytest.raises(ValueError, match="short_forward"):
        Precision("bfloat16", "bf16", short_keys=300)
    # with the backward's outer blocks stated, those too (the dQ kernel's key tile stays)
    b = _precision(short_outer=True).for_call(False, None, 300, 40)
    assert (b.block_k, b.block_q_dq, b.block_k_dkdv, b.block_q, b.dq_key_tile) == (128, 128, 128, 128, 64)
    assert _precision(short_outer=True).for_call(True, None, 300, 40).block_q_dq == 64  # banded: not short


def _problem(nq=40, nk=300, d=16, seed=0):
    g = np.random.default_rng(seed)
    return [g.standard_normal((1, 1, n, d)) for n in (nq, nk, nk)] + [g.standard_normal((1, 1, nq, d))]


def test_the_bounds_read_the_short_tile_for_short_unbanded_calls():
    """forward_bound / backward_bound of an unbanded call with short_keys keys are those of the short tile, and differ
    from the default tile's here (N_k = 300: 3 tiles of 128, any rowsum order, against 5 of 64 in trees of depth 6),
    so the substitution is seen; banded calls and fewer keys read the default tile."""
    q, k, v, do = _problem()
    p = _precision()
    short = p.for_call(False, None, 300, 40)
    plain = Precision("bfloat16", "bf16", block_k=64, block_q=64, block_q_fwd=64, rowsum_depth=6,
                      l_accumulate="float64", block_q_dq=64, block_k_dkdv=64)
    for fn, args, names in ((forward_bound, (q, k, v), ("o", "lse")),
                            (backward_bound, (q, k, v, do), ("dq", "dk", "dv"))):
        got, want, other = (fn(*args, precision=x) for x in (p, short, plain))
        for name in names:
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=f"{fn.__name__} {name}")
        assert any(not np.array_equal(getattr(want, n), getattr(other, n)) for n in names), fn.__name__
        banded = fn(*args, causal="bottom_right", precision=p)
        plain_banded = fn(*args, causal="bottom_right", precision=plain)
        for name in names:
            np.testing.assert_array_equal(getattr(banded, name), getattr(plain_banded, name), err_msg=name)
    q, k, v, do = _problem(nk=299)
    np.testing.assert_array_equal(forward_bound(q, k, v, precision=p).o, forward_bound(q, k, v, precision=plain).o)
    q, k, v, do = _problem()
    mask = np.ones((40, 300), dtype=bool)  # a dense mask (every key seen): the default tile
    for fn, args, names in ((forward_bound, (q, k, v), ("o", "lse")),
                            (backward_bound, (q, k, v, do), ("dq", "dk", "dv"))):
        got, want = (fn(*args, mask=mask, precision=x) for x in (p, plain))
        for name in names:
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=f"masked {name}")

"""The forward tile of short banded calls (issue 10): the "auto" engine gives gluon_fwd's 128 x 128 tile (PERSISTENT:
attention._gluon_persistent) to fp16 / bf16 banded, unmasked calls at head dim 64 with SHORT_KEYS to LONG_KEYS keys,
their backward keeping triton_bwd's tiles (the forward 1.076x triton_fwd's 64 x 64 at N = 1k causal, the Gluon
backward 0.94x there: bench/NOTES.md "Session 2026-11-29j"). The tile is part of the arithmetic the bounds read, so
the Precision states it (`Precision.band_forward` from `band_keys` keys) and the bounds take the call's
(`Precision.for_call`) from its key count, band and mask, as they take the short and long tiles
(tests/test_short_tile.py, tests/test_long_tile.py)."""
from __future__ import annotations

import pytest
import torch

from flashcheck.proofs.bounds import BandForward, Precision
from tests.test_short_tile import LONG, SHORT, _cfg, ka  # the short unbanded tile's: the same key counts, one config


def test_auto_gives_gluon_fwds_tile_to_short_banded_unmasked_d64_calls_and_keeps_triton_bwds(monkeypatch):
    monkeypatch.delenv("FLASHCHECK_FORWARD_ENGINE", raising=False)
    base = _cfg()
    for dtype in (torch.bfloat16, torch.float16):
        for nk in (SHORT, LONG - 1):
            c = _cfg(dtype=dtype, n_keys=nk, n_queries=1, band=True)
            assert c.fwd == _cfg(dtype=dtype, n_keys=LONG, n_queries=1, band=True).fwd, (dtype, nk)  # the long one
            assert c.fwd.gluon and (c.fwd.block_m, c.fwd.block_n) == (128, 128), (dtype, nk)
            assert (c.dkdv, c.dq) == (base.dkdv, base.dq) and not (c.dkdv.gluon or c.dq.gluon), (dtype, nk)
    # fewer keys, or masked (no query count): triton's; other dtypes, head dims, precisions and engines: unchanged
    assert _cfg(n_keys=SHORT - 1, n_queries=1, band=True) == base and _cfg(n_keys=SHORT, band=True) == base
    for kw in (dict(dtype=torch.float32), dict(precision="accurate"), dict(d=128), dict(d=80), dict(engine="triton"),
               dict(engine="gluon")):
        assert _cfg(**{"n_keys": SHORT, "n_queries": 1, "band": True, **kw}) == _cfg(**{"band": True, **kw}), kw


def test_the_arithmetic_and_precision_state_the_band_tile_from_short_keys(monkeypatch):
    from flashcheck.adapters import ours_precision

    monkeypatch.delenv("FLASHCHECK_FORWARD_ENGINE", raising=False)
    a = ka.arithmetic(torch.bfloat16, head_dim=64, interpret=False)
    assert (a.block_k, a.block_q_fwd, a.block_k_band, a.block_q_fwd_band, a.band_keys) == (64, 64, 128, 128, SHORT)
    p = ours_precision(torch.float16, head_dim=64, interpret=False)
    b = p.band_forward
    assert p.band_keys == SHORT and (b.block_k, b.block_q_fwd) == (128, 128)
    assert b.rowsum_depth == p.long_forward.rowsum_depth  # one tile, one compile record
    assert (b.block_q_dq, b.block_k_dkdv, b.block_q) == (None,) * 3  # the backward's blocks: triton_bwd's, the default
    # d = 128 (one tile for every call), given tiles, "accurate", the interpreter: no such tile
    for kw in (dict(head_dim=128), dict(head_dim=64, tiles=_cfg()), dict(head_dim=64, precision="accurate")):
        assert ka.arithmetic(torch.bfloat16, interpret=False, **kw).band_keys is None, kw
    assert ka.arithmetic(torch.bfloat16, head_dim=64, interpret=True).band_keys is None
    assert ours_precision(torch.float32, head_dim=64, interpret=False).band_keys is None
    # the "triton" engine at d = 128: its band tile for every banded call, as before
    monkeypatch.setenv("FLASHCHECK_FORWARD_ENGINE", "triton")
    a = ka.arithmetic(torch.bfloat16, head_dim=128, interpret=False)
    assert (a.block_k_band, a.band_keys) == (64, None)


def _precision(**kw):
    return Precision("bfloat16", "bf16", block_k=64, block_q=64, block_q_fwd=64, rowsum_depth=6,
                     l_accumulate="float64", block_q_dq=64, block_k_dkdv=64,
                     band_forward=BandForward(block_k=128, block_q_fwd=128, rowsum_depth=None), band_keys=300, **kw)


def test_for_call_substitutes_the_band_tile_from_band_keys_on_banded_unmasked_calls_only():
    p = _precision(long_forward=BandForward(block_k=256, block_q_fwd=128, rowsum_depth=None, block_q_dq=128),
                   long_keys=1000)
    for causal, window in ((True, None), ("bottom_right", None), (False, (10, 0))):
        b = p.for_call(causal, window, 300, 40)
        assert (b.block_k, b.block_q_fwd, b.rowsum_depth) == (128, 128, None), (causal, window)
        assert (b.band_forward, b.band_keys, b.long_forward) == (None, None, None)
        assert b.dq_key_tile == 64 and (b.block_q_dq, b.block_k_dkdv, b.block_q) == (64, 64, 64)  # the backward's stay
        assert p.for_call(causal, window, 299, 40) is p  # fewer keys: the default tile
        assert p.for_call(causal, window, 300) is p  # no query count: a dense mask
        assert (p.for_call(causal, window, 1000, 40).block_k, p.for_call(causal, window, 1000, 40).block_q_dq) == (
            256, 128)  # the long tile first
    assert p.for_call(False, None, 300, 40) is p  # unbanded: not the band's
    # without band_keys the band tile is every banded call's (the "triton" engine's 64 x 64 at d = 128)
    q = Precision("bfloat16", "bf16", block_k=128, band_forward=BandForward(block_k=64, block_q_fwd=64))
    assert q.for_call(True, None, 10).block_k == 64 and q.for_call(True, None, 10, 5).block_k == 64
    for kw in (dict(band_keys=0), dict(band_keys=True), dict(band_keys=2.5)):
        with pytest.raises(ValueError, match="band_keys"):
            Precision("bfloat16", "bf16", band_forward=BandForward(block_k=128), **kw)
    with pytest.raises(ValueError, match="band_keys"):
        Precision("bfloat16", "bf16", band_keys=300)  # without a band tile


def test_short_banded_calls_launch_gluon_fwd_and_triton_bwd(monkeypatch):
    """launches() (the records a call makes, validate's warm-up keys) at d = 64: banded calls from SHORT_KEYS keys
    below LONG_KEYS launch gluon_fwd (PERSISTENT on 16 heads of 3 blocks: one program each) and triton_bwd's two
    kernels at their 64 x 64 tiles; below SHORT_KEYS, triton_fwd."""
    monkeypatch.delenv("FLASHCHECK_FORWARD_ENGINE", raising=False)
    q = ka.Layout.dense("bfloat16", (2, 8, 300, 64))
    for nk, fwd in ((SHORT, True), (LONG - 1, True), (SHORT - 1, False)):
        kv = ka.Layout.dense("bfloat16", (2, 4, nk, 64))
        recs = ka.launches(q, kv, kv, causal="bottom_right", grad=True, interpret=False, gluon=True)
        assert (recs[0].kernel == "attn_fwd_gluon_kernel") == fwd, nk
        if fwd:
            c = dict(recs[0].constexprs)
            assert c["PERSISTENT"] and (c["BLOCK_M"], c["BLOCK_N"]) == (128, 128) and recs[0].grid == (48, 1), nk
        assert [(x.kernel, dict(x.constexprs)["BLOCK_M"], dict(x.constexprs)["BLOCK_N"]) for x in recs[2:]] == [
            ("attn_bwd_dkdv_kernel", 64, 64), ("attn_bwd_dq_kernel", 64, 64)], nk

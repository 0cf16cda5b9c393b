"""The tiles by key count (issue 10): the "auto" engine gives the Gluon kernels to fp16 / bf16 calls at head dim 64
without a dense mask with at least LONG_KEYS keys (measured faster there, slower at N = 1k: bench/NOTES.md, "Session
2026-11-27g" for the forward, "Session 2026-11-28" for the backward), triton's below: gluon_fwd's 128 x 128 tile for
triton_fwd's 64 x 64, and the Gluon backward's outer blocks (128-row dQ, 128-key dK/dV programs) and 128-row dK/dV
query tiles ("Session 2026-11-27h") over triton_bwd's dQ key tile. The tiles are part of the arithmetic the bounds
read, so the Precision states both (`Precision.long_forward`, `long_keys`) and the
bounds take the call's (`Precision.for_call`) from its key count, as they take the band's tile from its causal /
window arguments. A dense mask keeps the Gluon kernels out, and triton_fwd at their tile ran 0.815x its own on such
calls (bench/dense_short.py, N = 8192): dense-masked calls keep triton's tiles (no query count: kernel_config's
n_queries, for_call's Nq)."""
from __future__ import annotations

import dataclasses
import importlib

import numpy as np
import pytest
import torch

from flashcheck.proofs.bounds import BandForward, Precision, backward_bound, forward_bound

ka = importlib.import_module("flashcheck.kernels.attention")  # the module (the package exports the function)
LONG = ka.LONG_KEYS


def _cfg(d=64, dtype=torch.bfloat16, **kw):
    return ka.kernel_config(d, dtype, interpret=False, **kw)


def test_auto_gives_the_gluon_tiles_at_d64_from_long_keys_on(monkeypatch):
    monkeypatch.delenv("FLASHCHECK_FORWARD_ENGINE", raising=False)
    short, long = _cfg(n_keys=LONG - 1, band=True), _cfg(n_keys=LONG, n_queries=1)  # (unbanded: test_short_tile.py)
    assert _cfg() == short and not short.fwd.gluon and (short.fwd.block_m, short.fwd.block_n) == (64, 64)
    assert not (short.dkdv.gluon or short.dq.gluon)
    assert long.fwd.gluon and (long.fwd.block_m, long.fwd.block_n, long.fwd.num_warps) == (128, 128, 8)
    assert long == _cfg(engine="gluon")  # the Gluon engine's tiles, forward and backward
    assert long.dkdv.gluon and (long.dkdv.block_m, long.dkdv.block_n, long.dkdv.num_stages) == (128, 128, 2)
    assert long.dq.gluon and (long.dq.block_m, long.dq.block_n) == (128, 64)
    # the dQ kernel's key tile is triton_bwd's (Precision.for_call keeps it); the dK/dV query tile is not (128 rows:
    # Arithmetic.block_q_long, BandForward.block_q)
    assert long.dq.block_n == short.dq.block_n and (long.dkdv.block_m, short.dkdv.block_m) == (128, 64)
    assert _cfg(n_keys=LONG, n_queries=1, band=True) == long  # banded or not
    assert _cfg(dtype=torch.float16, n_keys=10 * LONG, n_queries=1).fwd.gluon
    assert _cfg(n_keys=10 * LONG) == _cfg() and _cfg(n_keys=LONG, band=True) == short  # masked: triton's


def test_the_key_count_changes_nothing_elsewhere(monkeypatch):
    monkeypatch.delenv("FLASHCHECK_FORWARD_ENGINE", raising=False)
    for kw in (dict(dtype=torch.float32), dict(precision="accurate"), dict(d=128), dict(d=80), dict(d=32),
               dict(engine="triton"), dict(engine="gluon")):
        assert _cfg(**{"n_keys": LONG, "n_queries": 1, **kw}) == _cfg(**kw), kw
    assert ka.kernel_config(64, torch.bfloat16, interpret=True, n_keys=LONG, n_queries=1) == ka.kernel_config(
        64, torch.bfloat16, interpret=True)


def test_long_calls_at_d64_run_the_gluon_kernels_and_short_ones_triton(monkeypatch):
    """The launcher's choice for calls without tiles follows the key count, forward and backward (the launch
    records' tiles too; banded forwards from SHORT_KEYS keys below LONG_KEYS run gluon_fwd's tile, their backward
    triton's: tests/test_band_short_tile.py); dense-masked calls run triton's own tiles whatever the key count."""
    monkeypatch.delenv("FLASHCHECK_FORWARD_ENGINE", raising=False)
    q = ka.Layout.dense("bfloat16", (1, 4, 256, 64))
    for nk, gluon in ((LONG, True), (LONG - 1, True), (ka.SHORT_KEYS - 1, False), (100, False)):
        kv = ka.Layout.dense("bfloat16", (1, 2, nk, 64))
        assert (ka._gluon_forward(q, kv, kv, False, False, True, False, (), False, "auto") is not None) == gluon, nk
        fwd = ka.launches(q, kv, kv, causal="bottom_right", interpret=False)[0]
        c = dict(fwd.constexprs)
        assert (c["BLOCK_M"], c["BLOCK_N"]) == ((128, 128) if gluon else (64, 64)), nk
    long = ka.Layout.dense("bfloat16", (1, 2, LONG, 64))
    short = ka.Layout.dense("bfloat16", (1, 2, LONG - 1, 64))
    for kv, want in ((long, [(128, 128), (128, 64)]), (short, [(64, 64), (64, 64)])):
        # dK/dV, dQ of banded calls (unbanded ones run the Gluon kernels from SHORT_KEYS on: test_short_tile.py)
        got = [dict(x.constexprs) for x in ka.launches(q, kv, kv, causal="bottom_right", grad=True,
                                                       interpret=False)[2:]]
        assert [(c["BLOCK_M"], c["BLOCK_N"]) for c in got] == want, kv.shape
        g = ka._gluon_backward(q, kv, kv, q, q, kv, kv, False, False, True, (), False, "auto")
        assert (g != (None, None)) == (kv is long), kv.shape
        masked = [dict(x.constexprs) for x in ka.launches(q, kv, kv, mask_shape=(256, kv.shape[2]), grad=True,
                                                           interpret=False)]
        assert [(c["BLOCK_M"], c["BLOCK_N"]) for c in masked[:1] + masked[2:]] == [(64, 64)] * 3, kv.shape


def test_the_arithmetic_and_precision_state_the_long_tile(monkeypatch):
    from flashcheck.adapters import ours_precision

    monkeypatch.delenv("FLASHCHECK_FORWARD_ENGINE", raising=False)
    a = ka.arithmetic(torch.bfloat16, head_dim=64, interpret=False)
    assert (a.block_k, a.block_q_fwd, a.block_k_long, a.block_q_fwd_long, a.long_keys) == (64, 64, 128, 128, LONG)
    assert (a.block_q_dq, a.block_k_dkdv, a.block_q_dq_long, a.block_k_dkdv_long) == (64, 64, 128, 128)
    assert (a.block_q, a.block_q_long, a.block_k_dq) == (64, 128, 64)  # the dK/dV query tile; dQ's key tile stays
    p = ours_precision(torch.float16, head_dim=64, interpret=False)
    assert p.long_keys == LONG and (p.long_forward.block_k, p.long_forward.block_q_fwd) == (128, 128)
    assert (p.long_forward.block_q_dq, p.long_forward.block_k_dkdv, p.long_forward.block_q) == (128, 128, 128)
    for kw in (dict(head_dim=128), dict(head_dim=64, tiles=_cfg()), dict(head_dim=64, precision="accurate")):
        a = ka.arithmetic(torch.bfloat16, interpret=False, **kw)
        assert (a.block_k_long, a.block_q_fwd_long, a.long_keys, a.block_q_dq_long, a.block_k_dkdv_long,
                a.block_q_long) == (None,) * 6, kw
    assert ours_precision(torch.float32, head_dim=64, interpret=False).long_forward is None
    assert ka.arithmetic(torch.bfloat16, head_dim=64, interpret=True).long_keys is None


def _long_precision(**kw):
    return Precision("bfloat16", "bf16", block_k=64, block_q=64, block_q_fwd=64, rowsum_depth=6,
                     l_accumulate="float64", block_q_dq=64, block_k_dkdv=64,
                     long_forward=BandForward(block_k=128, block_q_fwd=128, rowsum_depth=None, block_q_dq=128,
                                              block_k_dkdv=128, block_q=128), long_keys=300, **kw)


def test_for_call_substitutes_the_long_tile_from_long_keys_on_before_the_band():
    p = _long_precision(band_forward=BandForward(block_k=32, block_q_fwd=32, rowsum_depth=5))
    assert p.for_call(False, None, 299, 40) is p
    assert p.for_call(True, None, 299, 40).block_k == 32  # the band's below long_keys
    assert p.for_call(False, None, 300) is p and p.for_call(True, None, 300).block_k == 32  # a dense mask: no Nq
    for causal in (False, True, "bottom_right"):
        b = p.for_call(causal, None, 300, 40)
        assert (b.block_k, b.block_q_fwd, b.rowsum_depth, b.long_forward, b.band_forward) == (128, 128, None, None,
                                                                                            None), causal
        assert b.dq_key_tile == 64  # the dQ kernel's key tile stays
        assert (b.block_q_dq, b.block_k_dkdv, b.block_q) == (128, 128, 128)  # the rest is the long call's
    for kw in (dict(long_keys=None), dict(long_keys=0), dict(long_keys=True)):
        with pytest.raises(ValueError, match="long_keys"):
            Precision("bfloat16", "bf16", long_forward=BandForward(block_k=128), **kw)
    with pytest.raises(ValueError, match="long_forward"):
        Precision("bfloat16", "bf16", long_keys=300)
    with pytest.raises(ValueError, match="long_forward"):
        Precision("bfloat16", "bf16", long_forward=(128, 128), long_keys=300)


def _problem(nq=40, nk=300, d=16, seed=0):
    g = np.random.default_rng(seed)
    return [g.standard_normal((1, 1, n, d)) for n in (nq, nk, nk)] + [g.standard_normal((1, 1, nq, d))]


@pytest.mark.parametrize("causal", [False, "bottom_right"])
def test_the_bounds_read_the_long_tile_for_long_calls(causal):
    """forward_bound / backward_bound of a call with long_keys keys are those of the long tile (its rowsum depth
    included: the arithmetic model is built after the substitution), and differ from the short tile's here
    (N_k = 300: 3 tiles of 128, any rowsum order, against 5 of 64 in trees of depth 6), so the substitution is seen."""
    q, k, v, do = _problem()
    p = _long_precision()
    long = p.for_call(causal, None, 300, 40)
    short = Precision("bfloat16", "bf16", block_k=64, block_q=64, block_q_fwd=64, rowsum_depth=6,
                      l_accumulate="float64")
    for fn, args, names in ((forward_bound, (q, k, v), ("o", "lse")),
                            (backward_bound, (q, k, v, do), ("dq", "dk", "dv"))):
        got, want, other = (fn(*args, causal=causal, precision=x) for x in (p, long, short))
        for name in names:
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=f"{fn.__name__} {name}")
        assert any(not np.array_equal(getattr(want, n), getattr(other, n)) for n in names), fn.__name__
    q, k, v, do = _problem(nk=299)
    np.testing.assert_array_equal(forward_bound(q, k, v, causal=causal, precision=p).o,
                                  forward_bound(q, k, v, causal=causal, precision=short).o)
    q, k, v, do = _problem()
    mask = np.ones((40, 300), dtype=bool)  # a dense mask (every key seen): the default tiles, forward and backward
    for fn, args, names in ((forward_bound, (q, k, v), ("o", "lse")),
                            (backward_bound, (q, k, v, do), ("dq", "dk", "dv"))):
        got, want = (fn(*args, causal=causal, mask=mask, precision=x)
                     for x in (p, dataclasses.replace(p, long_forward=None, long_keys=None)))
        for name in names:
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=f"masked {name}")

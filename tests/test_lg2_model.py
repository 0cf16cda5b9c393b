"""The H100's lg2.approx as a rule (proofs/lg2_model.py: found offline by bench/lg2_rule.py, checked on the GPU on
every positive normal fp32 with 0 mismatches): the stored table is the GPU's, the model reproduces the measured dumps
(a sample of every dumped binade; bench/lg2_rule.py checks every entry), and the single-table reading RN32(e + L[m])
does not (a test that can fail)."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from flashcheck.proofs import lg2_model

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
import lg2_rule  # noqa: E402


@pytest.fixture(scope="module")
def data():
    return lg2_rule.load()


def test_model_reproduces_the_dumps(data):
    x0, L, ys = data
    rng = np.random.default_rng(0)
    m = np.unique(np.concatenate([rng.integers(0, lg2_rule.N, 1 << 14), np.arange(lg2_rule.T - 64, lg2_rule.T + 64),
                                  np.arange(lg2_rule.N - 256, lg2_rule.N), np.arange(256)]))
    _, measured = lg2_model.table()
    for e, (y, known) in ys.items():
        x = (x0[m] * 2.0**e).astype(np.float32).astype(np.float64)
        got = lg2_model.lg2(x).astype(np.float32)
        k = known[m] & (measured[m] | (e != -1))
        assert np.array_equal(got.view(np.int32)[k], y[m].view(np.int32)[k]), f"binade {e}"
        if e not in (0, -1):  # the single table fails from sqrt(2) on
            single = lg2_rule.rn32_sum(e, L[m])
            assert np.any(single.view(np.int32)[k] != y[m].view(np.int32)[k])


def test_table_is_the_measured_one():
    import json

    assert lg2_model.measured()
    with open(lg2_model.TABLE_JSON) as f:
        rec = json.load(f)
    assert rec["measured_R"]["mismatch"] == 0 and rec["points"] == 2_130_706_432 and not rec["interpreter"]
    _, measured = lg2_model.table()
    assert measured.all()


def test_specials():
    y = lg2_model.lg2(np.array([0.0, -1.0, np.inf, np.nan, 1.0, 2.0, 0.5, 4.0]))
    assert y[0] == -np.inf and np.isnan(y[1]) and y[2] == np.inf and np.isnan(y[3])
    assert list(y[4:]) == [0.0, 1.0, -1.0, 2.0]


def _emulated_lse(family, Nq=256, Nk=300, d=32):
    from bench.bounds_attack import inputs
    from flashcheck.proofs.emulation import fa2_forward

    q, k, v, _ = inputs(family, "float32", Nq, Nk, 1, d, 0)
    trace = []
    _, lse = fa2_forward(q, k, v, dtype="float32", dot="ieee", l_accumulate="float64", ieee_fma_chain=True,
                         rowsum="tree", block_k=64, ex2="h100", lg2="h100", trace=trace)
    return lse, trace


@pytest.mark.parametrize("family", ["random", "near_constant_v", "rising_logits"])
def test_stored_lse_lies_in_its_interval_of_known_values(family):
    """bench/lse_interval.py's interval (every P~ known, l's rowsums within gamma_6, lg2 and the roundings known):
    the emulated kernel's LSE (ex2 and lg2 through the tables, the rowsum a depth-6 tree) lies in it on every row."""
    from bench.lse_interval import interval
    from flashcheck.proofs import ex2_model

    lse, trace = _emulated_lse(family)
    z_lo, z_hi = interval(trace, trace[-1][4], 6, ex2_model.ex2, lg2_model.lg2)
    out = (lse < z_lo) | (lse > z_hi)
    assert not out.any(), f"{family}: outside its interval at rows {np.argwhere(out)[:3].tolist()}"


def test_lse_interval_without_the_rowsums_roundings_is_exceeded():
    """The same interval with the tile rowsums taken as exact (depth 0) misses rows: the containment test can fail."""
    from bench.lse_interval import interval
    from flashcheck.proofs import ex2_model

    lse, trace = _emulated_lse("random")
    z_lo, z_hi = interval(trace, trace[-1][4], 0, ex2_model.ex2, lg2_model.lg2)
    assert np.sum((lse < z_lo) | (lse > z_hi)) > 0

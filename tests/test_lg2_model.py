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

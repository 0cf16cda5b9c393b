"""The fixed order of bench/gluon/fused_bwd.py's dQ adds (a prototype: issue 10) against the query tiles each key
tile's program really visits: a gap in the ranks is a wait that never ends on the GPU, a repeat a lost add."""
import itertools

import pytest

from flashcheck.kernels.attention import _band
from bench.gluon.fused_bwd import order_errors

SIZES = [1, 63, 64, 65, 127, 128, 129, 300, 777, 1000, 1024, 1300]
MODES = [(False, None), (True, None), ("bottom_right", None), ("top_left", None), (False, (256, 0)),
         ("bottom_right", (100, None)), (False, (0, 300)), (False, (5, 7))]


@pytest.mark.parametrize("block_m", [64, 128])
def test_every_visited_query_tile_has_its_adds_ranked_without_gaps(block_m):
    bad = []
    for (nq, nk), (causal, window) in itertools.product(itertools.product(SIZES, SIZES), MODES):
        band, off_lo, off_hi = _band(causal, window, nq, nk)
        errors = order_errors(nq, nk, band, off_lo, off_hi, block_m)
        if errors:
            bad.append((nq, nk, causal, window, errors[:2]))
    assert not bad, f"{len(bad)} calls ordered wrong, first: {bad[:3]}"


def test_a_wrong_range_is_caught(monkeypatch):
    """The check fails when the order forgets the band's lower edge (every key tile ranked as if all visited)."""
    import bench.gluon.fused_bwd as fb

    band, off_lo, off_hi = _band(False, (256, 0), 1024, 1024)
    assert fb.order_errors(1024, 1024, band, off_lo, off_hi, 64) == []
    original = fb.dq_order
    monkeypatch.setattr(fb, "dq_order",
                        lambda i, j, nk, band, lo, hi, bm, bn: original(i, j, nk, False, lo, hi, bm, bn))
    assert fb.order_errors(1024, 1024, band, off_lo, off_hi, 64)

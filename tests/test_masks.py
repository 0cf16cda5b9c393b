"""flashcheck.reference.masks: causal alignment, windows and user masks AND into one visibility matrix."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from flashcheck.reference.masks import causal_offset, visibility


def test_causal_offset_names_the_alignment():
    assert causal_offset(False, 3, 5) == 0
    assert causal_offset(True, 3, 5) == 0
    assert causal_offset("top_left", 3, 5) == 0
    assert causal_offset("bottom_right", 3, 5) == 2
    assert causal_offset("bottom_right", 5, 3) == -2


def test_top_left_causal_is_tril():
    vis = visibility(1, 1, 3, 5, causal=True)[0, 0]
    np.testing.assert_array_equal(vis, np.tril(np.ones((3, 5), dtype=bool)))
    np.testing.assert_array_equal(visibility(1, 1, 3, 5, causal="top_left"), visibility(1, 1, 3, 5, causal=True))


def test_bottom_right_causal_aligns_the_last_query_with_the_last_key():
    vis = visibility(1, 1, 3, 5, causal="bottom_right")[0, 0]
    np.testing.assert_array_equal(vis, np.tril(np.ones((3, 5), dtype=bool), k=2))
    assert vis[-1].all()


def test_bottom_right_with_more_queries_than_keys_masks_the_first_rows_fully():
    vis = visibility(1, 1, 5, 3, causal="bottom_right")[0, 0]
    assert not vis[0].any() and not vis[1].any()
    assert vis[2, 0] and not vis[2, 1]


def test_window_is_a_band_around_the_aligned_diagonal():
    vis = visibility(1, 1, 6, 6, window=(1, 2))[0, 0]
    i, j = np.indices((6, 6))
    np.testing.assert_array_equal(vis, (j >= i - 1) & (j <= i + 2))
    vis_br = visibility(1, 1, 2, 6, causal="bottom_right", window=(1, None))[0, 0]
    i, j = np.indices((2, 6))
    np.testing.assert_array_equal(vis_br, (j >= i + 4 - 1) & (j <= i + 4))


def test_window_with_none_sides_is_unbounded():
    np.testing.assert_array_equal(visibility(1, 1, 4, 4, window=(None, None)), np.ones((1, 1, 4, 4), bool))


def test_mask_ands_with_causal_and_broadcasts():
    rng = np.random.default_rng(0)
    m = rng.random((4, 4)) < 0.5
    vis = visibility(2, 3, 4, 4, causal=True, mask=m)
    assert vis.shape == (2, 3, 4, 4)
    np.testing.assert_array_equal(vis[1, 2], m & np.tril(np.ones((4, 4), bool)))


@pytest.mark.parametrize("causal", ["upper", 1, None, "bottom-right"])
def test_unknown_causal_value_is_rejected(causal):
    with pytest.raises(ValueError, match="causal must be one of"):
        visibility(1, 1, 2, 2, causal=causal)


@given(st.sampled_from((1, 2, 5, 8)), st.sampled_from((1, 3, 8)), st.sampled_from((False, True, "top_left", "bottom_right")),
       st.sampled_from((None, (0, 0), (2, None), (None, 1), (1, 3))))
def test_visibility_is_the_elementwise_definition(Nq, Nk, causal, window):
    vis = visibility(1, 1, Nq, Nk, causal=causal, window=window)[0, 0]
    off = Nk - Nq if causal == "bottom_right" else 0
    for i in range(Nq):
        for j in range(Nk):
            expect = (not causal or j <= i + off)
            if window is not None:
                left, right = window
                expect = expect and (left is None or j >= i + off - left) and (right is None or j <= i + off + right)
            assert vis[i, j] == expect, (i, j, causal, window)

"""flashcheck.reference.tiled_row_recurrence: the o'_i recurrence over tiles (seed 000; worked in seed 003)."""
import math

import numpy as np
from hypothesis import given, note, strategies as st

from flashcheck.reference import row_recurrence, tiled_row_recurrence
from tests.reference_strategies import assert_within, logit_rows, strict_fp
from flashcheck.proofs.reference_bounds import row_recurrence_bound


@given(logit_rows(), st.sampled_from((1, 2, 3, 4, 7, 64)))
def test_tiled_agrees_with_the_single_step_recurrence(x, block):
    v = np.random.default_rng(3).standard_normal(x.shape + (2,))
    with strict_fp():
        o_tiled = tiled_row_recurrence(x, v, block)
        o_step = row_recurrence(x, v)
    worst = assert_within("tiled vs single-step", o_tiled, o_step, 2 * row_recurrence_bound(x, v))
    note(f"x={x!r} block={block} worst |err|/bound={worst:.3g}")


def test_last_tile_may_be_short_and_state_count_is_ceil():
    x = np.arange(7.0)
    v = np.ones((7, 1))
    o, states = tiled_row_recurrence(x, v, 3, return_states=True)
    assert len(states) == math.ceil(7 / 3)
    assert_within("o", o, np.array([1.0]), row_recurrence_bound(x, v, 3))


def test_fully_masked_row_gives_zero():
    with strict_fp():
        o = tiled_row_recurrence(np.full((1, 5), -np.inf), np.ones((1, 5, 2)), 2)
    np.testing.assert_array_equal(o, 0.0)

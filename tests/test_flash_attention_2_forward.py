"""flashcheck.reference.flash_attention_2_forward: Q outer loop, un-normalized accumulator, one division (seed 002)."""
import numpy as np
from hypothesis import given, note, strategies as st

from flashcheck.reference import attention, flash_attention_2_forward
from flashcheck.reference.exact import exact_attention
from tests.reference_strategies import assert_within, note_comparison, reference_bounds, reference_cases, strict_fp

BLOCKS = st.sampled_from(((1, 1), (2, 3), (4, 4), (3, 16), (64, 64)))


@given(reference_cases(dropout=True), BLOCKS)
def test_fa2_forward_agrees_with_attention(case, blocks):
    with strict_fp():
        o, lse = flash_attention_2_forward(case.q, case.k, case.v, block_q=blocks[0], block_k=blocks[1], **case.kwargs)
        o_ref, lse_ref = attention(case.q, case.k, case.v, **case.kwargs)
    b_o, b_lse, source = reference_bounds(case.q, case.k, case.v, **case.kwargs)
    # both are within the reference bound of the exact result
    worst = {"o": assert_within("o", o, o_ref, 2 * b_o), "lse": assert_within("lse", lse, lse_ref, 2 * b_lse)}
    note_comparison(note, f"{case.describe()} blocks={blocks}", worst, source)


@given(reference_cases(small=True), BLOCKS)
def test_fa2_forward_is_within_the_reference_bound_of_exact(case, blocks):
    with strict_fp():
        o, lse = flash_attention_2_forward(case.q, case.k, case.v, block_q=blocks[0], block_k=blocks[1], **case.kwargs)
    o_x, lse_x = exact_attention(case.q, case.k, case.v, **case.kwargs)
    b_o, b_lse, source = reference_bounds(case.q, case.k, case.v, **case.kwargs)
    worst = {"o": assert_within("o", o, o_x, b_o), "lse": assert_within("lse", lse, lse_x, b_lse)}
    note_comparison(note, f"{case.describe()} blocks={blocks}", worst, source)


def test_rows_masked_in_every_tile_end_with_zero_and_minus_inf():
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((1, 1, 5, 2)), rng.standard_normal((1, 1, 3, 2)), rng.standard_normal((1, 1, 3, 2))
    with strict_fp():  # bottom_right with Nq > Nk: the first two query rows see no key
        o, lse = flash_attention_2_forward(q, k, v, causal="bottom_right", block_q=2, block_k=2)
    np.testing.assert_array_equal(o[0, 0, :2], 0.0)
    assert np.all(lse[0, 0, :2] == -np.inf)

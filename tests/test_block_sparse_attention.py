"""flashcheck.reference.block_sparse_attention and the block-mask builders (seed 001, "Block-Sparse Attention")."""
import numpy as np
import pytest
from hypothesis import given, note, strategies as st

from flashcheck.reference import attention, block_sparse_attention, causal_block_mask, local_block_mask
from flashcheck.reference.block_sparse import expand_block_mask
from tests.reference_strategies import assert_within, note_comparison, reference_bounds, reference_cases, strict_fp


def test_builders_reproduce_the_seed_masks():
    np.testing.assert_array_equal(causal_block_mask(4, 4), np.array(
        [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], bool))
    np.testing.assert_array_equal(local_block_mask(4, 1), np.array(
        [[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1], [0, 0, 1, 1]], bool))


@given(reference_cases(), st.sampled_from((1, 2, 3, (2, 5))), st.integers(0, 2**32 - 1))
def test_equals_attention_with_the_expanded_block_mask(case, block_size, seed):
    bq, bk = block_size if isinstance(block_size, tuple) else (block_size, block_size)
    nq, nk = -(-case.q.shape[2] // bq), -(-case.k.shape[2] // bk)
    block_mask = np.random.default_rng(seed).random((nq, nk)) < 0.6
    kw = dict(case.kwargs)
    with strict_fp():
        o, lse = block_sparse_attention(case.q, case.k, case.v, block_mask, block_size=block_size, **kw)
        elementwise = expand_block_mask(block_mask, bq, bk, case.q.shape[2], case.k.shape[2])
        kw["mask"] = elementwise if kw.get("mask") is None else elementwise & kw["mask"]
        o_ref, lse_ref = attention(case.q, case.k, case.v, **kw)
    b_o, b_lse, source = reference_bounds(case.q, case.k, case.v, **kw)
    worst = {"o": assert_within("o", o, o_ref, 2 * b_o), "lse": assert_within("lse", lse, lse_ref, 2 * b_lse)}
    note_comparison(note, f"{case.describe()} block_size={block_size} block_mask={block_mask.astype(int).tolist()}",
                    worst, source)


@pytest.mark.parametrize("n", [8, 11])  # 11: the last block is partial
def test_causal_block_mask_with_elementwise_causal_is_causal_attention(n):
    rng = np.random.default_rng(n)
    q, k, v = (rng.standard_normal((1, 2, n, 3)) for _ in range(3))
    nb = -(-n // 4)
    with strict_fp():
        o, lse = block_sparse_attention(q, k, v, causal_block_mask(nb, nb), block_size=4, causal=True)
    o_ref, lse_ref = attention(q, k, v, causal=True)
    b_o, b_lse, _ = reference_bounds(q, k, v, causal=True)
    assert_within("o", o, o_ref, 2 * b_o)
    assert_within("lse", lse, lse_ref, 2 * b_lse)


def test_empty_block_rows_give_zero_and_minus_inf():
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((1, 1, 6, 2)) for _ in range(3))
    bm = np.array([[True, False], [False, False]])
    with strict_fp():
        o, lse = block_sparse_attention(q, k, v, bm, block_size=3)
    np.testing.assert_array_equal(o[0, 0, 3:], 0.0)
    assert np.all(lse[0, 0, 3:] == -np.inf)

"""Bad input to every reference raises a ValueError or TypeError naming the argument and what was expected."""
import numpy as np
import pytest

import flashcheck.reference as R
from flashcheck.reference.exact import exact_attention, exact_attention_backward

rng = np.random.default_rng(0)
Q = rng.standard_normal((1, 4, 3, 2))
K = rng.standard_normal((1, 2, 5, 2))
V = rng.standard_normal((1, 2, 5, 3))
DO = rng.standard_normal((1, 4, 3, 3))


def _fwd(fn):
    return lambda q, k, v, **kw: fn(q, k, v, **kw)


def _bwd_fa2(q, k, v, **kw):
    o = np.zeros((1, 4, 3, 3))
    return R.attention_backward(q, k, v, o, np.zeros((1, 4, 3)), DO, **kw)


# every attention-like reference, called the same way (dropout only where the function takes it)
FUNCTIONS = {
    "attention": _fwd(R.attention),
    "flash_attention_2_forward": _fwd(R.flash_attention_2_forward),
    "flash_attention_1": lambda q, k, v, **kw: R.flash_attention_1(q, k, v, sram_size=64, **kw),
    "block_sparse_attention": lambda q, k, v, **kw: R.block_sparse_attention(
        q, k, v, np.ones((1, 1), bool), block_size=8, **kw),
    "attention_backward": _bwd_fa2,
    "standard_attention_backward": lambda q, k, v, **kw: R.standard_attention_backward(q, k, v, DO, **kw),
    "exact_attention": _fwd(exact_attention),
    "exact_attention_backward": lambda q, k, v, **kw: exact_attention_backward(q, k, v, DO, **kw),
}

SHAPE_ERRORS = [
    # (description, q, k, v, kwargs, error, message regex)
    ("q rank 3", Q[0], K, V, {}, ValueError, r"q must have rank 4 with layout \(B, Hq, Nq, d\)"),
    ("k rank 5", Q, K[None], V, {}, ValueError, r"k must have rank 4"),
    ("v rank 3", Q, K, V[0], {}, ValueError, r"v must have rank 4"),
    ("k batch", Q, np.concatenate([K, K]), V, {}, ValueError, r"k batch size must equal q's B = 1"),
    ("v batch", Q, K, np.concatenate([V, V]), {}, ValueError, r"v batch size must equal q's B = 1"),
    ("k head dim", Q, K[..., :1], V, {}, ValueError, r"k head dim must equal q's d = 2"),
    ("v heads", Q, K, V[:, :1], {}, ValueError, r"v heads must equal k's Hkv = 2"),
    ("v sequence", Q, K, V[:, :, :4], {}, ValueError, r"v sequence length must equal k's Nk = 5"),
    ("GQA", Q[:, :3], K, V, {}, ValueError, r"Hq = 3 must be a multiple of k/v heads Hkv = 2"),
    ("int q", Q.astype(np.int64), K, V, {}, TypeError, r"q must be a real floating-point array, got dtype int64"),
    ("complex k", Q, K.astype(complex), V, {}, TypeError, r"k must be a real floating-point array"),
    ("bool v", Q, K, V > 0, {}, TypeError, r"v must be a real floating-point array, got dtype bool"),
    ("empty N", Q[:, :, :0], K, V, {}, ValueError, r"all sizes must be >= 1"),
    ("mask shape", Q, K, V, {"mask": np.ones((3, 4), bool)}, ValueError,
     r"mask must broadcast to \(B, Hq, Nq, Nk\) = \(1, 4, 3, 5\), got shape \(3, 4\)"),
    ("mask rank 5", Q, K, V, {"mask": np.ones((1, 1, 1, 3, 5), bool)}, ValueError, r"mask must broadcast"),
    ("mask dtype", Q, K, V, {"mask": np.ones((3, 5))}, TypeError, r"mask must be a boolean array"),
    ("bias shape", Q, K, V, {"bias": np.zeros((2, 4, 3, 5))}, ValueError, r"bias must broadcast to .* got shape \(2, 4, 3, 5\)"),
    ("bias dtype", Q, K, V, {"bias": np.zeros((3, 5), int)}, TypeError, r"bias must be a real floating-point array"),
    ("causal", Q, K, V, {"causal": "lower"}, ValueError, r"causal must be one of False, True, 'top_left', 'bottom_right', got 'lower'"),
    ("causal int", Q, K, V, {"causal": 1}, ValueError, r"causal must be one of"),
    ("window negative", Q, K, V, {"window": (-1, 0)}, ValueError, r"window left must be a non-negative int or None, got -1"),
    ("window float", Q, K, V, {"window": (None, 1.5)}, ValueError, r"window right must be a non-negative int"),
    ("window arity", Q, K, V, {"window": (3,)}, ValueError, r"window must be None or a pair \(left, right\)"),
    ("window scalar", Q, K, V, {"window": 4}, ValueError, r"window must be None or a pair"),
    ("scale nan", Q, K, V, {"scale": float("nan")}, TypeError, r"scale must be None or a finite real number"),
    ("scale str", Q, K, V, {"scale": "0.5"}, TypeError, r"scale must be None or a finite real number"),
]


@pytest.mark.parametrize("fn_name", list(FUNCTIONS))
@pytest.mark.parametrize("desc,q,k,v,kwargs,error,message", SHAPE_ERRORS, ids=[e[0] for e in SHAPE_ERRORS])
def test_shape_and_option_errors_name_the_argument(fn_name, desc, q, k, v, kwargs, error, message):
    with pytest.raises(error, match=message):
        FUNCTIONS[fn_name](q, k, v, **kwargs)


DROPOUT_ERRORS = [
    ({"dropout_p": 1.0, "dropout_mask": np.ones((3, 5), bool)}, ValueError, r"dropout_p must be a real number in \[0, 1\), got 1.0"),
    ({"dropout_p": 0.5}, ValueError, r"dropout_mask \(boolean, True = keep\) is required when dropout_p > 0"),
    ({"dropout_p": 0.5, "dropout_mask": np.ones((3, 5))}, TypeError, r"dropout_mask must be a boolean array"),
    ({"dropout_p": 0.5, "dropout_mask": np.ones((2, 5), bool)}, ValueError, r"dropout_mask must broadcast"),
]


@pytest.mark.parametrize("fn", [R.attention, R.flash_attention_2_forward, exact_attention])
@pytest.mark.parametrize("kwargs,error,message", DROPOUT_ERRORS)
def test_dropout_errors(fn, kwargs, error, message):
    with pytest.raises(error, match=message):
        fn(Q, K, V, **kwargs)


def test_tile_and_sram_sizes_must_be_positive_ints():
    with pytest.raises(ValueError, match="block_q must be a positive int, got 0"):
        R.flash_attention_2_forward(Q, K, V, block_q=0)
    with pytest.raises(ValueError, match="block_k must be a positive int"):
        R.attention_backward(Q, K, V, np.zeros((1, 4, 3, 3)), np.zeros((1, 4, 3)), DO, block_k=2.5)
    with pytest.raises(ValueError, match=r"sram_size must be a positive int \(on-chip size M in elements\)"):
        R.flash_attention_1(Q, K, V, sram_size=0)
    with pytest.raises(ValueError, match="block_size must be a positive int"):
        R.block_sparse_attention(Q, K, V, np.ones((1, 1), bool), block_size=-4)


def test_block_mask_must_match_the_tile_grid():
    with pytest.raises(ValueError, match=r"block_mask must broadcast to \(B, Hq, ceil\(Nq/block_q\), ceil\(Nk/block_k\)\) = \(1, 4, 2, 3\)"):
        R.block_sparse_attention(Q, K, V, np.ones((2, 2), bool), block_size=2)
    with pytest.raises(TypeError, match="block_mask must be a boolean array"):
        R.block_sparse_attention(Q, K, V, np.ones((2, 3)), block_size=2)
    with pytest.raises(ValueError, match="width must be a non-negative int"):
        R.local_block_mask(4, -1)
    with pytest.raises(ValueError, match="nq_blocks must be a positive int"):
        R.causal_block_mask(0, 3)


def test_backward_checks_o_lse_do():
    o, lse = np.zeros((1, 4, 3, 3)), np.zeros((1, 4, 3))
    with pytest.raises(ValueError, match=r"o must have shape \(1, 4, 3, 3\), got \(1, 4, 3, 2\)"):
        R.attention_backward(Q, K, V, o[..., :2], lse, DO)
    with pytest.raises(ValueError, match=r"lse must have shape \(1, 4, 3\)"):
        R.attention_backward(Q, K, V, o, lse[..., None], DO)
    with pytest.raises(ValueError, match=r"do must have shape \(1, 4, 3, 3\)"):
        R.attention_backward(Q, K, V, o, lse, DO[:, :2])
    with pytest.raises(TypeError, match="do must be a real floating-point array"):
        R.attention_backward(Q, K, V, o, lse, DO.astype(np.int32))
    with pytest.raises(ValueError, match=r"do must have shape \(1, 4, 3, 3\)"):
        R.standard_attention_backward(Q, K, V, DO[..., :1])


def test_merge_states_checks_shapes_and_dtypes():
    o, lse = np.zeros((2, 3, 4)), np.zeros((2, 3))
    with pytest.raises(ValueError, match=r"o2 must have the shape of o1 \(..., N, dv\) = \(2, 3, 4\)"):
        R.merge_states(o, lse, o[..., :2], lse)
    with pytest.raises(ValueError, match=r"lse2 must have shape \(2, 3\)"):
        R.merge_states(o, lse, o, lse[:1])
    with pytest.raises(TypeError, match="lse1 must be a real floating-point array"):
        R.merge_states(o, lse.astype(int), o, lse)


@pytest.mark.parametrize("fn", [R.naive_softmax, R.safe_softmax, R.online_softmax, R.logsumexp,
                                lambda x: R.tiled_online_softmax(x, 2)])
def test_softmax_family_checks_x(fn):
    with pytest.raises(TypeError, match="x must be a real floating-point array, got dtype int64"):
        fn(np.arange(4))
    with pytest.raises(ValueError, match="x must have a non-empty last axis"):
        fn(np.zeros((3, 0)))


def test_row_recurrence_checks_v():
    with pytest.raises(ValueError, match=r"v must have shape \(..., N, dv\) with N = 4 from x, got \(3, 2\)"):
        R.row_recurrence(np.zeros(4), np.zeros((3, 2)))
    with pytest.raises(TypeError, match="v must be a real floating-point array"):
        R.tiled_row_recurrence(np.zeros(4), np.zeros((4, 2), int), 2)
    with pytest.raises(ValueError, match="block must be a positive int"):
        R.tiled_row_recurrence(np.zeros(4), np.zeros((4, 2)), 0)

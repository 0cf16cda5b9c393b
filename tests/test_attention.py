"""flashcheck.reference.attention: standard attention, the float64 ground truth (seed 000 / seed 002 eqs. (1)-(3))."""
import math

import numpy as np
import pytest

from flashcheck.reference import attention
from tests.reference_strategies import assert_within, reference_bounds


def _qkv(rng, B=1, Hq=2, Hkv=1, Nq=4, Nk=5, d=3, dv=2):
    return (
        rng.standard_normal((B, Hq, Nq, d)),
        rng.standard_normal((B, Hkv, Nk, d)),
        rng.standard_normal((B, Hkv, Nk, dv)),
    )


def _row_by_definition(qi, K, V, scale, visible):
    """O_i = sum_j e^{s_j} v_j / sum_j e^{s_j} over visible j, written with math.fsum for one row."""
    s = [scale * float(qi @ K[j]) for j in range(len(K)) if visible[j]]
    if not s:
        return np.zeros(V.shape[1]), -math.inf
    m = max(s)
    w = [math.exp(x - m) for x in s]
    l = math.fsum(w)
    vs = [V[j] for j in range(len(K)) if visible[j]]
    o = np.array([math.fsum(wj * vj[c] for wj, vj in zip(w, vs)) for c in range(V.shape[1])]) / l
    return o, m + math.log(l)


def test_matches_the_row_definition_with_gqa_and_bottom_right_causal():
    rng = np.random.default_rng(1)
    q, k, v = _qkv(rng, B=2, Hq=4, Hkv=2, Nq=3, Nk=6)
    o, lse = attention(q, k, v, causal="bottom_right")
    # the row definition (math.fsum) is at least as accurate as the reference: both within the bound
    b_o, b_lse, _ = reference_bounds(q, k, v, causal="bottom_right")
    for b in range(2):
        for h in range(4):
            for i in range(3):
                visible = [j <= i + 3 for j in range(6)]
                o_i, lse_i = _row_by_definition(q[b, h, i], k[b, h // 2], v[b, h // 2], 1 / math.sqrt(3), visible)
                assert_within("o", o[b, h, i], o_i, 2 * b_o[b, h, i])
                assert_within("lse", lse[b, h, i], lse_i, 2 * b_lse[b, h, i])


def test_gqa_equals_repeated_kv_heads():
    rng = np.random.default_rng(2)
    q, k, v = _qkv(rng, Hq=6, Hkv=2)
    o, lse = attention(q, k, v)
    o2, lse2 = attention(q, np.repeat(k, 3, axis=1), np.repeat(v, 3, axis=1))
    np.testing.assert_array_equal(o, o2)
    np.testing.assert_array_equal(lse, lse2)


def test_fully_masked_rows_give_zero_output_and_minus_inf_lse():
    rng = np.random.default_rng(3)
    q, k, v = _qkv(rng)
    mask = np.ones((4, 5), dtype=bool)
    mask[1] = False
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        o, lse = attention(q, k, v, mask=mask)
    np.testing.assert_array_equal(o[:, :, 1], 0.0)
    assert np.all(lse[:, :, 1] == -np.inf)
    assert np.all(np.isfinite(o)) and np.all(np.isfinite(lse[:, :, [0, 2, 3]]))


def test_logits_of_magnitude_1e4_do_not_overflow():
    rng = np.random.default_rng(4)
    q, k, v = _qkv(rng)
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        o, lse = attention(q, k, v, scale=1e4)
    assert np.all(np.isfinite(o)) and np.all(np.isfinite(lse))
    # each output row is a convex combination of value rows
    assert np.all(o <= v.max(axis=2, keepdims=True) + 1e-12)
    assert np.all(o >= v.min(axis=2, keepdims=True) - 1e-12)


def test_bias_shifts_logits_and_minus_inf_bias_masks():
    rng = np.random.default_rng(5)
    q, k, v = _qkv(rng)
    bias = np.zeros((4, 5))
    bias[:, 2] = -np.inf
    mask = np.ones((4, 5), dtype=bool)
    mask[:, 2] = False
    o1, lse1 = attention(q, k, v, bias=bias)
    o2, lse2 = attention(q, k, v, mask=mask)
    np.testing.assert_array_equal(o1, o2)
    np.testing.assert_array_equal(lse1, lse2)
    o3, lse3 = attention(q, k, v, bias=np.full((1, 1, 1, 1), 2.5))
    o4, lse4 = attention(q, k, v)
    b_o, b_lse, _ = reference_bounds(q, k, v, bias=np.full((1, 1, 1, 1), 2.5))
    assert_within("o", o3, o4, 2 * b_o)
    assert_within("lse", lse3, lse4 + 2.5, 2 * b_lse)


def test_dropout_replays_an_explicit_keep_mask():
    rng = np.random.default_rng(6)
    q, k, v = _qkv(rng)
    keep = rng.random((1, 2, 4, 5)) < 0.7
    o, lse = attention(q, k, v, dropout_p=0.3, dropout_mask=keep)
    s = np.einsum("bhid,bjd->bhij", q, k[:, 0]) / math.sqrt(3)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    expect = np.where(keep, p / 0.7, 0.0) @ v[:, :1]
    b_o, _, _ = reference_bounds(q, k, v, dropout_p=0.3, dropout_mask=keep)
    assert_within("o", o, expect, 2 * b_o)
    np.testing.assert_array_equal(lse, attention(q, k, v)[1])


def test_single_query_single_key_returns_that_value():
    rng = np.random.default_rng(7)
    q, k, v = _qkv(rng, Nq=1, Nk=1)
    o, lse = attention(q, k, v)
    np.testing.assert_array_equal(o, np.repeat(v, 2, axis=1))
    b_o, b_lse, _ = reference_bounds(q, k, v)
    assert_within("lse", lse, (q @ np.swapaxes(k, -1, -2))[..., 0] / math.sqrt(3), 2 * b_lse)


@pytest.mark.parametrize("causal", [False, True])
def test_agrees_with_torch_sdpa_math_in_float64(causal):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(8)
    q, k, v = _qkv(rng, B=2, Hq=4, Hkv=2, Nq=5, Nk=7, d=4, dv=3)
    o, _ = attention(q, k, v, causal=causal)
    t = [torch.from_numpy(x) for x in (q, k, v)]
    ot = torch.nn.functional.scaled_dot_product_attention(*t, is_causal=causal, enable_gqa=True)
    b_o, _, _ = reference_bounds(q, k, v, causal=causal)
    assert_within("o", ot.numpy(), o, 2 * b_o)


def test_reference_imports_neither_torch_nor_triton():
    import subprocess
    import sys

    code = "import sys, flashcheck.reference, flashcheck.reference.exact; bad = {'torch', 'triton'} & set(sys.modules); assert not bad, bad"
    subprocess.run([sys.executable, "-c", code], check=True)

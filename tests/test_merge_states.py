"""flashcheck.reference.merge_states: combining partial results over disjoint key sets (split-KV / ring step)."""
import numpy as np
from hypothesis import given, note, strategies as st

from flashcheck.reference import attention, merge_states
from tests.reference_strategies import assert_within, note_comparison, reference_bounds, reference_cases, strict_fp


def _split(case, cut):
    """The keys [0, cut) and [cut, Nk) as two problems, each with its slice of mask and bias."""
    parts = []
    for cols in (slice(0, cut), slice(cut, None)):
        kw = {k: v for k, v in case.kwargs.items() if k not in ("causal", "window")}
        for name in ("mask", "bias"):
            if name in kw and kw[name] is not None:
                kw[name] = kw[name][..., cols]
        parts.append((case.k[:, :, cols], case.v[:, :, cols], kw))
    return parts


@given(reference_cases(), st.floats(0.0, 1.0))
def test_merging_two_key_halves_equals_attention_over_all_keys(case, frac):
    kw = {k: v for k, v in case.kwargs.items() if k not in ("causal", "window")}
    nk = case.k.shape[2]
    cut = min(nk - 1, int(frac * nk)) if nk > 1 else 0
    (k1, v1, kw1), (k2, v2, kw2) = _split(case, cut) if cut > 0 else _split(case, nk)[:1] * 2
    if cut == 0:  # one key: merge it with an empty side (LSE = -inf)
        o1, lse1 = attention(case.q, k1, v1, **kw1)
        o2, lse2 = np.zeros_like(o1), np.full(lse1.shape, -np.inf)
    else:
        o1, lse1 = attention(case.q, k1, v1, **kw1)
        o2, lse2 = attention(case.q, k2, v2, **kw2)
    with strict_fp():
        o, lse = merge_states(o1, lse1, o2, lse2)
    o_ref, lse_ref = attention(case.q, case.k, case.v, **kw)
    b_o, b_lse, source = reference_bounds(case.q, case.k, case.v, **kw)
    # each part and the whole are within the reference bound; the merge adds a few roundings, inside 2x
    worst = {"o": assert_within("o", o, o_ref, 3 * b_o), "lse": assert_within("lse", lse, lse_ref, 3 * b_lse)}
    note_comparison(note, f"{case.describe()} cut={cut}", worst, source)


def test_both_sides_empty_gives_zero_and_minus_inf():
    o1 = np.zeros((1, 1, 2, 3))
    lse = np.full((1, 1, 2), -np.inf)
    with strict_fp():
        o, l = merge_states(o1, lse, o1, lse)
    np.testing.assert_array_equal(o, 0.0)
    assert np.all(l == -np.inf)


def test_merge_is_symmetric_and_large_lse_does_not_overflow():
    rng = np.random.default_rng(0)
    o1, o2 = rng.standard_normal((2, 1, 1, 4, 2))
    l1, l2 = np.array([[[1e4, -1e4, 0.0, 5.0]]]), np.array([[[1e4 - 1, 3.0, -np.inf, 5.0]]])
    with strict_fp():
        a = merge_states(o1, l1, o2, l2)
        b = merge_states(o2, l2, o1, l1)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    np.testing.assert_array_equal(a[0][0, 0, 2], o1[0, 0, 2])  # the empty side contributes nothing

"""flashcheck.reference.row_recurrence: the single-pass o'_i recurrence, normalized at every step (seed 000)."""
import numpy as np
from hypothesis import given, note

from flashcheck.reference import attention, row_recurrence, safe_softmax
from flashcheck.reference.exact import exact_attention
from tests.reference_strategies import assert_within, logit_rows, strict_fp
from flashcheck.proofs.reference_bounds import row_recurrence_bound


def _values(x, seed):
    return np.random.default_rng(seed).standard_normal(x.shape + (3,))


def _exact_row(x, v):
    """The exact o'_N: attention with q = 1 and k_j = x_j (so the logit is x_j), scale 1, -inf = masked."""
    rows, n = x.shape
    k = np.where(np.isfinite(x), x, 0.0).reshape(rows, 1, n, 1)
    q = np.ones((rows, 1, 1, 1))
    o, _ = exact_attention(q, k, v.reshape(rows, 1, n, -1), scale=1.0, mask=np.isfinite(x).reshape(rows, 1, 1, n))
    return o[:, 0, 0]


@given(logit_rows(max_n=8))
def test_row_recurrence_is_within_bound_of_exact(x):
    v = _values(x, 0)
    with strict_fp():
        o = row_recurrence(x, v)
    worst = assert_within("row_recurrence", o, _exact_row(x, v), row_recurrence_bound(x, v))
    note(f"x={x!r} worst |err|/bound={worst:.3g}")


@given(logit_rows())
def test_every_state_is_the_attention_output_of_its_prefix(x):
    v = _values(x, 1)
    with strict_fp():
        _, states = row_recurrence(x, v, return_states=True)
    for i, state in enumerate(states, start=1):
        prefix = np.einsum("rj,rjc->rc", safe_softmax(x[:, :i]), v[:, :i])
        bound = row_recurrence_bound(x[:, :i], v[:, :i])
        assert_within(f"o'_{i}", state.o, prefix, 2 * bound)


def test_matches_attention_for_one_query():
    rng = np.random.default_rng(2)
    q, k, v = rng.standard_normal((1, 1, 1, 4)), rng.standard_normal((1, 1, 6, 4)), rng.standard_normal((1, 1, 6, 2))
    o, _ = attention(q, k, v, scale=1.0)
    x = (q[0, 0] @ k[0, 0].T)
    assert_within("o", row_recurrence(x, v[0, 0][None]), o[0, 0], 2 * row_recurrence_bound(x, v[0, 0][None]))

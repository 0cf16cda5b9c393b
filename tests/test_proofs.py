"""Every lemma in proofs/: its statement, its Markdown proof, its sympy check and its mpmath check."""
from __future__ import annotations

import importlib
from pathlib import Path

import pytest

LEMMAS = [
    "safe_softmax",
    "online_softmax",
    "tiled_online_softmax",
    "row_recurrence",
    "tiled_row_recurrence",
    "flash_attention_1",
    "flash_attention_2_forward",
    "lse_trick",
    "delta_identity",
    "attention_backward",
    "block_sparse_attention",
    "merge_states",
    "masked_rows",
    "io_complexity",
]
PROOFS = Path(__file__).resolve().parent.parent / "proofs"


def _lemma(name):
    return importlib.import_module(f"flashcheck.proofs.{name}")


@pytest.mark.parametrize("name", LEMMAS)
def test_lemma_has_statement_and_written_proof(name):
    lemma = _lemma(name)
    assert isinstance(lemma.STATEMENT, str) and len(lemma.STATEMENT) > 40
    text = (PROOFS / f"{name}.md").read_text()
    assert "**Statement.**" in text and "**Proof" in text, f"proofs/{name}.md lacks a statement or a proof"


@pytest.mark.parametrize("name", LEMMAS)
def test_lemma_symbolic_check(name):
    _lemma(name).check_symbolic()


@pytest.mark.parametrize("name", LEMMAS)
def test_lemma_numeric_check(name):
    _lemma(name).check_numeric()


def test_a_false_step_is_rejected_by_the_symbolic_check():
    """The checks can fail: the online-softmax step without the rescale factor is not an identity."""
    import sympy as sp

    from flashcheck.proofs.instances import assert_symbolic_zero

    m_prev, m_i, x_i = sp.symbols("m_{i-1} m_i x_i", real=True)
    S = sp.Symbol("S", positive=True)
    wrong = S * sp.exp(-m_prev) + sp.exp(x_i - m_i)  # forgot e^{m_{i-1} - m_i}
    with pytest.raises(AssertionError):
        assert_symbolic_zero(wrong - (S + sp.exp(x_i)) * sp.exp(-m_i), "wrong step")


def test_a_wrong_value_is_rejected_by_the_numeric_comparison():
    import mpmath as mp

    from flashcheck.proofs.instances import DPS, assert_close

    with mp.workdps(DPS):
        with pytest.raises(AssertionError):
            assert_close(mp.mpf(1), mp.mpf(1) + mp.mpf(10) ** -45, "off by 1e-45")


# ---- the checks fail on planted errors (base cases are real, the backward check sees indices) ----------

def _online_step_special_cased_at_the_start(m_prev, d_prev, x_i):
    import sympy as sp

    from flashcheck.proofs.online_softmax import online_step

    if m_prev == -sp.oo:  # wrong only in the base case: d'_1 = 2
        return x_i, sp.Integer(2)
    return online_step(m_prev, d_prev, x_i)


def _online_step_without_rescale(m_prev, d_prev, x_i):
    import sympy as sp

    m_i = sp.Max(m_prev, x_i)
    return m_i, d_prev + sp.exp(x_i - m_i)


@pytest.mark.parametrize("step, where", [(_online_step_special_cased_at_the_start, "base case"),
                                         (_online_step_without_rescale, "inductive step")])
def test_online_softmax_check_rejects_a_planted_step(step, where):
    from flashcheck.proofs.online_softmax import check_symbolic

    with pytest.raises(AssertionError, match=where):
        check_symbolic(step)


def test_tiled_online_softmax_check_rejects_a_tile_step_without_rescale():
    import sympy as sp

    from flashcheck.proofs import tiled_online_softmax as lemma

    def step(m_prev, l_prev, lo, hi, M):
        m_t = sp.Max(m_prev, M)
        return m_t, l_prev + sp.Sum(sp.exp(lemma.X[lemma.J] - m_t), (lemma.J, lo, hi))

    with pytest.raises(AssertionError, match="inductive step"):
        lemma.check_symbolic(step)


@pytest.mark.parametrize("bug", ["base", "no_ratio"])
def test_tiled_row_recurrence_check_rejects_planted_steps(bug):
    import sympy as sp

    from flashcheck.proofs import tiled_row_recurrence as lemma

    def step(state, lo, hi, M):
        m_t, d_t, o_t = lemma.tile_step(state, lo, hi, M)
        if bug == "base" and state[0] == -sp.oo:
            return m_t, d_t, 2 * o_t  # wrong only in the first tile
        if bug == "no_ratio":  # o' carried without d'_{t-1} / d'_t
            m, d, o = state
            return m_t, d_t, o * sp.exp(m - m_t) + (o_t - o * d * sp.exp(m - m_t) / d_t)
        return m_t, d_t, o_t

    with pytest.raises(AssertionError, match="base case" if bug == "base" else "inductive step"):
        lemma.check_symbolic(step)


def test_backward_check_sees_a_shifted_head_dim_index():
    """d = 1 could not tell k_jc from k_j(c+1); the d = 3 check does."""
    from flashcheck.proofs import attention_backward as lemma

    def shifted(*args):
        dq, dk, dv = lemma.fa2_double_loop(*args)
        return [row[1:] + row[:1] for row in dq], dk, dv

    with pytest.raises(AssertionError, match=r"dQ\[0\]\[0\]"):
        lemma.check_symbolic(shifted)


def test_reference_bounds_are_not_vacuous():
    """A relative perturbation of 1e-11 (about 5e4 u) of the float64 results exceeds each bound."""
    import numpy as np

    from flashcheck.proofs.reference_bounds import dropout_attention_bound, row_recurrence_bound, softmax_bound
    from flashcheck.reference import attention, row_recurrence, safe_softmax
    from flashcheck.reference.exact import exact_attention, exact_softmax
    from tests.reference_strategies import assert_within

    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 9)) * 3
    v = rng.standard_normal((3, 9, 2))
    a, ex = safe_softmax(x), exact_softmax(x)
    assert_within("softmax", a, ex, softmax_bound(x).a)
    with pytest.raises(AssertionError, match="exceed the bound"):
        assert_within("softmax", a * (1 + 1e-11), ex, softmax_bound(x).a)
    o = row_recurrence(x, v)
    exact_o = np.einsum("rj,rjc->rc", ex, v)
    with pytest.raises(AssertionError, match="exceed the bound"):
        assert_within("row", o + 1e-11 * np.abs(o), exact_o, row_recurrence_bound(x, v))
    q, k, vv = rng.standard_normal((1, 1, 4, 3)), rng.standard_normal((1, 1, 6, 3)), rng.standard_normal((1, 1, 6, 2))
    keep = rng.random((1, 1, 4, 6)) > 0.4
    kw = dict(dropout_p=0.4, dropout_mask=keep)
    o_d, _ = attention(q, k, vv, **kw)
    o_x, _ = exact_attention(q, k, vv, **kw)
    b = dropout_attention_bound(q, k, vv, **kw).o
    assert_within("dropout o", o_d, o_x, b)
    with pytest.raises(AssertionError, match="exceed the bound"):
        assert_within("dropout o", o_d * (1 + 1e-11), o_x, b)

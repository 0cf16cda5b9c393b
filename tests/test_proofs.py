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
    return importlib.import_module(f"proofs.{name}")


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

    from proofs.instances import assert_symbolic_zero

    m_prev, m_i, x_i = sp.symbols("m_{i-1} m_i x_i", real=True)
    S = sp.Symbol("S", positive=True)
    wrong = S * sp.exp(-m_prev) + sp.exp(x_i - m_i)  # forgot e^{m_{i-1} - m_i}
    with pytest.raises(AssertionError):
        assert_symbolic_zero(wrong - (S + sp.exp(x_i)) * sp.exp(-m_i), "wrong step")


def test_a_wrong_value_is_rejected_by_the_numeric_comparison():
    import mpmath as mp

    from proofs.instances import DPS, assert_close

    with mp.workdps(DPS):
        with pytest.raises(AssertionError):
            assert_close(mp.mpf(1), mp.mpf(1) + mp.mpf(10) ** -45, "off by 1e-45")

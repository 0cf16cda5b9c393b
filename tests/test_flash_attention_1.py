"""flashcheck.reference.flash_attention_1: Algorithm 1 exactly as written, with its IO counter (seeds 000, 004)."""
import math

import numpy as np
from hypothesis import given, note, strategies as st

from flashcheck.reference import algorithm1_hbm_accesses, attention, flash_attention_1
from flashcheck.reference.exact import exact_attention
from tests.reference_strategies import assert_within, note_comparison, reference_bounds, reference_cases, strict_fp

SRAM = st.sampled_from((1, 8, 16, 24, 64, 1024))


@given(reference_cases(), SRAM)
def test_fa1_agrees_with_attention(case, sram_size):
    with strict_fp():
        o, stats = flash_attention_1(case.q, case.k, case.v, sram_size=sram_size, **case.kwargs)
        o_ref, _ = attention(case.q, case.k, case.v, **case.kwargs)
    b_o, _, source = reference_bounds(case.q, case.k, case.v, **case.kwargs)
    worst = {"o": assert_within("o", o, o_ref, 2 * b_o)}
    note_comparison(note, f"{case.describe()} M={sram_size} {stats}", worst, source)


@given(reference_cases(small=True), SRAM)
def test_fa1_is_within_the_reference_bound_of_exact(case, sram_size):
    with strict_fp():
        o, _ = flash_attention_1(case.q, case.k, case.v, sram_size=sram_size, **case.kwargs)
    o_x, _ = exact_attention(case.q, case.k, case.v, **case.kwargs)
    b_o, _, source = reference_bounds(case.q, case.k, case.v, **case.kwargs)
    note_comparison(note, f"{case.describe()} M={sram_size}", {"o": assert_within("o", o, o_x, b_o)}, source)


def test_block_sizes_follow_line_1():
    q = np.zeros((1, 1, 40, 8))
    for M, (b_r, b_c) in {32: (1, 1), 64: (2, 2), 256: (8, 8), 1000: (8, 32)}.items():
        _, stats = flash_attention_1(q, q, q, sram_size=M)
        assert (stats.block_r, stats.block_c) == (b_r, b_c) == (min(math.ceil(M / 32), 8), math.ceil(M / 32))


def _run(n, d=4, M=64, seed=0):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((1, 1, n, d)) for _ in range(3))
    return flash_attention_1(q, k, v, sram_size=M)[1]


def test_peak_on_chip_footprint_does_not_grow_with_n():
    peaks = {n: _run(n).peak_on_chip for n in (16, 32, 64, 128, 256)}
    assert len(set(peaks.values())) == 1, peaks
    # and it is O(M): K_j, V_j (2 B_c d), Q_i, O_i (2 B_r d), S_ij (B_r B_c) and 6 row vectors
    stats = _run(64)
    b_r, b_c, d = stats.block_r, stats.block_c, 4
    assert stats.peak_on_chip == 2 * b_c * d + 2 * b_r * d + b_r * b_c + 6 * b_r


def test_hbm_accesses_match_the_closed_form():
    for n in (1, 7, 16, 33, 64):
        for M in (16, 64, 200):
            stats = _run(n, M=M)
            assert (stats.hbm_reads, stats.hbm_writes) == algorithm1_hbm_accesses(n, n, 4, 4, M), (n, M)


def test_hbm_accesses_grow_as_n_squared_d_squared_over_m():
    """Theorem 2: Theta(N^2 d^2 / M). Doubling N quadruples the traffic (up to the linear terms), doubling
    M halves the quadratic term."""
    a = _run(256, M=64).hbm_accesses
    b = _run(512, M=64).hbm_accesses
    c = _run(512, M=128).hbm_accesses
    assert 3.9 < b / a < 4.0  # the O(N d) terms pull the ratio just below 4
    assert 1.9 < b / c < 2.0


def test_mask_and_bias_tiles_are_read_from_hbm():
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((1, 1, 8, 4)) for _ in range(3))
    base = flash_attention_1(q, k, v, sram_size=64)[1]
    with_mask = flash_attention_1(q, k, v, sram_size=64, mask=np.ones((8, 8), bool), bias=np.zeros((8, 8)))[1]
    assert with_mask.hbm_reads == base.hbm_reads + 2 * 8 * 8

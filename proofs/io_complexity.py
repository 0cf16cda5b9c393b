"""Lemma 14 (proofs/io_complexity.md): HBM accesses of standard attention Theta(Nd + N^2), of FlashAttention
Theta(N^2 d^2 / M), of block-sparse FlashAttention Theta(Nd + N^2 d^2 s / M), checked against the FA1
reference's IO counter. Relied on by flashcheck.reference.flash_attention_1 and tests/test_flash_attention_1.py.

    PYTHONPATH=. python -m flashcheck.proofs.io_complexity     # prints the measured/formula table
"""
from __future__ import annotations

import math

import sympy as sp

STATEMENT = (
    "For N x d inputs and on-chip memory M with d <= M <= Nd: standard attention makes Theta(Nd + N^2) HBM "
    "accesses; FlashAttention (Algorithm 1) makes Theta(N^2 d^2 / M); block-sparse FlashAttention with a "
    "fraction s of nonzero blocks makes Theta(Nd + N^2 d^2 s / M). The ratio measured / formula stays in a "
    "fixed interval over a grid of N, d, M."
)

# (N, d, M) grid of the numeric check: M from 2 to 16 key rows of 4d per tile, always d <= M <= N d
GRID = [(N, d, 4 * d * c) for N in (16, 32, 64) for d in (4, 8, 16) for c in (2, 4, 16) if 4 * d * c <= N * d]


def standard_accesses(N: int, d: int) -> int:
    """Standard attention (seed 000 "Original Attention"; FA1 paper Algorithm 0): read Q, K (2Nd), write
    S (N^2), read S and write P (2N^2), read P and V (N^2 + Nd), write O (Nd)."""
    return 4 * N * d + 4 * N * N


def block_sparse_accesses(N: int, d: int, M: int, s: float) -> float:
    """Algorithm 1 restricted to nonzero blocks (seed 001, block-sparse FlashAttention): K_j, V_j read once
    (2Nd), O, l, m initialised (N(d + 2)), and per nonzero block (i, j) Q_i, O_i, l_i, m_i read and
    O_i, l_i, m_i written: B_r (2d + 2) + B_r (d + 2) elements, for s T_r T_c blocks."""
    b_c = math.ceil(M / (4 * d))
    b_r = min(b_c, d)
    t_r, t_c = math.ceil(N / b_r), math.ceil(N / b_c)
    return 2 * N * d + N * (d + 2) + s * t_r * t_c * b_r * (3 * d + 4)


def check_symbolic() -> None:
    """Leading order of Algorithm 1's count: T_c = N / B_c with B_c = M / (4d), so
    reads + writes = T_c N (2d + 2 + d + 2) + O(Nd) = 4 d N^2 (3d + 4) / M + O(Nd) = Theta(N^2 d^2 / M)."""
    N, d, M = sp.symbols("N d M", positive=True)
    T_c = N / (M / (4 * d))
    per_block_rows = (d + d + 2) + (d + 2)  # Q_i, O_i, l_i, m_i read; O_i, l_i, m_i written
    total = T_c * N * per_block_rows + 2 * N * d + N * (d + 2)
    ratio = sp.limit(sp.simplify(total / (N**2 * d**2 / M)), N, sp.oo)
    assert sp.simplify(ratio - 4 * (3 * d + 4) / d) == 0
    assert sp.limit(ratio, d, sp.oo) == 12  # bounded: between 12 and 28 for d >= 1
    # standard attention: 4Nd + 4N^2 = Theta(Nd + N^2), ratio exactly 4
    assert sp.simplify((4 * N * d + 4 * N**2) / (N * d + N**2)) == 4
    # block-sparse: the per-block term is multiplied by s
    s = sp.Symbol("s", positive=True)
    bs = s * T_c * N * per_block_rows + 2 * N * d + N * (d + 2)
    assert sp.simplify(sp.limit(bs / (N * d + N**2 * d**2 * s / M), N, sp.oo) - 4 * (3 * d + 4) / d) == 0


def table():
    """Rows (N, d, M, measured, closed form, measured / (N^2 d^2 / M), measured / (Nd + N^2 d^2 / M))."""
    import numpy as np

    from flashcheck.reference import algorithm1_hbm_accesses, flash_attention_1

    rows = []
    rng = np.random.default_rng(14)
    for N, d, M in GRID:
        q, k, v = (rng.standard_normal((1, 1, N, d)) for _ in range(3))
        _, stats = flash_attention_1(q, k, v, sram_size=M)
        closed = sum(algorithm1_hbm_accesses(N, N, d, d, M))
        rows.append((N, d, M, stats.hbm_accesses, closed, stats.hbm_accesses / (N * N * d * d / M),
                     stats.hbm_accesses / (N * d + N * N * d * d / M)))
    return rows


def check_numeric() -> None:
    rows = table()
    for N, d, M, measured, closed, r_fa, r_full in rows:
        assert measured == closed, f"IO counter {measured} != closed form {closed} at N={N}, d={d}, M={M}"
        # the leading constant is 4 (3d + 4) / d in [12, 28] (check_symbolic); the O(Nd) terms and the
        # rounding of B_c = ceil(M / 4d) move it by a bounded amount: [1, 40] is a loose enclosure
        assert 1.0 <= r_full <= 40.0, f"measured/formula {r_full:.2f} out of [1, 40] at N={N}, d={d}, M={M}"
    ratios = [r[-1] for r in rows]
    assert max(ratios) / min(ratios) < 10.0, "ratio not bounded over the grid"
    for N, d in ((16, 4), (64, 16)):
        assert standard_accesses(N, d) / (N * d + N * N) == 4.0
        for s in (0.25, 1.0):
            for M in (8 * d, 32 * d):
                r = block_sparse_accesses(N, d, M, s) / (N * d + N * N * d * d * s / M)
                assert 1.0 <= r <= 40.0, f"block-sparse ratio {r:.2f}"
    # anchor: the block-sparse count with s = 1 is Algorithm 1's closed form
    from flashcheck.reference import algorithm1_hbm_accesses

    for N, d, M in ((32, 8, 64), (64, 4, 256)):
        assert block_sparse_accesses(N, d, M, 1.0) == sum(algorithm1_hbm_accesses(N, N, d, d, M))


def main() -> None:
    print("| N | d | M | measured HBM accesses | closed form | measured / (N²d²/M) | measured / (Nd + N²d²/M) |")
    print("|---|---|---|---|---|---|---|")
    for N, d, M, measured, closed, r_fa, r_full in table():
        print(f"| {N} | {d} | {M} | {measured} | {closed} | {r_fa:.2f} | {r_full:.2f} |")


if __name__ == "__main__":
    main()

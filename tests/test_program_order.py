"""The programs' order under a band (kernels/tiles.py `grouped_block`, the forward's, dQ's and dK/dV's programs):
every (block, batch·head) exactly once whatever the grid, and in the order meant: the programs, in dispatch order,
cut into groups of whole heads (the short group first), within a group the blocks from the last (query blocks) or
the first (key blocks) across the group's heads; without a band program_id itself. Run through a kernel that
records each program's pair: the kernels' own tl code (TRITON_INTERPRET=1 on the CPU)."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from flashcheck.kernels.tiles import GROUP_PROGRAMS, grouped_block

pytestmark = pytest.mark.skipif(not (torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1"),
                                reason="needs CUDA, or TRITON_INTERPRET=1 to run the Triton kernel on the CPU")

GRIDS = [(8, 100), (3, 5), (128, 6), (1, 700), (32, 20)]  # (blocks, batch·heads): a short first group and a whole one


@triton.jit
def _order_kernel(Out, GROUPED: tl.constexpr, DESCENDING: tl.constexpr):
    pid, pid_bh = grouped_block(GROUPED, DESCENDING)
    lin = tl.program_id(1) * tl.num_programs(0) + tl.program_id(0)  # dispatch order
    tl.store(Out + 2 * lin, pid)
    tl.store(Out + 2 * lin + 1, pid_bh)


def _order(grid, grouped: bool, descending: bool) -> np.ndarray:
    """(block, batch·head) of each program, in dispatch order: an (n_m · n_bh, 2) array."""
    out = torch.full((grid[0] * grid[1] * 2, ), -1, dtype=torch.int32,
                     device="cuda" if torch.cuda.is_available() else "cpu")
    _order_kernel[grid](out, GROUPED=grouped, DESCENDING=descending)
    return out.cpu().numpy().reshape(-1, 2)


@pytest.mark.parametrize("descending", [True, False])
@pytest.mark.parametrize("grid", GRIDS, ids=str)
def test_every_block_of_every_head_runs_once(grid, descending):
    got = _order(grid, True, descending)
    pairs = {tuple(p) for p in got.tolist()}
    missing = {(m, b) for m in range(grid[0]) for b in range(grid[1])} - pairs
    assert len(pairs) == len(got) and not missing, f"grid {grid}: {len(got) - len(pairs)} repeated, missing {missing}"


@pytest.mark.parametrize("grid", GRIDS, ids=str)
def test_the_last_group_runs_its_blocks_from_the_heaviest_across_its_heads(grid):
    n_m, n_bh = grid
    heads = -(-int(GROUP_PROGRAMS.value) // n_m)
    last = min(heads, n_bh)  # the last group is whole (the short one runs first)
    for descending in (True, False):
        tail = _order(grid, True, descending)[-last * n_m:]
        blocks = tail[:, 0].reshape(n_m, last)  # one row a block, across the group's heads
        want = np.arange(n_m)[::-1] if descending else np.arange(n_m)
        np.testing.assert_array_equal(blocks, np.repeat(want[:, None], last, axis=1),
                                      err_msg=f"grid {grid}, descending {descending}: the last group's blocks")
        np.testing.assert_array_equal(np.sort(tail[:last, 1]), np.arange(n_bh - last, n_bh),
                                      err_msg=f"grid {grid}: the last group's heads")


def test_without_a_band_each_program_is_its_own_pair():
    got = _order((5, 7), False, True)
    want = np.array([(m, b) for b in range(7) for m in range(5)])
    np.testing.assert_array_equal(got, want)

"""bench/gluon/fused_bwd.py's writer partitions keep their mbarrier phase in step with the consumers': each partition
that waits on `stage_full` / `stage_free` by the parity of its tile count `it` advances `it` exactly once a tile.
A writer that never advances it, or advances it twice (as f1c4e1b and e7f4ff3 did when an edit moved a line), waits
on a parity that has already flipped: it reads a stage before it is written, or hangs (the H200 diag call of
2026-11-28d hung 200 s). The kernel runs only on an sm_90 GPU; this reads its source."""
import ast
import inspect

import pytest

import bench.gluon.fused_bwd as fb


def _increments_per_tile(fn) -> list[int]:
    """For each tile loop of fn (`for t in ...`): how many `it += 1` statements it holds, nested blocks included."""
    tree = ast.parse(inspect.getsource(fn.fn if hasattr(fn, "fn") else fn))
    counts = []
    for loop in ast.walk(tree):
        if isinstance(loop, ast.For) and isinstance(loop.target, ast.Name) and loop.target.id == "t":
            counts.append(sum(isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name) and n.target.id == "it"
                              for n in ast.walk(loop)))
    return counts


@pytest.mark.parametrize("partition", ["_dq_writer", "_dq_tma_writer"])
def test_each_writer_advances_its_phase_once_a_tile(partition):
    counts = _increments_per_tile(getattr(fb, partition))
    assert counts == [1], f"{partition}: `it += 1` per tile loop {counts}, expected [1]"


@pytest.mark.parametrize("source, expected", [("for t in range(3):\n    pass\n", [0]),
                                              ("for t in range(3):\n    it += 1\n    it += 1\n", [2])])
def test_the_count_sees_a_missing_or_doubled_advance(source, expected, monkeypatch):
    monkeypatch.setattr(inspect, "getsource", lambda fn: source)
    assert _increments_per_tile(object()) == expected

"""Fully masked rows follow the convention O = 0, LSE = -inf, dQ row = 0 (never NaN).

Rows see no key through the boolean mask when declared, else through bottom-right causal alignment with
Nq > Nk, else through a window that ends before the keys do."""
from dataclasses import replace

import numpy as np
import pytest

from flashcheck.pytest_plugin import record
from tests.properties.judge import gradients, masked_rows, prepare, property_cases, run


def with_dead_rows(case, supports):
    if "mask" in supports:
        return replace(case, mask="fully_masked_rows")
    if "causal" in supports:
        return replace(case, causal="bottom_right", window=None)
    return replace(case, causal=False, window=(0, 0))


@property_cases(examples=(), shape_filter=lambda b: b[3] > b[4])  # Nq > Nk
def test_fully_masked_rows_give_zero_output(kernel_under_test, dtype, case):
    sup = kernel_under_test.supports
    if not sup & {"mask", "causal", "window"}:
        pytest.skip(f"needs 'mask', 'causal' or 'window' to mask a row, and {kernel_under_test.name} declares none")
    subject, case, inputs = prepare(kernel_under_test, dtype, with_dead_rows(case, sup))
    dead = masked_rows(case, inputs)
    if not dead.any():
        return
    backward = "backward" in sup
    got = run(subject, case, inputs, grad=backward)
    problems = []
    o_rows = got.o[dead]
    if not (o_rows == 0).all():
        problems.append(f"O = {o_rows[o_rows != 0][:4]!r}... (expected 0)")
    if got.lse is not None and not (got.lse[dead] == -np.inf).all():
        problems.append(f"LSE = {got.lse[dead][got.lse[dead] != -np.inf][:4]!r}... (expected -inf)")
    if backward:
        dq = gradients(subject, got, inputs.do)[0][dead]
        if not (dq == 0).all():
            problems.append(f"dQ = {dq[dq != 0][:4]!r}... (expected 0)")
    record(info="; ".join(problems) or None)
    if problems:
        where = np.argwhere(dead)[:3].tolist()
        raise AssertionError(f"{int(dead.sum())} fully masked rows (first (b, h, i): {where}) break the convention: "
                             + "; ".join(problems) + f"\n  {case!r} dtype={dtype}")

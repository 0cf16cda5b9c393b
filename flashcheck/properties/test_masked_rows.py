"""Fully masked rows follow the convention O = 0, LSE = -inf, dQ row = 0 (never NaN).

Rows see no key through the boolean mask when declared, else through causal with Nq > Nk (which masks
rows only under bottom-right alignment), else through a window that ends before the keys do. The
output is compared with the suite's comparison: exactly 0 (-inf), NaN never agreeing."""
from dataclasses import replace

import numpy as np
import pytest

from flashcheck.properties.judge import check_within, discard, gradients, masked_rows, prepare, property_cases, run


def with_dead_rows(case, supports):
    if "mask" in supports:
        return replace(case, mask="fully_masked_rows")
    if "causal" in supports:
        return replace(case, causal=True, window=None)
    return replace(case, causal=False, window=(0, 0))


@property_cases(examples=(), shape_filter=lambda b: b[3] > b[4])  # Nq > Nk
def test_fully_masked_rows_give_zero_output(kernel_under_test, dtype, case):
    sup = kernel_under_test.supports
    if not sup & {"mask", "window"} and not ("causal" in sup and kernel_under_test.domain.causal_alignment ==
                                                "bottom_right"):
        pytest.skip(f"needs 'mask', 'window' or bottom-right 'causal' to mask a row, and {kernel_under_test.name} "
                    "declares none")
    subject, case, inputs = prepare(kernel_under_test, dtype, with_dead_rows(case, sup))
    dead = masked_rows(case, inputs)
    if not dead.any():
        discard("no fully masked row in this input")
    backward = "backward" in sup
    got = run(subject, case, inputs, grad=backward)
    rows = dead[..., None]
    check_within("O on fully masked rows", np.where(rows, got.o, 0.0), np.zeros_like(got.o), 0.0, case=case,
                 subject=subject, exact=True, against="the convention O = 0")
    if got.lse is not None:
        check_within("LSE on fully masked rows", np.where(dead, got.lse, -np.inf), np.full_like(got.lse, -np.inf),
                     0.0, case=case, subject=subject, exact=True, against="the convention LSE = -inf")
    if backward:
        dq = gradients(got, inputs.do)[0]
        check_within("dQ on fully masked rows", np.where(rows, dq, 0.0), np.zeros_like(dq), 0.0, case=case,
                     subject=subject, exact=True, against="the convention dQ = 0")

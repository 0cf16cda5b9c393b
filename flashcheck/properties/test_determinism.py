"""The forward pass is bitwise deterministic across runs; so is the backward, when the kernel declares
"deterministic". Compared with the suite's comparison at bound 0: NaN never repeats "equally"."""
import numpy as np
import pytest

from flashcheck.properties.judge import check_within, gradients, masked_rows, prepare, property_cases, run


@property_cases()
def test_forward_is_bitwise_deterministic(kernel_under_test, dtype, case):
    subject, case, inputs = prepare(kernel_under_test, dtype, case)
    first, second = run(subject, case, inputs), run(subject, case, inputs)
    dead = masked_rows(case, inputs)
    check_within("O (second run)", second.o, first.o, 0.0, case=case, subject=subject, against="O (first run)")
    if first.lse is not None:
        check_within("LSE (second run)", second.lse, first.lse, 0.0, case=case, subject=subject,
                     exact=dead & (first.lse == -np.inf), against="LSE (first run)")


@pytest.mark.requires("backward", "deterministic")
@property_cases()
def test_backward_is_bitwise_deterministic(kernel_under_test, dtype, case):
    subject, case, inputs = prepare(kernel_under_test, dtype, case)
    first, second = (gradients(run(subject, case, inputs, grad=True), inputs.do) for _ in range(2))
    for name, a, b in zip(("dQ", "dK", "dV"), first, second):
        check_within(f"{name} (second run)", b, a, 0.0, case=case, subject=subject, against=f"{name} (first run)")

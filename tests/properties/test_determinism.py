"""The forward pass is bitwise deterministic across runs; whether the backward is gets reported."""
import numpy as np
import pytest

from flashcheck.pytest_plugin import record
from tests.properties.judge import gradients, prepare, property_cases, run


def differences(a, b) -> str:
    a, b = np.asarray(a), np.asarray(b)
    differ = ~((a == b) | (np.isnan(a) & np.isnan(b)))
    if not differ.any():
        return ""
    idx = np.unravel_index(int(np.argmax(differ)), a.shape)
    return f"{int(differ.sum())} of {a.size} elements differ, first at {idx}: {a[idx]!r} then {b[idx]!r}"


@property_cases()
def test_forward_is_bitwise_deterministic(kernel_under_test, dtype, case):
    subject, case, inputs = prepare(kernel_under_test, dtype, case)
    first, second = run(subject, case, inputs), run(subject, case, inputs)
    for name, a, b in (("O", first.o, second.o), ("LSE", first.lse, second.lse)):
        if a is None:
            continue
        diff = differences(a, b)
        record(info=diff or None)
        if diff:
            raise AssertionError(f"{name} is not bitwise deterministic across two runs: {diff}\n  {case!r} dtype={dtype}")


@pytest.mark.requires("backward")
@property_cases()
def test_backward_determinism_is_reported(kernel_under_test, dtype, case):
    """Never fails: records `backward_deterministic` (True only if every example repeated bit for bit)."""
    subject, case, inputs = prepare(kernel_under_test, dtype, case)
    runs = [gradients(subject, run(subject, case, inputs, grad=True), inputs.do) for _ in range(2)]
    diffs = [f"d{n}: {d}" for n, a, b in zip("QKV", *runs) if (d := differences(a, b))]
    record(backward_deterministic=not diffs, info="; ".join(diffs) or None)

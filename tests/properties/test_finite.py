"""No NaN or Inf from finite inputs: O, LSE (-inf only on fully masked rows) and, when declared, the
gradients, on the adversarial value distributions (outliers, logits up to the overflow edge, one
dominant logit, tiny magnitudes) and with fully masked rows."""
import numpy as np

from flashcheck.pytest_plugin import record
from tests.properties.judge import gradients, masked_rows, prepare, property_cases, run

ADVERSARIAL = ("outliers", "large_logits", "dominant", "tiny", "constant_rows")


def check_finite(name, x, case, dtype, allow_neginf=None):
    bad = ~np.isfinite(x)
    if allow_neginf is not None:
        bad &= ~(allow_neginf & (x == -np.inf))
    if bad.any():
        idx = np.unravel_index(int(np.argmax(bad)), x.shape)
        raise AssertionError(f"{name} has {int(bad.sum())} non-finite entries from finite inputs; first at {idx}: "
                             f"{x[idx]!r}\n  {case!r} dtype={dtype}")


@property_cases(values=ADVERSARIAL)
def test_no_nan_or_inf_from_finite_inputs(kernel_under_test, dtype, case):
    subject, case, inputs = prepare(kernel_under_test, dtype, case)
    backward = "backward" in subject.kernel.supports
    got = run(subject, case, inputs, grad=backward)
    check_finite("O", got.o, case, dtype)
    if got.lse is not None:
        check_finite("LSE", got.lse, case, dtype, allow_neginf=masked_rows(case, inputs))
    if backward:
        for name, g in zip(("dQ", "dK", "dV"), gradients(subject, got, inputs.do)):
            check_finite(name, g, case, dtype)


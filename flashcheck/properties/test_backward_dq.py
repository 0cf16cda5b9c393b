"""dQ (autograd through the kernel's O) is within the derived bound of the float64 FA2 backward."""
import pytest

from flashcheck.properties.judge import backward_result, check_within, masked_rows, prepare, property_cases

pytestmark = pytest.mark.requires("backward")


@property_cases(draws="backward")  # the same cases as dQ, dK, dV: one backward each
def test_dq_within_bound(kernel_under_test, dtype, case):
    subject, case, inputs = prepare(kernel_under_test, dtype, case)
    got, want, bound = backward_result(subject, case, inputs)
    check_within("dQ", got[0], want[0], bound.dq, case=case, subject=subject, exact=masked_rows(case, inputs)[..., None])

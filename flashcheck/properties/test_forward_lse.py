"""LSE (natural log) is within the derived bound of the float64 reference, fully masked rows exactly -inf."""
import pytest

from flashcheck.properties.judge import check_within, expected, forward_bound, masked_rows, prepare, property_cases, run

pytestmark = pytest.mark.requires("lse")


@property_cases()
def test_lse_within_bound(kernel_under_test, dtype, case):
    subject, case, inputs = prepare(kernel_under_test, dtype, case)
    got = run(subject, case, inputs)
    if got.lse is None:
        raise AssertionError(f"{subject.kernel.name} declares 'lse' but returned no LSE")
    _, lse = expected(case, inputs)
    bound = forward_bound(subject, case, inputs)
    check_within("LSE", got.lse, lse, bound.lse, case=case, subject=subject, exact=masked_rows(case, inputs))

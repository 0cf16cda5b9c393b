"""O is within the derived bound of the float64 reference, fully masked rows exactly 0."""
from flashcheck.properties.judge import (check_within, expected, forward_bound, masked_rows, other_alignment_hint, prepare,
                                        property_cases, run)


@property_cases()
def test_o_within_bound(kernel_under_test, dtype, case):
    subject, case, inputs = prepare(kernel_under_test, dtype, case)
    got = run(subject, case, inputs)
    o, _ = expected(case, inputs)
    bound = forward_bound(subject, case, inputs)
    check_within("O", got.o, o, bound.o, case=case, subject=subject, exact=masked_rows(case, inputs)[..., None],
                 hint=other_alignment_hint(subject, case, inputs, got.o))

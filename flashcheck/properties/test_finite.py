"""No NaN or Inf from finite inputs: O, LSE (-inf only on fully masked rows) and, when declared, the
gradients, on the adversarial value distributions (outliers, logits up to the overflow edge, one
dominant logit, tiny magnitudes, the structured families) and with fully masked rows."""
from flashcheck.properties.judge import check_finite, gradients, masked_rows, prepare, property_cases, run
from flashcheck.structured import FAMILIES

ADVERSARIAL = ("outliers", "large_logits", "dominant", "tiny", "constant_rows") + FAMILIES


@property_cases(values=ADVERSARIAL)
def test_no_nan_or_inf_from_finite_inputs(kernel_under_test, dtype, case):
    subject, case, inputs = prepare(kernel_under_test, dtype, case)
    backward = "backward" in subject.kernel.supports
    got = run(subject, case, inputs, grad=backward)
    check_finite("O", got.o, case=case, subject=subject)
    if got.lse is not None:
        check_finite("LSE", got.lse, case=case, subject=subject, neginf_ok=masked_rows(case, inputs))
    if backward:
        for name, g in zip(("dQ", "dK", "dV"), gradients(got, inputs.do)):
            check_finite(name, g, case=case, subject=subject)

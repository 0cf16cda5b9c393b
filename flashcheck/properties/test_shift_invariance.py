"""Adding a per-row constant to the logits leaves O unchanged.

Without a bias argument the constant comes from the keys: k_j -> k_j + w for one vector w adds
c_i = scale * q_i . w to every logit of row i. k + w is rounded to the kernel's dtype, so the two exact
outputs differ by |O_ref(k) - O_ref(k + w)| (float64, from the rounded values); the kernel outputs may
differ by that plus both derived bounds.
"""
import numpy as np

from flashcheck.properties.judge import check_within, expected, forward_bound, masked_rows, prepare, property_cases, run
from flashcheck.strategies import round_to

SHIFT_STD = 16.0  # per-row constants c_i ~ N(0, 16^2): large enough that exp(s) without a max shift overflows


@property_cases()
def test_per_row_logit_shift_leaves_o_unchanged(kernel_under_test, dtype, case):
    subject, case, inputs = prepare(kernel_under_test, dtype, case)
    w = np.random.default_rng(case.seed ^ 0x5417).standard_normal(case.shape.d) * SHIFT_STD
    shifted = round_to(inputs.k + w, dtype)
    a = run(subject, case, inputs)
    b = run(subject, case, inputs, k=shifted)
    moved = np.abs(expected(case, inputs)[0] - expected(case, inputs, k=shifted)[0])
    tol = forward_bound(subject, case, inputs).o + forward_bound(subject, case, inputs, k=shifted).o + moved
    check_within("O with per-row shifted logits", b.o, a.o, tol, case=case, subject=subject,
                 exact=masked_rows(case, inputs)[..., None], against="O of the unshifted logits")

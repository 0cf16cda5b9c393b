"""Permuting keys and values together (and the mask's key columns) leaves O unchanged.

Both runs approximate the same exact O, so they may differ by at most the sum of their bounds.
Causal and window masks are positional, so the property is stated without them.
"""
from dataclasses import replace

import numpy as np

from flashcheck.properties.judge import check_within, forward_bound, masked_rows, prepare, property_cases, run


@property_cases()
def test_permuting_keys_and_values_leaves_o_unchanged(kernel_under_test, dtype, case):
    subject, case, inputs = prepare(kernel_under_test, dtype, replace(case, causal=False, window=None))
    perm = np.random.default_rng(case.seed ^ 0x5EED).permutation(case.shape.Nk)
    moved = {"k": inputs.k[:, :, perm], "v": inputs.v[:, :, perm],
             "mask": None if inputs.mask is None else np.ascontiguousarray(inputs.mask[..., perm])}
    a = run(subject, case, inputs)
    b = run(subject, case, inputs, **moved)
    tol = forward_bound(subject, case, inputs).o + forward_bound(subject, case, inputs, **moved).o
    check_within("O with permuted keys", b.o, a.o, tol, case=case, subject=subject,
                 exact=masked_rows(case, inputs)[..., None], against="O with the keys in order")

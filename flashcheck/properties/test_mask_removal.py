"""Masking key j out equals removing key j (and its value and mask column).

Causal and window masks are positional, so the property is stated with the boolean mask only.
"""
from dataclasses import replace

import numpy as np
import pytest

from flashcheck.properties.judge import check_within, discard, n_in_domain, forward_bound, masked_rows, prepare, property_cases, run

pytestmark = pytest.mark.requires("mask")


@property_cases()
def test_masking_a_key_equals_removing_it(kernel_under_test, dtype, case):
    subject, case, inputs = prepare(kernel_under_test, dtype, replace(case, causal=False, window=None))
    s = case.shape
    if s.Nk < 2:
        discard("Nk = 1: no key left after removing one")
    if not n_in_domain(subject.kernel, s.Nk - 1) or subject.kernel.domain.square_only:
        discard("Nk - 1 keys: outside the declared domain")
    j = int(np.random.default_rng(case.seed ^ 0x3A5C).integers(s.Nk))
    masked = np.ones((s.B, s.Hq, s.Nq, s.Nk), bool) if inputs.mask is None else inputs.mask.copy()
    masked = np.broadcast_to(masked, (s.B, s.Hq, s.Nq, s.Nk)).copy()
    masked[..., j] = False
    keep = np.arange(s.Nk) != j
    removed = {"k": inputs.k[:, :, keep], "v": inputs.v[:, :, keep], "mask": np.ascontiguousarray(masked[..., keep])}
    a = run(subject, case, inputs, mask=masked)
    b = run(subject, case, inputs, **removed)
    tol = forward_bound(subject, case, inputs, mask=masked).o + forward_bound(subject, case, inputs, **removed).o
    dead = masked_rows(replace(case, mask="random"), replace(inputs, mask=masked))[..., None]
    check_within(f"O with key {j} removed", b.o, a.o, tol, case=case, subject=subject, exact=dead,
                 against=f"O with key {j} masked")

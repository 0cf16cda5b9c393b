"""Grouped-query attention equals repeating each kv head for its group of query heads
(query head h reads kv head h // (Hq // Hkv))."""
from dataclasses import replace

import numpy as np
import pytest

from flashcheck.properties.judge import check_within, forward_bound, masked_rows, prepare, property_cases, run

pytestmark = pytest.mark.requires("gqa")


def grouped(case):
    s = case.shape
    if s.Hkv != s.Hq:
        return case
    shape = replace(s, Hkv=s.Hq // 2) if s.Hq % 2 == 0 else replace(s, Hq=2 * s.Hq)
    return replace(case, shape=shape, mask=None)


@property_cases()
def test_gqa_equals_repeated_kv_heads(kernel_under_test, dtype, case):
    subject, case, inputs = prepare(kernel_under_test, dtype, grouped(case))
    group = case.shape.Hq // case.shape.Hkv
    a = run(subject, case, inputs)
    b = run(subject, case, inputs, k=np.repeat(inputs.k, group, axis=1), v=np.repeat(inputs.v, group, axis=1))
    tol = 2 * forward_bound(subject, case, inputs).o  # the same exact problem, the same bound
    check_within(f"O with kv heads repeated x{group}", b.o, a.o, tol, case=case, subject=subject,
                 exact=masked_rows(case, inputs)[..., None], against=f"grouped O (Hkv={case.shape.Hkv})")

"""Each output row lies in the convex hull of the attended V rows: per coordinate, between the min and
max of the visible values, up to the derived bound. Fully masked rows are exactly 0."""
import numpy as np

from flashcheck.properties.judge import check_within, forward_bound, masked_rows, prepare, property_cases, run
from flashcheck.strategies import visible


@property_cases()
def test_output_rows_in_convex_hull_of_attended_values(kernel_under_test, dtype, case):
    subject, case, inputs = prepare(kernel_under_test, dtype, case)
    got = run(subject, case, inputs)
    group = case.shape.Hq // case.shape.Hkv
    ve = np.repeat(inputs.v, group, axis=1)[:, :, None, :, :]  # (B, Hq, 1, Nk, dv)
    vis = visible(case, inputs.mask)[..., None]  # (B, Hq, Nq, Nk, 1)
    lo = np.where(vis, ve, np.inf).min(axis=3)
    hi = np.where(vis, ve, -np.inf).max(axis=3)
    dead = masked_rows(case, inputs)[..., None]
    nearest = np.where(dead, 0.0, np.clip(got.o, np.where(dead, 0.0, lo), np.where(dead, 0.0, hi)))
    bound = forward_bound(subject, case, inputs).o
    check_within("O (distance to the convex hull of attended V rows)", got.o, nearest, bound, case=case,
                 subject=subject, exact=dead, against="the hull")

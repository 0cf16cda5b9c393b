"""Splitting the keys in two and merging the partial (O, LSE) with `flashcheck.reference.merge_states` equals the
whole.

Error of the merge of two kernel states (o_t', l_t'), t = 1, 2, with |o_t' - o_t| <= b_t and
|l_t' - l_t| <= c_t against the exact partial states: the merged weights are w_1 = sigma(l_1 - l_2),
w_2 = 1 - w_1 (sigma logistic) and o = w_1 o_1 + w_2 o_2, l = logaddexp(l_1, l_2). Then
  o' - o = w_1'(o_1' - o_1) + w_2'(o_2' - o_2) + (w_1' - w_1)(o_1 - o_2),
  |w_1' - w_1| <= |delta| w_1' w_2' e^|delta|, |delta| <= c_1 + c_2
(sigma' = sigma (1 - sigma) changes by at most e^|t| over a step t), |o_1 - o_2| <= |o_1' - o_2'| + b_1 + b_2,
and logaddexp is 1-Lipschitz in the max norm: |l' - l| <= max(c_1, c_2). The merge itself runs in float64
(relative error a few 2^-53, included as 8 * 2^-53 * |merged|). The kernel's whole (O, LSE) has its own
bound; the two may differ by the sum. Positional masks (causal, window) are left out.
"""
from dataclasses import replace

from hypothesis import example
import numpy as np
import pytest

from flashcheck.strategies import Case, Shape
from flashcheck.properties.judge import (check_within, discard, forward_bound, n_in_domain, masked_rows, prepare, property_cases, reference_fn,
                                    run)

pytestmark = pytest.mark.requires("lse")
MERGE_ROUNDING = 8 * 2.0**-53


def merge_error(o1, l1, o2, l2, b1, b2, c1, c2):
    """Bound on |merge(kernel states) - merge(exact states)| for O and LSE (module docstring)."""
    finite = np.isfinite(l1) & np.isfinite(l2)
    delta = np.where(finite, c1 + c2, 0.0)
    # shift by the larger *finite* LSE: with one half fully masked (l = -inf) the other half's LSE is
    # the shift, so exp never sees l - 0 with l > 709 (found at logits ~1e4: the bound came out NaN)
    f1, f2 = np.where(np.isfinite(l1), l1, -np.inf), np.where(np.isfinite(l2), l2, -np.inf)
    top = np.maximum(f1, f2)
    hi = np.where(np.isfinite(top), top, 0.0)
    w1 = np.exp(f1 - hi)
    w2 = np.exp(f2 - hi)
    total = np.where(w1 + w2 > 0, w1 + w2, 1.0)
    w1, w2 = w1 / total, w2 / total
    with np.errstate(over="ignore", invalid="ignore"):
        w12 = w1 * w2
        dw = np.where(w12 > 0, delta * w12 * np.exp(delta), 0.0)  # exp(delta) = inf only where it counts
    o_err = (w1[..., None] * b1 + w2[..., None] * b2 + dw[..., None] * (np.abs(o1 - o2) + b1 + b2))
    return o_err, np.maximum(c1, c2)


@property_cases(examples=None)
@example(case=Case(Shape(1, 2, 1, 1, 17, 16), mask="random", values="large_logits", seed=1))
def test_split_keys_and_merge_equals_whole(kernel_under_test, dtype, case):
    subject, case, inputs = prepare(kernel_under_test, dtype, replace(case, causal=False, window=None))
    Nk = case.shape.Nk
    if Nk < 2:
        discard("Nk = 1: no split into two non-empty halves")
    # both halves inside the declared domain (a sequence-length multiple, a minimum N)
    cuts = [c for c in range(1, Nk) if n_in_domain(subject.kernel, c) and n_in_domain(subject.kernel, Nk - c)]
    if not cuts or subject.kernel.domain.square_only:
        discard("no split of the keys into two halves inside the declared domain")
    cut = int(np.random.default_rng(case.seed ^ 0x5B11).choice(cuts))
    halves = []
    for part in (slice(0, cut), slice(cut, Nk)):
        sub = {"k": inputs.k[:, :, part], "v": inputs.v[:, :, part],
               "mask": None if inputs.mask is None else np.ascontiguousarray(inputs.mask[..., part])}
        halves.append((run(subject, case, inputs, **sub), forward_bound(subject, case, inputs, **sub)))
    (r1, b1), (r2, b2) = halves
    whole, bw = run(subject, case, inputs), forward_bound(subject, case, inputs)
    o, lse = reference_fn("merge_states")(r1.o, r1.lse, r2.o, r2.lse)
    o_err, lse_err = merge_error(r1.o, r1.lse, r2.o, r2.lse, b1.o, b2.o, b1.lse, b2.lse)
    dead = masked_rows(case, inputs)
    check_within(f"merged O (keys split at {cut})", o, whole.o,
                 o_err + bw.o + MERGE_ROUNDING * np.abs(np.nan_to_num(o)), case=case, subject=subject,
                 exact=dead[..., None], against="O of all keys")
    check_within(f"merged LSE (keys split at {cut})", lse, whole.lse,
                 lse_err + bw.lse + MERGE_ROUNDING * np.abs(np.nan_to_num(lse, neginf=0.0)), case=case,
                 subject=subject, exact=dead, against="LSE of all keys")

"""`flashcheck.proofs.bounds.common._half_ulp`: the bound on a round-to-nearest error that the LSE's roundings use
(half an ulp of the value's binade, bounds.md sec. 4 "LSE"). It must hold for every value of magnitude up to the
bound it is given, and never exceed the classical u |x|."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from flashcheck.proofs.bounds.common import _half_ulp

DTYPES = {"float32": np.float32, "float64": np.float64}


@pytest.mark.parametrize("fmt", ["float32"])
@given(x=st.floats(min_value=-1e30, max_value=1e30, allow_nan=False), slack=st.floats(0.0, 1.0))
def test_rounding_error_within_half_ulp_of_any_upper_bound(fmt, x, slack):
    """|fl(x) - x| <= _half_ulp(x_up) for every x_up >= |x| (here |x| (1 + slack)), subnormals and 0 included."""
    err = abs(float(DTYPES[fmt](x)) - x)
    bound = float(_half_ulp(abs(x) * (1.0 + slack), fmt))
    assert err <= bound, f"|fl({x!r}) - x| = {err:.3g} > half ulp {bound:.3g} of the bound {abs(x) * (1 + slack):.3g}"


@given(x=st.floats(min_value=0.0, max_value=1e300, allow_nan=False))
def test_half_ulp_never_exceeds_u_times_the_value_above_the_normal_range(x):
    """Above the smallest normal, half an ulp of the binade is at most u x (the bound it replaces)."""
    if x >= 2.0**-126:  # fp32's smallest normal
        assert float(_half_ulp(x, "float32")) <= 2.0**-24 * x


def test_a_bound_one_binade_too_low_is_exceeded():
    """The property above can fail: half an ulp taken one binade too low (u 2^(e-1)) is exceeded by x just under
    the midpoint of 1 and its fp32 successor (error ~ 2^-24), while _half_ulp(x) holds."""
    x = 1.0 + 2.0**-24 * (1.0 - 2.0**-10)
    err = abs(float(np.float32(x)) - x)
    assert err > float(_half_ulp(x, "float32")) / 2.0  # the planted bound
    assert err <= float(_half_ulp(x, "float32"))

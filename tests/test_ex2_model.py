"""The H100's ex2.approx as a measured table (proofs/ex2_model.py) and the bound that reads it (Precision.ex2_known,
bounds.md sec. 6b):

- the stored table reconstructs bit for bit to the GPU run's (sha256), and the run verified it on every fp32 in
  [-150, 8] with 0 mismatches (the gate of flashcheck.adapters.ours_precision);
- values the GPU returned where the other fixed-point readings fail are reproduced (explicit examples);
- the model is consistent with the independent exhaustive error measurement (proofs/measurements/h100.json):
  its relative error never exceeds the measured maximum; ftz below 2^-126; exact at integers;
- the claim is gated in Precision (only with exp_argument "fma");
- the forward bound that takes the values as known holds against the emulation that computes them through the table
  (random and every structured family, forward and backward), is sharper than the bound without the claim, and
  is exceeded when the bound assumes a correctly rounded exp2 instead (a test that can fail).
"""
from __future__ import annotations

import hashlib
import json
from unittest import mock

import numpy as np
import pytest

from flashcheck.proofs import ex2_model
from flashcheck.proofs.bounds import HARDWARE, Precision, backward_bound, forward_bound
from flashcheck.proofs.emulation import fa2_backward, fa2_forward, round_to
from flashcheck.reference.attention import attention
from flashcheck.reference.backward import attention_backward
from flashcheck.structured import FAMILIES
from tests.test_exp_argument import _inputs


def _f32(*xs):
    return np.array(xs, dtype=np.float32).astype(np.float64)


# ---- the table ----------------------------------------------------------------------------------------

def test_table_is_the_measured_one():
    T, N = ex2_model.tables()
    with open(ex2_model.TABLE_JSON) as f:
        rec = json.load(f)
    assert rec["mismatches"] == 0 and rec["points"] == 2_216_034_306 and not rec["interpreter"]
    assert ex2_model.measured()
    for name, t in (("pos", T), ("neg", N)):
        assert hashlib.sha256(t.tobytes()).hexdigest() == rec["tables"][name]["sha256"], name
    assert T[0] == 1.0 and N[0] == 1.0 and np.all(np.diff(T) >= 0) and np.all(np.diff(N) <= 0)


@pytest.mark.parametrize("x, want", [
    # the GPU's values at the first mismatches of the readings that failed (bench/results/h100-2026-11-26e/mufu)
    (-1.1920928955078125e-07, 0.9999998807907104),  # -2^-23: not the correctly rounded 1 - 2^-24
    (-5.960465188081798e-08, 1.0),  # below one step of 2^-23: truncated to 0
    (-8.940696716308594e-08, 1.0),  # 1.5 steps of 2^-24: truncated, not rounded
    (-1.401298464324817e-45, 1.0),  # the smallest subnormal argument
    (0.0, 1.0), (-1.0, 0.5), (3.0, 8.0), (-126.0, 2.0**-126),
    (-126.5, 0.0),  # below 2^-126: flushed (ftz)
])
def test_values_the_gpu_returned(x, want):
    assert ex2_model.ex2(_f32(x))[0] == want


def test_relative_error_within_the_exhaustive_measurement():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-125.0, 8.0, 200_000), -np.exp2(rng.uniform(-40, 0, 100_000)),
                        np.exp2(rng.uniform(-40, 0, 100_000))]).astype(np.float32).astype(np.float64)
    rel = np.abs(ex2_model.ex2(x) / np.exp2(x) - 1.0)
    assert rel.max() <= HARDWARE.ex2_rel_error, f"max relative error {rel.max():.3e} > {HARDWARE.ex2_rel_error:.3e}"
    assert rel.max() > 0.5 * HARDWARE.ex2_rel_error  # the model is the approximate unit, not an exact exp2


def test_arguments_must_be_fp32():
    with pytest.raises(ValueError, match="fp32"):
        ex2_model.ex2(np.array([0.1]))


def test_precision_gates_the_claim():
    with pytest.raises(ValueError, match="exp_argument"):
        Precision("float32", "ieee", ieee_fma_chain=True, ex2_known=True)
    Precision("float32", "ieee", ieee_fma_chain=True, exp_argument="fma", ex2_known=True)


# ---- the bound that reads it ------------------------------------------------------------------------

def _precision(known=True, block_k=16):
    return Precision("float32", "ieee", exp="libm", l_accumulate="float64", delta_from="fp32", block_k=block_k,
                     ieee_fma_chain=True, exp_argument="fma", ex2_known=known, rowsum_depth=6)


def _emulate(q, k, v, block_k=16):
    return fa2_forward(q, k, v, dtype="float32", dot="ieee", l_accumulate="float64", return_fp32_o=True,
                       ieee_fma_chain=True, block_k=block_k, rowsum="tree", ex2="h100")


@pytest.mark.parametrize("family", ["random"] + list(FAMILIES))
def test_bound_holds_with_known_values(family):
    q, k, v, do = _inputs(family, 0, Nk=100)
    o, lse, o32 = _emulate(q, k, v)
    O, L = attention(q, k, v)
    dq, dk, dv = fa2_backward(q, k, v, o, lse, do, dtype="float32", dot="ieee", delta_o=o32, ieee_fma_chain=True,
                              block_k_dq=16)
    exact = attention_backward(q, k, v, O, L, do)
    pr = _precision()
    fb, bb = forward_bound(q, k, v, precision=pr), backward_bound(q, k, v, do, precision=pr)
    for name, got, want, bound in zip(("O", "LSE", "dQ", "dK", "dV"), (o, lse, dq, dk, dv), (O, L, *exact),
                                      (fb.o, fb.lse, bb.dq, bb.dk, bb.dv)):
        err = np.abs(got - want)
        assert np.all(err <= bound), (f"{family}: {name} over its bound at {np.argwhere(err > bound)[:3].tolist()}, "
                                      f"max error/bound {np.max(err / bound):.3g}")


def test_known_values_sharpen_o_on_random_inputs():
    q, k, v, _ = _inputs("random", 0, Nq=16, Nk=512, d=64)
    b = [forward_bound(q, k, v, precision=_precision(c, block_k=64)).o for c in (False, True)]
    assert np.all(b[1] > 0) and np.median(b[1] / b[0]) < 0.5, f"median ratio {np.median(b[1] / b[0]):.3f}"


def _two_keys(seed=0, Nq=256, Nk=2, d=16):
    """Two keys of opposite V (+-1, 1% spread) under many different logits: O's error is then mostly ex2's own,
    A_1 A_2 (rho_1 - rho_2)(v_1 - v_2), which the bound takes with its sign from the table."""
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((1, 1, Nq, d)), rng.standard_normal((1, 1, Nk, d))
    v = np.where(np.arange(Nk)[:, None] % 2 == 0, 1.0, -1.0) * (1 + 0.01 * rng.standard_normal((Nk, d)))
    return [round_to(a, "float32") for a in (q, k, v[None, None])]


def test_bound_assuming_a_correctly_rounded_exp2_is_exceeded():
    q, k, v = _two_keys()
    o, _, _ = _emulate(q, k, v)
    err = np.abs(o - attention(q, k, v)[0])
    assert np.all(err <= forward_bound(q, k, v, precision=_precision()).o)

    def correctly_rounded(x):
        return np.exp2(np.asarray(x, dtype=np.float64)).astype(np.float32).astype(np.float64)

    with mock.patch.object(ex2_model, "ex2", correctly_rounded):
        wrong = forward_bound(q, k, v, precision=_precision()).o
    assert np.sum(err > wrong) > 0, "a bound assuming a correctly rounded exp2 held where the H100's ex2 was used"

"""The backward's recomputed P~ as a known number (Precision.bwd_p_known): both backward kernels compile
P~ = ex2(min(fl32(qk c - fl32(LSE log2 e)), 0)) with one rounding of the argument (bench/compile_forward.py --record,
"bwd_exp_argument"), ex2 the measured table. The bound (proofs/bounds/backward.py _recomputed_p_known) evaluates P~
for every fp32 value of the stored LSE's interval: the emulated kernel's P~ is one of them bit for bit, the unfused
form (two roundings) is not (the comparison can fail), and dQ's bound that reads it holds and is sharper."""
from __future__ import annotations

import numpy as np
import pytest

PR = dict(exp="libm", l_accumulate="float64", delta_from="fp32", ieee_fma_chain=True, exp_argument="fma",
          rowsum_depth=6, ex2_known=True, lg2_known=True, bwd_p_known=True)


def _case(family, Nq=64, Nk=300, d=32):
    from bench.bounds_attack import inputs
    from flashcheck.proofs.emulation import fa2_forward

    q, k, v, do = inputs(family, "float32", Nq, Nk, 1, d, 0)
    o, lse, o32 = fa2_forward(q, k, v, dtype="float32", dot="ieee", l_accumulate="float64", ieee_fma_chain=True,
                              rowsum="tree", block_k=64, ex2="h100", lg2="h100", return_fp32_o=True)
    return q, k, v, do, o, lse, o32


def _candidates(q, k, v):
    """The bound's candidates: (ok rows, [P~ per candidate], z_lo, z_hi) from the forward's interval."""
    from flashcheck.proofs.bounds import Precision
    from flashcheck.proofs.bounds.backward import _recomputed_p_known
    from flashcheck.proofs.bounds.forward import _forward

    pr = Precision("float32", "ieee", **PR)
    F = _forward(q, k, v, None, False, None, None, None, pr, "probabilistic", eta=1e-3)
    iv = F.parts.lse_iv
    ok, P = _recomputed_p_known(F.parts.qk[4][3:5], F.scale, F.vis, F.A, iv)
    return ok, P, iv[3], iv[4]


def _emulated_p(q, k, lse, unfused=False):
    import torch

    from flashcheck.proofs.emulation import _fma_logits, recomputed_p_h100
    from flashcheck.proofs.fma_chain import LOG2E

    sc = 1.0 / np.sqrt(q.shape[-1])
    qk, c = _fma_logits(torch.as_tensor(q), torch.as_tensor(k), sc)
    lse2 = torch.as_tensor(lse).float() * torch.tensor(LOG2E, dtype=torch.float32)
    if unfused:  # the product rounded, then the subtraction: the form the record rules out
        return torch.exp2(torch.clamp(qk * c - lse2[..., None], max=0.0)).double().numpy()
    return recomputed_p_h100(qk, c, lse2).double().numpy()


@pytest.mark.parametrize("family", ["random", "rising_logits", "repeated_keys"])
def test_emulated_p_is_the_candidate_of_the_stored_lse(family):
    """The stored LSE is one of the interval's fp32 values, and the bound's P~ for that value is the emulated
    kernel's, bit for bit, on every entry of every claimed row."""
    q, k, v, _, _, lse, _ = _case(family)
    ok, P, z_lo, z_hi = _candidates(q, k, v)
    assert ok.mean() > 0.9, f"{family}: only {ok.mean():.2f} of the rows claimed"
    assert np.all((lse >= z_lo) | ~ok) and np.all((lse <= z_hi) | ~ok)
    want = _emulated_p(q, k, lse)
    # the candidate index of the stored LSE: its fp32 steps above z_lo
    idx = (lse.astype(np.float32).view(np.int32) - np.where(ok, z_lo, 0).astype(np.float32).view(np.int32))
    got = np.take_along_axis(np.stack(P, axis=-1), np.minimum(idx, len(P) - 1)[..., None, None], -1)[..., 0]
    bad = ok[..., None] & (got != want)
    assert not bad.any(), f"{family}: {bad.sum()} entries differ, first at {np.argwhere(bad)[0].tolist()}"


def test_unfused_form_is_not_the_candidate():
    """The same comparison with the argument rounded twice (fl32(fl32(qk c) - lse2)) fails: it can tell the forms."""
    q, k, v, _, _, lse, _ = _case("random")
    ok, P, z_lo, _ = _candidates(q, k, v)
    want = _emulated_p(q, k, lse, unfused=True)
    idx = (lse.astype(np.float32).view(np.int32) - np.where(ok, z_lo, 0).astype(np.float32).view(np.int32))
    got = np.take_along_axis(np.stack(P, axis=-1), np.minimum(idx, len(P) - 1)[..., None, None], -1)[..., 0]
    assert np.sum(ok[..., None] & (got != want)) > 0


def assert_gradient_bounds_hold(family, delta: dict | None = None):
    """dQ, dK, dV of the emulation whose backward computes P~ in the kernel's form (fa2_backward(ex2="h100")) within
    their bounds under PR; returns (q, k, v, do, the BackwardBound). delta: Precision.delta_depth and delta_trees
    claimed too, the emulation's Delta in the first tree (tests/test_delta_tree.py)."""
    from flashcheck.proofs.bounds import Precision, backward_bound
    from flashcheck.proofs.emulation import fa2_backward
    from flashcheck.reference.attention import attention
    from flashcheck.reference.backward import attention_backward

    q, k, v, do, o, lse, o32 = _case(family)
    delta = delta or {}
    got = fa2_backward(q, k, v, o, lse, do, dtype="float32", dot="ieee", delta_o=o32, ieee_fma_chain=True,
                       block_k_dq=64, ex2="h100", delta_tree=delta.get("delta_trees", (None,))[0])
    O, L = attention(q, k, v)
    exact = attention_backward(q, k, v, O, L, do)
    bb = backward_bound(q, k, v, do, precision=Precision("float32", "ieee", **PR, **delta))
    for name, g, e, b in zip(("dQ", "dK", "dV"), got, exact, (bb.dq, bb.dk, bb.dv)):
        err = np.abs(g - e)
        assert np.all(err <= b), f"{family}: {name} over its bound, max error/bound {np.max(err / b):.3g}"
    return q, k, v, do, bb


@pytest.mark.parametrize("family", ["random", "uniform_rows", "repeated_keys", "v_large_mean", "rising_logits"])
def test_dq_bound_with_the_recomputed_p_known_holds(family):
    """The gradients hold; on random rows dQ's bound is sharper than without the claim."""
    from flashcheck.proofs.bounds import Precision, backward_bound

    q, k, v, do, bb = assert_gradient_bounds_hold(family)
    if family == "random":
        pr = Precision("float32", "ieee", **{**PR, "bwd_p_known": False})
        before = backward_bound(q, k, v, do, precision=pr).dq
        assert np.median(bb.dq / before) < 0.8, f"dQ bound ratio with/without {np.median(bb.dq / before):.3f}"


def test_precision_gates_bwd_p_known():
    from flashcheck.proofs.bounds import Precision

    with pytest.raises(ValueError, match="bwd_p_known"):
        Precision("float32", "ieee", ieee_fma_chain=True, exp_argument="fma", bwd_p_known=True)


def test_gradient_bounds_hold_when_the_kernel_tile_is_wider_than_n_k():
    """A real failure, promoted (the GPU audit's quick sweep, fp32 N = 16, d = 16, peaked logits: dQ 1.01 over its
    bound on the H100, 2026-11-26f): with N_k below the kernel's key tile the one tile is the masked one, whose
    exponent arguments are not fused; the backward read the forward with its tiles fitted to N_k, which made the tile
    look full, so the stored LSE's interval and its P~ candidates missed the stored value."""
    from flashcheck.audit_inputs import make_inputs
    from flashcheck.proofs.bounds import Precision, backward_bound
    from flashcheck.proofs.emulation import fa2_backward, fa2_forward
    from flashcheck.reference.attention import attention
    from flashcheck.reference.backward import attention_backward
    from flashcheck.strategies import Shape

    q, k, v, do = (x.astype(np.float32).astype(np.float64)
                   for x in make_inputs(Shape(1, 1, 1, 16, 16, 16), "peaked_logits", 0, 1.0))
    pr = Precision("float32", "ieee", **{**PR, "block_k": 32, "block_q": 32, "block_k_dq": 32})
    o, lse, o32 = fa2_forward(q, k, v, dtype="float32", dot="ieee", l_accumulate="float64", ieee_fma_chain=True,
                              rowsum="tree", block_k=32, ex2="h100", lg2="h100", return_fp32_o=True)
    got = fa2_backward(q, k, v, o, lse, do, dtype="float32", dot="ieee", delta_o=o32, ieee_fma_chain=True,
                       block_k_dq=32, block_q=32, ex2="h100")
    O, L = attention(q, k, v)
    exact = attention_backward(q, k, v, O, L, do)
    bb = backward_bound(q, k, v, do, precision=pr)
    for name, g, e, b in zip(("dQ", "dK", "dV"), got, exact, (bb.dq, bb.dk, bb.dv)):
        err = np.abs(g - e)
        assert np.all(err <= b), f"{name} over its bound, max error/bound {np.max(err / b):.3g}"

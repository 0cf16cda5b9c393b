"""The backward's Delta dot's evaluation tree (issue 8, Precision.delta_depth / delta_trees; bounds.md sec. 8, "The
Delta dot's tree"):

- bench/compile_forward.py reads it off the preprocess kernel's PTX by running it on symbolic floats (delta_tree):
  checked on hand-written PTX (a tree, a planted deeper chain, a double-counted column, an unknown op) and, where the
  installed Triton has a committed record, against a fresh read of every layout variant;
- the claim is validated, made by ours_precision only from the record (never in the interpreter, never without FP
  fusion, never for third-party kernels);
- its bound (backward._delta_tree_bound) holds against the exact fp32 tree on random, cancelling, equal-residue and
  one-large products, and a sum deeper than the claim is caught; through the backward: the gradients hold with the
  claim and dQ narrows, and bench/adversaries/delta_tree_dq.py's dQ (Delta's rounding read whole) holds, a planted
  descending Delta does not.
"""
from __future__ import annotations

import numpy as np
import pytest

# Two threads, each half the row: O and dO of (1, 1, 1, 4) fp32 (params 0..3: O, ORes, DO, Delta), thread t
# loads columns 2t, 2t + 1; fl(p_2t + fl(p_2t+1)) by one fma, the other lane's partial sum by a butterfly shuffle,
# one add, thread 0 stores Delta_0. Depth: mul 1, fma 2, add 3; the leaf order [0, 1, 2, 3].
_PTX = """
.visible .entry attn_bwd_preprocess_kernel(
	.param .u64 attn_bwd_preprocess_kernel_param_0,
)
.reqntid 2
{
	ld.param.b64 	%rd1, [attn_bwd_preprocess_kernel_param_0];
	ld.param.b64 	%rd2, [attn_bwd_preprocess_kernel_param_2];
	ld.param.b64 	%rd3, [attn_bwd_preprocess_kernel_param_3];
	mov.u32 	%r1, %tid.x;
	shl.b32 	%r2, %r1, 3;
	cvt.u64.u32 	%rd4, %r2;
	add.s64 	%rd5, %rd1, %rd4;
	add.s64 	%rd6, %rd2, %rd4;
	ld.global.v2.b32 	{ %r3, %r4 }, [ %rd5 + 0 ];
	ld.global.v2.b32 	{ %r5, %r6 }, [ %rd6 + 0 ];
	mul.f32 	%r7, %r4, %r6;
	fma.rn.f32 	%r8, %r3, %r5, %r7;
	shfl.sync.bfly.b32 	%r9, %r8, 1, 31, -1;
	add.f32 	%r10, %r8, %r9;
	setp.eq.s32 	%p1, %r1, 0;
	@%p1 st.global.b32 [ %rd3 + 0 ], { %r10 };
	ret;
}
"""


class _Launch:
    """What delta_tree reads of a Launch: one row of 4 columns, one program of 2 threads."""
    pointers = (("float32", True),) * 4
    ints = (1, 1, 4, 4, 4, 4, 4, 4)  # Nq, Hq (== 1: constexprs, as Triton specializes them) and the strides
    constexprs = (("HEAD_DV", 4), ("BLOCK_DV", 4), ("BLOCK_M", 1), ("HAS_RES", False))
    num_warps = None


def _tree(ptx):
    from bench.compile_forward import delta_tree

    return delta_tree(ptx, _Launch())


def test_the_ptx_run_reads_the_tree_with_its_fused_and_rounded_products():
    r = _tree(_PTX)
    assert (r["depth"], r["fused"], r["rounded"], r["order"], r["error"]) == (3, 2, 2, [0, 1, 2, 3], None), r


def test_a_planted_deeper_chain_is_read_deeper():
    """Both products rounded alone and the other lane's two added one after the other (a left-to-right tail): column
    0 passes through mul, add, add, add: depth 4, and no longer the pairwise tree."""
    ptx = _PTX.replace("	fma.rn.f32 	%r8, %r3, %r5, %r7;", "	mul.f32 	%r11, %r3, %r5;\n	add.f32 	%r8, %r11, %r7;")
    ptx = ptx.replace("	shfl.sync.bfly.b32 	%r9, %r8, 1, 31, -1;\n	add.f32 	%r10, %r8, %r9;",
                      "	shfl.sync.bfly.b32 	%r9, %r11, 1, 31, -1;\n	shfl.sync.bfly.b32 	%r12, %r7, 1, 31, -1;\n"
                      "	add.f32 	%r13, %r8, %r9;\n	add.f32 	%r10, %r13, %r12;")
    r = _tree(ptx)
    assert (r["depth"], r["fused"], r["rounded"], r["order"], r["error"]) == (4, 0, 4, None, None), r


def test_what_is_not_the_dot_is_refused():
    """A column counted twice (and another not at all), an fp32 operation the tree does not know: nothing claimed."""
    ptx = _PTX.replace("	mul.f32 	%r7, %r4, %r6;", "	mul.f32 	%r14, %r4, %r6;\n	mul.f32 	%r15, %r3, %r5;\n"
                       "	add.f32 	%r16, %r15, %r14;\n	add.f32 	%r7, %r16, %r14;")
    r = _tree(ptx)
    assert r["depth"] is None and "columns" in r["error"], r
    r = _tree(_PTX.replace("	add.f32 	%r10, %r8, %r9;", "	sub.f32 	%r10, %r8, %r9;"))
    assert r["depth"] is None and "sub" in r["error"], r


def test_a_product_of_another_row_or_of_one_tensor_is_refused():
    r = _tree(_PTX.replace("{ %r5, %r6 }, [ %rd6 + 0 ]", "{ %r5, %r6 }, [ %rd5 + 0 ]"))
    assert r["depth"] is None and "product" in r["error"], r  # O times O


def _delta_record() -> dict:
    """The committed record where it holds the Delta dot's tree; the test is skipped otherwise (Triton 3.6.0's until
    the GPU machine runs --record-delta)."""
    import triton

    from tests.compiled_record import committed_record

    rec = committed_record()
    if any("delta" not in c for c in rec["configs"]):
        pytest.skip(f"the record of Triton {triton.__version__} predates the Delta dot's tree")
    return rec


_COMPILE = """
import json, sys
from bench.compile_forward import _record_delta
print(json.dumps(_record_delta((sys.argv[1], int(sys.argv[2])))))
"""


@pytest.mark.parametrize("dtype,d", [("float32", 64), ("bfloat16", 128)])
def test_the_committed_record_is_what_this_triton_compiles(dtype, d):
    """A kernel change that reshapes the Delta dot must be re-recorded (bench/compile_forward.py --record-delta): the
    trees of every layout variant (_delta_variants), for both delta_from."""
    from tests.compiled_record import compiled

    rec = _delta_record()
    cfgs = [c for c in rec["configs"] if (c["dtype"], c["block_d"]) == (dtype, d)]
    assert all(c["delta"] == cfgs[0]["delta"] for c in cfgs)  # one preprocess kernel per (dtype, head dim)
    got = compiled(_COMPILE, dtype, d)
    for delta_from in ("output", "fp32"):
        want, new = cfgs[0]["delta"][delta_from], got[delta_from]
        # Triton 3.9 compiles a complete pair tree (orders stated); 3.6.0 a deeper one the reader states by its depth
        # alone (orders None): either way the record must be what this Triton compiles
        assert new["depth"] is not None, new
        assert new["has_res"] == (delta_from == "fp32" and dtype != "float32")
        for key in ("has_res", "depth", "orders", "fused", "rounded", "variants"):
            assert new[key] == want[key], (delta_from, key, new[key], want[key])


# ------------------------------------------------------------------ the claim and its bound (bounds.md sec. 8)

def test_the_claims_are_validated():
    from flashcheck.proofs.bounds import Precision

    for bad in (0, True, 2.0):
        with pytest.raises(ValueError, match="delta_depth"):
            Precision("float32", "ieee", delta_depth=bad)
    for bad in (((0, 1, 2),), ((0, 0, 1, 2),), ((1, 2, 3, 4),), ([0, 1],), ((0,),), ((0, True),), (0, 1, 2, 3), (),
                ((0, 1, 2, 3), (0, 1)), ((0, 1, 2, 3), (0, 1, 2, 2))):
        with pytest.raises(ValueError, match="delta_trees"):
            Precision("float32", "ieee", delta_depth=3, delta_trees=bad)
    with pytest.raises(ValueError, match="need delta_depth=3"):
        Precision("float32", "ieee", delta_depth=2, delta_trees=((0, 1, 2, 3),))
    with pytest.raises(ValueError, match="need delta_depth=3"):
        Precision("float32", "ieee", delta_trees=((0, 1, 2, 3),))
    ok = ((2, 3, 0, 1), (0, 2, 1, 3))
    assert Precision("float32", "ieee", delta_depth=3, delta_trees=ok).delta_trees == ok


def test_ours_claims_the_recorded_tree_only_for_compiled_code():
    import torch

    from flashcheck.adapters import _precision, ours_precision

    assert ours_precision(torch.float32, "ieee", head_dim=64, interpret=True).delta_depth is None
    assert _precision(input="float32", dot="ieee").delta_depth is None  # a third-party kernel states nothing
    rec = _delta_record()
    for dtype, d, delta_from in ((torch.float32, 64, "fp32"), (torch.bfloat16, 128, "fp32"),
                                 (torch.float16, 32, "output")):
        name = str(dtype)[6:]
        (want,) = {_claim(c["delta"][delta_from]) for c in rec["configs"] if (c["dtype"], c["block_d"]) == (name, d)}
        pr = ours_precision(dtype, "ieee" if name == "float32" else None, head_dim=d, interpret=False,
                            delta_from=delta_from)
        assert (pr.delta_depth, pr.delta_trees) == want, (dtype, d, delta_from)


def test_no_claim_where_triton_compiles_without_fp_fusion(monkeypatch):
    """The recorded pairs are contracted fmas: with FP fusion off each pair rounds both products, so nothing is
    claimed."""
    import torch

    from flashcheck.adapters import ours_precision

    _delta_record()
    assert ours_precision(torch.float32, "ieee", head_dim=64, interpret=False).delta_depth is not None
    for name, value in (("TRITON_FORCE_DISABLE_FP_FUSION", "1"), ("TRITON_DEFAULT_FP_FUSION", "0")):
        with monkeypatch.context() as m:
            m.setenv(name, value)
            assert ours_precision(torch.float32, "ieee", head_dim=64, interpret=False).delta_depth is None, name


def _claim(entry):
    return entry["depth"], None if entry["orders"] is None else tuple(tuple(o) for o in entry["orders"])


U = 2.0**-24


def _f32(x):
    return np.asarray(x, dtype=np.float32).astype(np.float64)


def _family(name: str, n: int, dv: int, rng):
    """(dO, O) rows, fp32 values: random; cancellation (half the products the negatives of the other half, 2^-20
    apart: the sum ~1e-6 of its absolute sum); equal residues (every dO_c an odd multiple of 2^-23 in [1, 2), every O_c
    of 2^-23 mod 2^-16: the products share their low bits, so the pair sums land on ties of their grid and the roundings
    above repeat); one large product then products each just under half its ulp (every one lost in a left-to-right
    sum)."""
    if name == "random":
        return _f32(rng.standard_normal((n, dv))), _f32(rng.standard_normal((n, dv)))
    if name == "cancellation":
        do, o = _f32(rng.standard_normal((n, dv))), _f32(rng.standard_normal((n, dv)))
        h = dv // 2
        do[:, h:] = do[:, :h]
        o[:, h:] = _f32(-o[:, :h] * (1 + rng.standard_normal((n, h)) * 2.0**-20))
        return do, o
    if name == "equal_residues":
        return (_f32(1 + (2 * rng.integers(0, 2**11, (n, dv)) + 1) * 2.0**-23),
                _f32(1 + rng.integers(0, 2**8, (n, dv)) * 2.0**-16 + 2.0**-23))
    do, o = np.ones((n, dv)), _f32(U * (1 - 2.0**-10 * rng.random((n, dv))))
    o[:, 0] = 1.0
    return do, o


def _exact(do, o):
    from fractions import Fraction

    return np.array([float(sum(Fraction(a) * Fraction(b) for a, b in zip(x, y))) for x, y in zip(do, o)])


def _sequential(do, o):
    """A planted deeper tree: the products rounded, then added left to right in fp32 (depth dv)."""
    s = np.zeros(do.shape[0], dtype=np.float32)
    for c in range(do.shape[1]):
        s = s + do[:, c].astype(np.float32) * o[:, c].astype(np.float32)
    return s.astype(np.float64)


def _recorded_trees(dv):
    """The recorded trees of our fp32 preprocess kernel at this head dim (one per layout class, the dense call's first)
    where the installed Triton has a record, else the pairwise tree in column order (the bound holds for whichever of
    its trees the data are summed in)."""
    from bench.bounds_attack import delta_claim

    return delta_claim("float32", "ieee", dv).get("delta_trees") or (tuple(range(dv)),)


FAMILIES = ("random", "cancellation", "equal_residues", "one_large")


@pytest.mark.parametrize("dv", [16, 64, 256])
@pytest.mark.parametrize("family", FAMILIES)
def test_the_tree_bound_holds_on_the_exact_tree(family, dv):
    """The kernel's Delta (the emulation's delta_dot: a recorded tree in exact fp32 arithmetic, each of them) against
    the exact sum of its products: within _delta_tree_bound with the trees, and with the depth alone."""
    import torch

    from flashcheck.proofs.bounds.backward import _delta_tree_bound
    from flashcheck.proofs.emulation import delta_dot

    do, o = _family(family, 200, dv, np.random.default_rng(dv))
    trees = _recorded_trees(dv)
    depth = len(trees[0]).bit_length()
    exact = _exact(do, o)
    for tree in trees:
        got = delta_dot(torch.from_numpy(do).float(), torch.from_numpy(o).float(), tree).double().numpy()
        err = np.abs(got - exact)
        for name, b in (("tree", _delta_tree_bound(do, o, np.zeros_like(o), U, depth, trees, "float32")),
                        ("depth", _delta_tree_bound(do, o, np.zeros_like(o), U, depth))):
            r = err / b
            assert np.all(r <= 1.0), (f"{family} dv {dv} order {trees.index(tree)}: error over the {name} bound, max "
                                      f"{r.max():.3g} at row {r.argmax()}")


@pytest.mark.parametrize("dv", [16, 64, 256])
def test_a_deeper_tree_under_the_claim_is_caught(dv):
    """The same products summed left to right (depth dv, what the claim rules out) exceed the bound of the stated tree
    and of its depth: one large product then products under half its ulp, each lost."""
    from flashcheck.proofs.bounds.backward import _delta_tree_bound

    do, o = _family("one_large", 50, dv, np.random.default_rng(dv))
    err = np.abs(_sequential(do, o) - _exact(do, o))
    trees = _recorded_trees(dv)
    depth = len(trees[0]).bit_length()
    for b in (_delta_tree_bound(do, o, np.zeros_like(o), U, depth, trees, "float32"),
              _delta_tree_bound(do, o, np.zeros_like(o), U, depth)):
        assert np.min(err / b) > 2.0, f"dv {dv}: a left-to-right sum within {np.min(err / b):.3g} of the bound"


def test_a_tree_narrower_than_the_head_dim_is_not_used():
    """Trees read for a smaller head dim say nothing of this call's dot (its depth is not theirs): the model stays."""
    from flashcheck.proofs.bounds import Precision
    from flashcheck.proofs.bounds.backward import _delta_claim
    from flashcheck.proofs.bounds.precision import _model

    M = _model(Precision("float32", "ieee", delta_depth=5, delta_trees=(tuple(range(16)),)))
    assert _delta_claim(M, 16) == (5, (tuple(range(16)),))
    assert _delta_claim(M, 17) == (None, None)
    assert _delta_claim(_model(Precision("float32", "ieee", delta_depth=5)), 64) == (5, None)


def test_the_bound_reads_the_products_uncertainty():
    """O_hat known only within o_err: the bound grows with it (a rounding's binade is that of the largest value the
    node can hold), and an o_err of inf makes it vacuous, never 0 (0 * inf)."""
    from flashcheck.proofs.bounds.backward import _delta_tree_bound

    do, o = _family("random", 20, 64, np.random.default_rng(0))
    trees = _recorded_trees(64)
    b0 = _delta_tree_bound(do, o, np.zeros_like(o), U, 7, trees, "float32")
    b1 = _delta_tree_bound(do, o, np.abs(o) * 2.0**-10, U, 7, trees, "float32")
    assert np.all(b1 >= b0) and np.any(b1 > b0)
    do[0, 3] = 0.0
    assert np.isinf(_delta_tree_bound(do, o, np.full_like(o, np.inf), U, 7, trees, "float32")[0])


@pytest.mark.parametrize("family", ["random", "v_large_mean", "rising_logits", "near_constant_v"])
def test_gradient_bounds_with_the_tree_hold_and_dq_narrows(family):
    """Every claim of the fp32 ieee emulation (tests/test_bwd_p_known.py PR) and the Delta dot's tree: the emulated
    kernel's Delta summed in it, dQ, dK, dV within their bounds; on random rows dQ's bound is sharper than with the
    dot's roundings modelled (its enclosure reads Delta^'s interval, _dS_operands)."""
    from flashcheck.proofs.bounds import Precision, backward_bound
    from tests.test_bwd_p_known import PR, assert_gradient_bounds_hold

    claim = {"delta_depth": 6, "delta_trees": _recorded_trees(32)}
    q, k, v, do, bb = assert_gradient_bounds_hold(family, claim)
    if family == "random":
        before = backward_bound(q, k, v, do, precision=Precision("float32", "ieee", **PR)).dq
        assert np.median(bb.dq / before) < 0.7, f"dQ bound ratio with/without {np.median(bb.dq / before):.3f}"
        assert np.all(bb.dq <= before * (1 + 2.0**-40))


@pytest.mark.parametrize("family,order", [("residues", "tree"), ("one_large", "tree"), ("one_large", "descending")])
def test_dq_reads_delta_whole_against_an_adversarial_tree(family, order):
    """bench/adversaries/delta_tree_dq.py: the exact dQ is 0 and the kernel's dQ is Delta's rounding against dP's
    (known) times sum_j P_ij k_j, every row's Delta pushed by a search within the tree. The bound holds with the
    emulation's Delta in the tree (0.85 of it at N_k 512, residues); a Delta summed from the last column instead (deeper
    than the claim, losing every small product that dP's ascending chain keeps) exceeds it ~4x: the claim is what
    the bound reads."""
    import os
    import sys
    from unittest import mock

    from bench.bounds_attack import run_source
    from flashcheck.proofs import emulation
    from flashcheck.proofs.bounds import backward_bound
    from flashcheck.reference.attention import attention
    from flashcheck.reference.backward import attention_backward

    from bench.bounds_attack import delta_claim

    if not delta_claim("float32", "ieee", 64).get("delta_trees"):
        pytest.skip("the installed Triton's record states the Delta dot's depth alone (Triton 3.6.0): no tree to push "
                    "Delta within")
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench", "adversaries"))
    from delta_tree_dq import build, descending

    q, k, v, do, tree = build(512, nq=8, tries=500, family=family)
    with mock.patch.object(emulation, "delta_dot", descending if order == "descending" else emulation.delta_dot):
        (_, _, dq, _, _), pr = run_source("emulation", "cpu", "float32", "ieee", q, k, v, do)
    assert pr.delta_trees[0] == tree
    O, L = attention(q, k, v)
    r = np.abs(dq - attention_backward(q, k, v, O, L, do)[0]) / backward_bound(q, k, v, do, precision=pr).dq
    if order == "tree":
        assert np.all(r <= 1.0), f"{family}: dQ over its bound, max error/bound {r.max():.4g}"
    else:
        assert r.max() > 2.0, f"a Delta deeper than the claim within {r.max():.4g} of dQ's bound"

"""The backward's Delta dot's evaluation tree (issue 8, Precision.delta_depth / delta_tree):

- bench/compile_forward.py reads it off the preprocess kernel's PTX by running it on symbolic floats (delta_tree):
  checked on hand-written PTX (a tree, a planted deeper chain, a planted product of another row) and, where the
  installed Triton has a committed record, against a fresh compile of our preprocess kernel.
"""
from __future__ import annotations

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
    r = _tree(_PTX.replace("ld.global.v2.b32 	{ %r5, %r6 }, [ %rd6 + 0 ]", "ld.global.v2.b32 	{ %r5, %r6 }, [ %rd5 + 0 ]"))
    assert r["depth"] is None and "product" in r["error"], r  # O times O


_COMPILE = """
import json, sys
from bench.compile_forward import compile_preprocess, delta_tree
launch, ck = compile_preprocess(sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1")
print(json.dumps(delta_tree(ck.asm["ptx"], launch)))
"""


@pytest.mark.parametrize("dtype,d,delta_from", [("float32", 64, "fp32"), ("bfloat16", 128, "fp32"),
                                                 ("float16", 32, "output")])
def test_the_committed_record_is_what_this_triton_compiles(dtype, d, delta_from):
    """A kernel change that reshapes the Delta dot must be re-recorded (bench/compile_forward.py --record-delta)."""
    from tests.compiled_record import committed_record, compiled

    import triton

    rec = committed_record()
    cfgs = [c for c in rec["configs"] if (c["dtype"], c["block_d"]) == (dtype, d)]
    if "delta" not in cfgs[0]:
        pytest.skip(f"the record of Triton {triton.__version__} predates the Delta dot's tree")
    want = cfgs[0]["delta"][delta_from]
    assert all(c["delta"] == cfgs[0]["delta"] for c in cfgs)  # one preprocess kernel per (dtype, head dim)
    has_res = delta_from == "fp32" and dtype != "float32"
    assert want["has_res"] == has_res
    got = compiled(_COMPILE, dtype, d, int(has_res))
    assert got["error"] is None and got["depth"] is not None, got
    for key in ("depth", "order", "fused", "rounded"):
        assert got[key] == want[key], (key, got[key], want[key])

"""The backward kernels' exponent arguments, read off the compiled PTX (the record's bwd_exp_argument):

- bench/compile_forward.py backward_exp_argument follows every ex2.approx argument back through its writers and
  says "fma_min" only for P~ = ex2(min(fma(c2, qk, -fl32(LSE log2 e)), 0)) with c2 = fl32(sm_scale log2 e) and qk
  tl.dot's FMA chain (the argument rounded once), in the dQ kernel through its -inf guard (selp); checked on
  hand-written PTX in the form Triton 3.9 compiles, and on forms that round twice or leave out the clamp;
- the committed Triton 3.9.0 record says "fma_min" for every fp32 "ieee" config, and a fresh compile of the
  backward kernels agrees with it;
- flashcheck.adapters._bwd_exp_fma reads it; a record without the key (3.6.0's) reads as not shown.
"""
from __future__ import annotations

import json

import pytest

from bench.compile_forward import backward_exp_argument, exp_argument_chains

# sm_scale is parameter 13 of the dK/dV kernel (after its 13 pointers); the dot product is an FMA chain from 0
_HEAD = """
	ld.param.b32 	%r57, [attn_bwd_dkdv_kernel_param_13];
	ld.param.b32 	%r58, [attn_bwd_dkdv_kernel_param_14];
	mul.f32 	%r15, %r57, 0f3FB8AA3B;
	ld.shared.v2.b32 	{%r210, %r211}, [%r20];
	fma.rn.f32 	%r100, %r1, %r2, 0f00000000;
	fma.rn.f32 	%r101, %r3, %r4, %r100;
	fma.rn.f32 	%r102, %r5, %r6, 0f00000000;
	fma.rn.f32 	%r103, %r7, %r8, %r102;
"""

# Triton 3.9, float32 "ieee": one fma of c2, qk and -LSE2, clamped at 0 (both operand orders of the fma's product)
_FUSED = _HEAD + """
	mul.f32 	%r1754, %r210, 0f3FB8AA3B;
	neg.f32 	%r1758, %r1754;
	fma.rn.f32 	%r1759, %r15, %r101, %r1758;
	fma.rn.f32 	%r1760, %r103, %r15, %r1758;
	min.f32 	%r1778, %r1759, 0f00000000;
	min.f32 	%r1779, %r1760, 0f00000000;
	ex2.approx.ftz.f32 	%r1794, %r1778;
	ex2.approx.ftz.f32 	%r1795, %r1779;
"""

# the subtraction unfused: fl32(fl32(c2 qk) - LSE2), two roundings
_UNFUSED = _HEAD + """
	mul.f32 	%r1754, %r210, 0f3FB8AA3B;
	mul.f32 	%r1755, %r15, %r101;
	sub.f32 	%r1759, %r1755, %r1754;
	min.f32 	%r1778, %r1759, 0f00000000;
	ex2.approx.ftz.f32 	%r1794, %r1778;
"""

# no clamp at 0: ex2 straight of the fma
_UNCLAMPED = _HEAD + """
	mul.f32 	%r1754, %r210, 0f3FB8AA3B;
	neg.f32 	%r1758, %r1754;
	fma.rn.f32 	%r1759, %r15, %r101, %r1758;
	ex2.approx.ftz.f32 	%r1794, %r1759;
"""

# the dQ kernel: LSE2 = lse == -inf ? 0 : fl32(lse log2 e), loaded masked (a register with two writers)
_DQ_GUARD = _HEAD + """
	mov.u32 	%r127, 0x0;
	@%p9 ld.global.b32 	{ %r127 }, [ %rd50 + 0 ];
	mul.f32 	%r177, %r127, 0f3FB8AA3B;
	setp.eq.f32 	%p2, %r127, 0fFF800000;
	selp.f32 	%r15x, 0f00000000, %r177, %p2;
	neg.f32 	%r9422, %r15x;
	fma.rn.f32 	%r1749, %r15, %r101, %r9422;
	min.f32 	%r1765, %r1749, 0f00000000;
	ex2.approx.ftz.f32 	%r1781, %r1765;
"""


def test_the_compiled_form_is_fma_min():
    assert backward_exp_argument(_FUSED) == "fma_min"
    assert backward_exp_argument(_FUSED, scale_param=13) == "fma_min"


def test_the_chains_are_counted_without_register_names():
    chains = exp_argument_chains(_FUSED, scale_param=13)
    assert sum(chains.values()) == 2 and len(chains) == 2, chains
    want = ("min.f32(fma.rn.f32(mul.f32(ld.param.b32([sm_scale]), 0f3FB8AA3B), fma.rn.f32^2(0f00000000), "
            "neg.f32(mul.f32(ld.shared.v2.b32([addr]), 0f3FB8AA3B))), 0f00000000)")
    assert chains.get(want) == 1, chains


def test_an_unfused_subtraction_is_unknown():
    assert backward_exp_argument(_UNFUSED) == "unknown"
    assert any(k.startswith("min.f32(sub.f32(mul.f32(") for k in exp_argument_chains(_UNFUSED)), \
        exp_argument_chains(_UNFUSED)


def test_a_missing_clamp_is_unknown():
    assert backward_exp_argument(_UNCLAMPED) == "unknown"


def test_the_dq_guard_is_fma_min():
    assert backward_exp_argument(_DQ_GUARD) == "fma_min", exp_argument_chains(_DQ_GUARD)


def test_one_other_argument_makes_the_kernel_unknown():
    """Every ex2 argument must have the form: one unfused among fused ones is enough to say unknown."""
    assert backward_exp_argument(_FUSED + _UNFUSED.replace(_HEAD, "")) == "unknown"


def test_the_scale_must_be_sm_scale_where_its_parameter_is_known():
    assert backward_exp_argument(_FUSED, scale_param=14) == "unknown"
    other = _FUSED.replace("%r15, %r57,", "%r15, %r58,")  # c2 from another parameter
    assert other != _FUSED and backward_exp_argument(other, scale_param=13) == "unknown"


def test_a_register_with_two_writers_is_not_followed():
    """A loop-carried register (a phi: written before the loop and at its end) may hold either value."""
    ptx = _FUSED.replace("\tneg.f32 \t%r1758, %r1754;\n", "\tneg.f32 \t%r1758, %r1754;\n\tmov.b32 \t%r1758, %r3;\n")
    assert ptx != _FUSED and backward_exp_argument(ptx) == "unknown"


def test_no_ex2_is_unknown():
    assert backward_exp_argument(_HEAD) == "unknown"


def _record_39():
    from flashcheck.proofs.hardware import MEASUREMENTS

    path = MEASUREMENTS / "forward_compiled_triton3.9.0.json"
    if not path.exists():
        pytest.skip("no Triton 3.9.0 record")
    rec = json.loads(path.read_text())
    if not any("bwd_exp_argument" in c for c in rec["configs"]):
        pytest.skip("the Triton 3.9.0 record has no backward entry")
    return rec


def test_the_39_record_says_fma_min_for_fp32_ieee():
    rec = _record_39()
    ieee = [c for c in rec["configs"] if (c["dtype"], c["dot"]) == ("float32", "ieee")]
    assert ieee and all(c["bwd_exp_argument"] == "fma_min" for c in ieee), \
        [(c["block_d"], c["bwd_exp_argument"]) for c in ieee]


def test_the_reader():
    from flashcheck.adapters import _bwd_exp_fma
    from flashcheck.kernels.attention import kernel_config

    import torch

    assert not _bwd_exp_fma(None)
    assert not _bwd_exp_fma({"exp_argument": "fma"})  # a record written before the backward was read (3.6.0's)
    assert not _bwd_exp_fma({"bwd_exp_argument": "unknown"})
    rec = _record_39()
    (cfg,) = [c for c in rec["configs"] if (c["dtype"], c["dot"], c["block_d"]) == ("float32", "ieee", 64)]
    tiles = kernel_config(64, torch.float32, interpret=False)
    assert _bwd_exp_fma(cfg) and _bwd_exp_fma(cfg, tiles)
    other = kernel_config(256, torch.float32, interpret=False)  # 32 x 32 dK/dV and dQ tiles: not those recorded
    assert not _bwd_exp_fma(cfg, other)


_COMPILE = """
import json, sys
from bench.compile_forward import backward_exp_argument, compile_backward
out = compile_backward(sys.argv[1], int(sys.argv[3]), 4096, 4096, sys.argv[2])
print(json.dumps({name: backward_exp_argument(ck.asm["ptx"], scale) for name, (_, ck, scale) in out.items()}))
"""


def test_the_committed_record_is_what_this_triton_compiles():
    """A kernel change that reshapes the backward's exponent arguments must be re-recorded (bench/compile_forward.py
    --record)."""
    from tests.compiled_record import committed_record, compiled

    import triton

    rec = committed_record()
    (cfg,) = [c for c in rec["configs"] if (c["dtype"], c["dot"], c["block_d"], c["p_split"]) == ("float32", "ieee",
                                                                                                 64, False)]
    if "bwd_exp_argument" not in cfg:
        pytest.skip(f"the Triton {triton.__version__} record has no backward entry")
    got = compiled(_COMPILE, "float32", "ieee", 64)
    want = {k: v["exp_argument"] for k, v in cfg["bwd_variants"]["plain"].items()}
    assert got == want, (got, want)

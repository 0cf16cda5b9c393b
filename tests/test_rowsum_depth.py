"""The tile rowsum's addition tree (issue 8, Precision.rowsum_depth):

- bench/compile_forward.py reads the tree off the PTX by data flow (every ex2 result a leaf, add.f32 one level,
  butterfly shuffles and shared memory across lanes and warps); checked on hand-written PTX and, where the
  installed Triton has a committed record, against a fresh compile of our forward;
- the claim is gated: validated in Precision, never made for the interpreter or block-sparse tiles;
- the LSE bound that uses it holds against an emulation that sums each tile in a pairwise tree, and is exceeded
  when the emulation sums left to right under the same claim (one large term, then terms each under half an
  ulp of it: every one of them lost), the input the any-order charge is built for.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from flashcheck.proofs.bounds import Precision, forward_bound
from flashcheck.proofs.emulation import _rowsum, fa2_forward, round_to
from flashcheck.reference.attention import attention

_PTX = """
	ex2.approx.ftz.f32 	%r1, %r11;
	ex2.approx.ftz.f32 	%r2, %r12;
	ex2.approx.ftz.f32 	%r3, %r13;
	ex2.approx.ftz.f32 	%r4, %r14;
	add.f32 	%r5, %r1, %r2;
	add.f32 	%r6, %r5, %r3;
	add.f32 	%r7, %r6, %r4;
	shfl.sync.bfly.b32 	%r8, %r7, 1, 31, -1;
	add.f32 	%r9, %r7, %r8;
	st.shared.b32 	[%r20], %r9;
	bar.sync 	0;
	ld.shared.v2.f32 	{%r30, %r31}, [%r21];
	add.f32 	%r32, %r30, %r31;
	cvt.f64.f32 	%rd1, %r32;
	mul.f32 	%r40, %r1, %r11;
"""


def test_the_ptx_data_flow_counts_every_level_of_the_tree():
    """A sequential sum of 4 per thread (depth 3), one butterfly level (4), two warps through shared memory (5):
    the rowsum covers 16 terms; what else reads a leaf is listed, not followed."""
    from bench.compile_forward import rowsum_depths

    r = rowsum_depths(_PTX)
    assert r["depths"] == [5] and r["widths"] == [16] and r["leaves"] == 4, r
    assert r["escaped"] == {"mul.f32": 1}, r


def test_the_claim_is_validated():
    with pytest.raises(ValueError, match="rowsum_depth"):
        Precision("float16", "fp16", rowsum_depth=0)
    with pytest.raises(ValueError, match="rowsum_depth"):
        Precision("float16", "fp16", rowsum_depth=True)


def test_ours_claims_the_recorded_forms_only_for_compiled_code(monkeypatch):
    """triton_fwd's claims (the triton engine's tiles; gluon_fwd's: test_gluon_forward)."""
    import triton

    from flashcheck.adapters import ours_precision
    from flashcheck.kernels import kernel_config
    from flashcheck.proofs.hardware import MEASUREMENTS

    monkeypatch.setenv("FLASHCHECK_FORWARD_ENGINE", "triton")
    assert ours_precision(torch.bfloat16, head_dim=64, interpret=True).rowsum_depth is None
    path = MEASUREMENTS / f"forward_compiled_triton{triton.__version__}.json"
    if not path.exists():
        assert ours_precision(torch.bfloat16, head_dim=64, interpret=False).rowsum_depth is None
        pytest.skip(f"no compiled-code record for Triton {triton.__version__}")
    rec = json.loads(path.read_text())
    # the triton_fwd entries of kernel_config's default tiles (gluon_fwd's and the other tiles': test_gluon_forward)
    default = {(c["dtype"], c["block_d"]): kernel_config(c["block_d"], getattr(torch, c["dtype"]), interpret=False,
                                                         engine="triton")
               for c in rec["configs"] if c["dot"] != "ieee"}
    want = {(c["dtype"], c["block_d"], c["p_split"], bool(c.get("band"))): c["rowsum_depth"] for c in rec["configs"]
            if c["dot"] != "ieee" and c.get("engine", "triton") == "triton"
            and (bool(c.get("band")) or (c["block_m"], c["block_n"]) == (default[c["dtype"], c["block_d"]].fwd.block_m,
                                                                         default[c["dtype"], c["block_d"]].fwd.block_n))}
    for dtype, d in ((torch.bfloat16, 64), (torch.float16, 128)):
        got = ours_precision(dtype, head_dim=d, interpret=False).rowsum_depth
        assert got == want[(str(dtype)[6:], d, False, False)], (dtype, d, got)
    # banded calls' own tile (kernel_config(band=True): d = 128) claims its own entry's depth
    band = ours_precision(torch.float16, head_dim=128, interpret=False).band_forward
    assert band is not None and band.rowsum_depth == want[("float16", 128, False, True)], band
    fp32 = ours_precision(torch.float32, "ieee", head_dim=64, interpret=False)
    claimed = [c for c in rec["configs"] if (c["dtype"], c["dot"], c["block_d"]) == ("float32", "ieee", 64)]
    assert fp32.exp_argument == ("fma" if fp32.ieee_fma_chain and claimed[0]["exp_argument"] == "fma" else "unknown")
    assert ours_precision(torch.float32, "ieee", head_dim=64, interpret=True).exp_argument == "unknown"
    assert ours_precision(torch.bfloat16, head_dim=64, interpret=False).exp_argument == "unknown"  # no FMA chains
    sparse = type("Tiles", (), {"block_k": 64, "block_q": 64})()  # what arithmetic() reads of a BlockSparseMask
    assert ours_precision(torch.bfloat16, head_dim=64, interpret=False, block_mask=sparse).rowsum_depth is None


_COMPILE = """
import json, sys
from bench.compile_forward import compile_forward, exp_argument_forms, fused_exp_argument, rowsum_depths
_, ck = compile_forward(sys.argv[1], int(sys.argv[3]), 4096, 4096, sys.argv[2])
r, forms = rowsum_depths(ck.asm["ptx"]), exp_argument_forms(ck.asm["ptx"])
print(json.dumps({"rowsum": r, "fused": fused_exp_argument(r, forms)}))
"""


@pytest.mark.parametrize("dtype,dot,d", [("bfloat16", "tf32", 64), ("float32", "ieee", 64)])
def test_the_committed_record_is_what_this_triton_compiles(dtype, dot, d):
    """A kernel change that reshapes the rowsum's tree must be re-recorded (bench/compile_forward.py --record)."""
    from tests.compiled_record import committed_record, compiled

    from flashcheck.kernels import kernel_config

    rec = committed_record()
    t = kernel_config(d, getattr(torch, dtype), interpret=False, engine="triton").fwd  # what _COMPILE compiles
    (cfg,) = [c for c in rec["configs"] if (c["dtype"], c["dot"], c["block_d"], c["p_split"], c["block_m"], c["block_n"],
                                            c.get("engine", "triton")) == (dtype, dot, d, False, t.block_m, t.block_n,
                                                                           "triton")]
    got = compiled(_COMPILE, dtype, dot, d)
    r = got["rowsum"]
    assert max(r["depths"]) <= cfg["rowsum_depth"] and cfg["block_n"] in r["widths"], (r, cfg["rowsum_depth"])
    # full tiles fused, the ragged tile's P~ and the alphas subtracted
    assert got["fused"] == (cfg["exp_argument"] == "fma"), (got, cfg["exp_argument"])


def test_the_tree_emulation_has_the_depth_it_states():
    """Pairwise with zero padding: a tile of w terms through ceil(log2 w) additions; sequential: w - 1."""
    p = torch.tensor([[1.0] + [2.0**-25] * 63], dtype=torch.float32)
    assert _rowsum(p, "sequential").item() == 1.0  # every small term lost
    exact = 1.0 + 63 * 2.0**-25
    tree = _rowsum(p, "tree").item()  # the small ones summed in pairs first: most of them kept
    assert 1.0 < tree and abs(tree - exact) <= 6 * 2.0**-24 * exact, tree
    q = torch.rand(3, 5, 37, dtype=torch.float32)
    np.testing.assert_allclose(_rowsum(q, "tree").numpy(), q.double().sum(-1).numpy(), rtol=6 * 2.0**-24)


def _lost_terms(d: int = 16, n: int = 64):
    """One query; key 0 with logit 0 (P~ = 1, the row's max), keys 1.. with P~ ~ 0.9 * 2^-24: under half an ulp
    of 1, so a left-to-right fp32 sum drops every one of them; single nonzero products, so the logits are exact."""
    q = np.zeros((1, 1, 1, d))
    q[..., 0] = 1.0
    k = np.zeros((1, 1, n, d))
    k[0, 0, 1:, 0] = np.log(0.9 * 2.0**-24) * np.sqrt(d)  # s_j = k_j0 / sqrt(d)
    v = np.ones((1, 1, n, d))
    return [round_to(a, "bfloat16") for a in (q, k, v)]


@pytest.mark.parametrize("rowsum,over", [("tree", False), ("sequential", True)])
def test_the_lse_bound_under_the_depth_claim(rowsum, over):
    """Claimed depth 6 (a 64-wide tile): the pairwise tree stays within the bound; left to right exceeds it,
    so the claim is what the bound rests on (and the any-order bound, without the claim, holds for both)."""
    q, k, v = _lost_terms()
    _, lse = fa2_forward(q, k, v, dtype="bfloat16", dot="bf16", l_accumulate="float64", rowsum=rowsum)
    _, L = attention(q, k, v)
    err = np.abs(np.asarray(lse, dtype=np.float64) - L)
    claimed = Precision("bfloat16", "bf16", exp="libm", l_accumulate="float64", rowsum_depth=6)
    any_order = Precision("bfloat16", "bf16", exp="libm", l_accumulate="float64")
    for kind in ("probabilistic", "worst_case"):
        b = forward_bound(q, k, v, precision=claimed, kind=kind).lse
        assert bool((err > b).any()) == over, f"{rowsum} {kind}: |LSE err| {err.ravel()} vs bound {b.ravel()}"
        b_any = forward_bound(q, k, v, precision=any_order, kind=kind).lse
        assert (err <= b_any).all(), f"any order {kind}: |LSE err| {err.ravel()} > bound {b_any.ravel()}"


@pytest.mark.parametrize("family", ["random", "uniform_rows", "rising_logits", "constant_v"])
def test_the_depth_claim_holds_on_the_tree_emulation(family):
    from flashcheck.structured import structured_inputs

    rng = np.random.default_rng(3)
    if family == "random":
        q, k, v = (rng.standard_normal(s) for s in ((1, 2, 8, 32), (1, 2, 300, 32), (1, 2, 300, 32)))
    else:
        x = structured_inputs(family, 1, 2, 2, 8, 300, 32, rng)
        q, k, v = x.q, x.k, x.v
    q, k, v = (round_to(a, "float16") for a in (q, k, v))
    o, lse = fa2_forward(q, k, v, dtype="float16", dot="fp16", l_accumulate="float64", rowsum="tree")
    O, L = attention(q, k, v)
    pr = Precision("float16", "fp16", exp="libm", l_accumulate="float64", rowsum_depth=6)
    for kind in ("probabilistic", "worst_case"):
        b = forward_bound(q, k, v, precision=pr, kind=kind)
        for name, got, ref, bound in (("O", o, O, b.o), ("LSE", lse, L, b.lse)):
            err = np.abs(np.asarray(got, dtype=np.float64) - ref)
            assert (err <= bound).all(), f"{family} {kind} {name}: max err/bound {np.max(err / bound):.3g}"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the device machine)")
@pytest.mark.parametrize("dtype,d", [("bfloat16", 64), ("float16", 128), ("float32", 64)])
@pytest.mark.parametrize("engine", ["triton", "auto"])
def test_gpu_our_lse_holds_the_depth_claim_on_lost_terms(dtype, d, engine, monkeypatch):
    """Our kernel on the lost-terms input, with the depth its compiled code was recorded with: within the bound
    (a left-to-right rowsum would not be: test_the_lse_bound_under_the_depth_claim). Each engine its own claim
    (made for both here; "gluon" at d = 64 makes none on Triton 3.6, whose record holds no depth for triton_fwd's
    128 x 128 tiles at d = 64, the calls outside gluon_fwd's domain)."""
    monkeypatch.setenv("FLASHCHECK_FORWARD_ENGINE", engine)
    from flashcheck.adapters import ours_precision
    from flashcheck.kernels.attention import attention as ours

    q, k, v = _lost_terms(d=d, n=4096)
    q = np.repeat(q, 64, axis=2)  # a full query tile
    q, k, v = (round_to(a, dtype) for a in (q, k, v))
    tdt = getattr(torch, dtype)
    t = [torch.as_tensor(a).to("cuda", tdt) for a in (q, k, v)]
    _, lse = ours(*t, return_lse=True)
    pr = ours_precision(tdt, head_dim=d, interpret=False)
    assert pr.rowsum_depth is not None, "no compiled-code record for this Triton version"
    _, L = attention(q, k, v)
    err = np.abs(lse.double().cpu().numpy() - L)
    for kind in ("probabilistic", "worst_case"):
        b = forward_bound(q, k, v, precision=pr, kind=kind).lse
        assert (err <= b).all(), f"{dtype} d {d} {kind}: max |LSE err|/bound {np.max(err / b):.3g}"

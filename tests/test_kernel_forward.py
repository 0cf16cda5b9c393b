"""The Triton forward (O and LSE) agrees with flashcheck.reference.attention within flashcheck.proofs.bounds.forward_bound.

CPU: through TRITON_INTERPRET=1 in float32 and float16 (bf16 runs on the GPU, test_kernel_gpu.py).
Every feature: GQA, Nq != Nk, N not a multiple of the tile, head dims 16..111 and dv != d, causal in
both alignments, sliding windows, dense masks including fully masked rows; values from every
distribution of flashcheck/strategies.py. Outputs are poisoned (NaN) before each run.
"""
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from flashcheck.strategies import Case, Shape, cases, materialize
from tests.test_kernel_support import (INTERPRET, assert_within, kernel_precision, needs_kernel,
                                       record,
                                       reference_forward, run_kernel)

# Interpreter-sized shapes (B, Hq, Hkv, Nq, Nk): N = 1, N across 16-row tiles (1, 2, 3+ tiles, ragged),
# Nq != Nk both ways, GQA groups 2 and 4.
KERNEL_SHAPES = (
    (1, 1, 1, 1, 1),
    (1, 2, 1, 1, 17),
    (1, 2, 2, 17, 17),
    (2, 4, 2, 33, 47),
    (1, 4, 1, 40, 23),
    (1, 2, 2, 32, 32),
    (1, 2, 1, 7, 61),
)
KERNEL_HEAD_DIMS = (16, 32, 80, 111)
DTYPES = ("float32", "float16")


def check_forward(case: Case, dtype: str, dot_precision=None):
    from flashcheck.proofs.bounds import forward_bound

    inp = materialize(case, dtype)
    o, lse = run_kernel(inp, case, dtype, dot_precision=dot_precision)
    ref_o, ref_lse = reference_forward(inp, case)
    prec = kernel_precision(dtype, case.shape.d, dot_precision)
    b = forward_bound(inp.q, inp.k, inp.v, scale=inp.scale, causal=case.causal, window=case.window,
                      mask=inp.mask, precision=prec)
    r_o = assert_within("O", o, ref_o, b.o)
    r_l = assert_within("LSE", lse, ref_lse, b.lse)
    record(f"{case} {dtype}: worst |err|/bound O {r_o:.3f}, LSE {r_l:.3f}; precision {prec}")


@needs_kernel
@settings(deadline=None)
@given(case=cases(head_dims=KERNEL_HEAD_DIMS, base=KERNEL_SHAPES), dtype=st.sampled_from(DTYPES))
@example(case=Case(Shape(1, 4, 2, 33, 47, 32), causal="bottom_right", seed=1), dtype="float32")
@example(case=Case(Shape(1, 2, 2, 40, 23, 16), causal=True, window=(3, None), mask="fully_masked_rows",
                   seed=2), dtype="float16")
@example(case=Case(Shape(1, 2, 1, 33, 33, 80), values="large_logits", seed=3), dtype="float16")
def test_forward_matches_reference_within_bound(case, dtype):
    check_forward(case, dtype)


@needs_kernel
def test_forward_tf32_dot_precision_within_its_bound():
    """fp32 with dot_precision="tf32": the bound follows the chosen operand format."""
    check_forward(Case(Shape(1, 2, 1, 33, 47, 32), causal=True, seed=5), "float32", "tf32")


@needs_kernel
def test_forward_value_head_dim_differs():
    """dv != d (v read with its own padded tile width)."""
    from flashcheck.kernels import attention
    from tests.test_kernel_support import to_numpy, to_torch

    rng = np.random.default_rng(7)
    q = rng.standard_normal((1, 2, 20, 24)).astype(np.float32).astype(np.float64)
    k = rng.standard_normal((1, 1, 37, 24)).astype(np.float32).astype(np.float64)
    v = rng.standard_normal((1, 1, 37, 40)).astype(np.float32).astype(np.float64)
    from flashcheck.proofs.bounds import forward_bound
    from flashcheck.reference import attention as ref_attention

    o, lse = attention(to_torch(q, "float32"), to_torch(k, "float32"), to_torch(v, "float32"),
                       causal="bottom_right", return_lse=True)
    ref_o, ref_lse = ref_attention(q, k, v, causal="bottom_right")
    b = forward_bound(q, k, v, causal="bottom_right", precision=kernel_precision("float32", 40))
    assert o.shape == (1, 2, 20, 40)
    assert_within("O", to_numpy(o), ref_o, b.o)
    assert_within("LSE", to_numpy(lse), ref_lse, b.lse)


@needs_kernel
def test_forward_non_contiguous_inputs_are_copied():
    """A transposed (B, N, H, d) → (B, H, N, d) view and a strided last dim give the same O."""
    import torch

    from flashcheck.kernels import attention
    from tests.test_kernel_support import DEVICE

    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 19, 2, 16, generator=g).to(DEVICE).transpose(1, 2)
    k = torch.randn(1, 2, 21, 32, generator=g).to(DEVICE)[..., ::2]
    v = torch.randn(1, 2, 21, 16, generator=g).to(DEVICE)
    assert not q.is_contiguous() and k.stride(-1) == 2
    o = attention(q, k, v)
    o_c = attention(q.contiguous(), k.contiguous(), v)
    assert torch.equal(o, o_c)


def test_interpreter_shapes_are_small():
    """The CPU suite stays within its time budget: every interpreter shape is tiny."""
    assert all(max(s[3], s[4]) <= 64 for s in KERNEL_SHAPES)


def _forward_with(q, k, v, precision="default", **fwd_change):
    """(O, LSE) of `attention(q, k, v, ...)` at kernel_config's tiles with the forward's TileConfig
    fields `fwd_change` replaced (code-generation choices: kv_desc, pipeline_qk, ...)."""
    import dataclasses

    from flashcheck.kernels.attention import KernelConfig, attention, kernel_config

    def run(causal=False, window=None, mask=None):
        base = kernel_config(max(q.shape[-1], v.shape[-1]), q.dtype, precision=precision)
        fwd = dataclasses.replace(base.fwd, **fwd_change)
        return attention(q, k, v, causal=causal, window=window, mask=mask, return_lse=True,
                         precision=precision, tiles=KernelConfig(fwd, base.dkdv, base.dq))
    return run


def _assert_bitwise(what, a, b):
    """(O, LSE) pairs `a` and `b` equal bit for bit (−inf LSE of fully masked rows included, NaN never)."""
    import torch

    (o0, lse0), (o1, lse1) = a, b
    for name, x, y in (("O", o0, o1), ("LSE", lse0, lse1)):
        both_nan = x.isnan() & y.isnan()  # NaN is never agreement: counted, must be none
        assert not bool(both_nan.any()), f"{what}: {name} has {int(both_nan.sum())} NaN"
        diff = (x.float() - y.float()).abs().nan_to_num(float("inf"))
        same = (x == y) | (x.isneginf() & y.isneginf())
        if not bool(same.all()):
            where = tuple(int(i) for i in torch.nonzero(~same)[0])
            raise AssertionError(f"{what}: {name} differs in {int((~same).sum())} of {x.numel()} entries, "
                                 f"first at {where}, max |diff| {diff.max().item():.3g} (bound: 0, the same "
                                 "arithmetic)")


@needs_kernel
@pytest.mark.parametrize("precision", ["default", "accurate"])
@pytest.mark.parametrize("d", [24, 20])  # rows of 48 bytes: descriptors; 40 bytes: pointer loads
def test_forward_kv_descriptors_change_nothing(precision, d):
    """K/V tiles through tensor descriptors (TileConfig.kv_desc, TMA on Hopper) are a
    code-generation choice: O and LSE bit for bit those of pointer loads — ragged N (tiles crossing
    Nk read zeros either way), GQA, causal bottom-right, a dense mask with a fully masked row."""
    import torch

    from tests.test_kernel_support import CUDA, DEVICE

    dtype = torch.bfloat16 if CUDA else torch.float16
    g = torch.Generator().manual_seed(3)
    q = torch.randn(1, 4, 45, d, generator=g).to(DEVICE, dtype)
    k, v = (torch.randn(1, 2, 77, d, generator=g).to(DEVICE, dtype) for _ in range(2))
    mask = torch.rand(1, 1, 45, 77, generator=g).to(DEVICE) > 0.3
    mask[..., 5, :] = False
    o0, lse0 = _forward_with(q, k, v, precision, kv_desc=False)(causal="bottom_right", mask=mask)
    o1, lse1 = _forward_with(q, k, v, precision, kv_desc=True)(causal="bottom_right", mask=mask)
    _assert_bitwise("kv_desc", (o0, lse0), (o1, lse1))
    assert bool((o0[..., 5, :] == 0).all()) and bool(torch.isneginf(lse0[..., 5]).all())


# The pipelined loop's cases (interpreter tiles 16 × 16: Nk // 16 full tiles when nothing masks them;
# n_full 0: nothing; 1: prologue and last P̃ V; 2: no loop iteration; 3, 4, 5: one, two, three):
# (id, (B, Hq, Hkv, Nq, Nk, d), causal, window, mask, precision, dtypes)
PIPELINE_CASES = (
    ("n_full=0", (1, 2, 1, 9, 15, 64), False, None, None, "default", DTYPES),
    ("n_full=1 ragged", (1, 2, 2, 17, 20, 80), False, None, None, "default", DTYPES),
    ("n_full=2 GQA", (1, 4, 2, 16, 45, 64), False, None, None, "default", DTYPES),
    ("n_full=3", (1, 1, 1, 5, 50, 64), False, None, None, "default", ("float16",)),
    ("n_full=4", (1, 1, 1, 5, 64, 64), False, None, None, "default", ("float32",)),
    ("n_full=5 ragged", (1, 1, 1, 5, 93, 80), False, None, None, "default", ("float16",)),
    ("many, causal top-left", (1, 2, 1, 70, 77, 128), True, None, None, "default", DTYPES),
    ("many, causal bottom-right", (2, 2, 1, 33, 90, 64), "bottom_right", None, None, "default", DTYPES),
    ("window", (1, 2, 2, 64, 64, 80), False, (40, 9), None, "default", ("float32",)),
    ("dense mask, masked row", (1, 2, 1, 21, 67, 64), False, None, "dense", "default", ("float16",)),
    ("block-sparse mask", (1, 2, 1, 48, 80, 64), True, None, "sparse", "default", ("float16",)),
    ("accurate (P split)", (1, 2, 1, 20, 64, 128), "bottom_right", None, None, "accurate", ("float16",)),
)


@needs_kernel
@pytest.mark.parametrize("case", PIPELINE_CASES, ids=[c[0] for c in PIPELINE_CASES])
def test_forward_pipelined_qk_changes_nothing(case):
    """The unmasked-tile loop pipelined by hand (TileConfig.pipeline_qk: S_{j+1} = Q K_{j+1}ᵀ issued
    before tile j's softmax) is a schedule, not new arithmetic: O and LSE bit for bit the default
    loop's, for 0 to 5 and many full tiles, ragged N, GQA, both causal alignments, a window, a dense
    mask with a fully masked row, a block-sparse mask and the accurate mode, in fp32 and fp16."""
    import torch

    from flashcheck.kernels.block_mask import build_block_mask
    from tests.test_kernel_support import CUDA, DEVICE

    name, (B, Hq, Hkv, nq, nk, d), causal, window, mask_kind, precision, dtypes = case
    for dtype in dtypes:
        t = torch.bfloat16 if CUDA and dtype == "float16" else getattr(torch, dtype)
        g = torch.Generator().manual_seed(11)
        q = torch.randn(B, Hq, nq, d, generator=g).to(DEVICE, t)
        k, v = (torch.randn(B, Hkv, nk, d, generator=g).to(DEVICE, t) for _ in range(2))
        mask = None
        if mask_kind is not None:
            mask = torch.rand(1, 1, nq, nk, generator=g).to(DEVICE) > 0.2
            mask[..., 3, :] = False
            if mask_kind == "sparse":
                mask[..., 32:, 16:48] = False  # whole tiles empty: skipped
                mask[..., :, :16] = True  # whole tiles visible: the full-tile list
                blk = 16 if not CUDA else 64
                mask = build_block_mask(nq, nk, block_q=blk, block_k=blk, causal=causal, mask=mask)
        kw = dict(causal=causal if mask_kind != "sparse" else False, window=window, mask=mask)
        default = _forward_with(q, k, v, precision)(**kw)
        pipelined = _forward_with(q, k, v, precision, pipeline_qk=True)(**kw)
        _assert_bitwise(f"{name} {dtype}", default, pipelined)
        if mask_kind == "dense":
            assert bool((default[0][..., 3, :] == 0).all()) and bool(torch.isneginf(default[1][..., 3]).all())


# (id, (B, Hq, Hkv, Nq, Nk, d), causal, window): bands whose query blocks see different numbers of keys
HEAVY_FIRST_CASES = (
    ("causal top-left, ragged", (1, 2, 1, 70, 77, 64), True, None),
    ("causal bottom-right, GQA", (2, 4, 2, 33, 90, 80), "bottom_right", None),
    ("window", (1, 2, 2, 64, 64, 64), False, (40, 9)),
    ("no band (nothing reversed)", (1, 1, 1, 40, 50, 64), False, None),
)


@needs_kernel
@pytest.mark.parametrize("case", HEAVY_FIRST_CASES, ids=[c[0] for c in HEAVY_FIRST_CASES])
def test_heavy_first_order_changes_nothing(case):
    """TileConfig.heavy_first (under a band the forward's and the dQ kernel's programs take the query
    blocks from the last one) only changes which program computes which block: O, LSE, dQ, dK, dV bit
    for bit those of the ascending order, both causal alignments, a window, ragged N, GQA."""
    import dataclasses

    import torch

    from flashcheck.kernels.attention import KernelConfig, attention, kernel_config
    from tests.test_kernel_support import CUDA, DEVICE

    name, (B, Hq, Hkv, nq, nk, d), causal, window = case
    dtype = torch.bfloat16 if CUDA else torch.float16
    g = torch.Generator().manual_seed(5)
    q = torch.randn(B, Hq, nq, d, generator=g).to(DEVICE, dtype)
    k, v = (torch.randn(B, Hkv, nk, d, generator=g).to(DEVICE, dtype) for _ in range(2))
    do = torch.randn(B, Hq, nq, d, generator=g).to(DEVICE, dtype)
    base = kernel_config(d, dtype)
    outs = []
    for heavy in (False, True):
        tiles = KernelConfig(*(dataclasses.replace(t, heavy_first=heavy) for t in (base.fwd, base.dkdv, base.dq)))
        qq, kk, vv = (t.detach().clone().requires_grad_() for t in (q, k, v))
        o, lse = attention(qq, kk, vv, causal=causal, window=window, return_lse=True, tiles=tiles)
        outs.append(((o, lse), torch.autograd.grad(o, (qq, kk, vv), do)))
    (f0, g0), (f1, g1) = outs
    _assert_bitwise(f"{name} forward", f0, f1)
    for what, a, b in zip(("dQ", "dK", "dV"), g0, g1):
        _assert_bitwise(f"{name} {what} (and dQ again)", (a, g0[0]), (b, g1[0]))


@needs_kernel
def test_pipelined_qk_and_warp_specialization_are_exclusive():
    """Two schedules of one loop: asking for both is a clear error naming the field, before any launch."""
    import torch

    from flashcheck.kernels.attention import KernelConfig, TileConfig, attention
    from tests.test_kernel_support import DEVICE

    t = TileConfig(16, 16, 1, 1, warp_specialize=True, pipeline_qk=True)
    x = torch.zeros(1, 1, 16, 16, device=DEVICE)
    with pytest.raises(ValueError, match="tiles.fwd: pipeline_qk and warp_specialize"):
        attention(x, x, x, tiles=KernelConfig(t, t, t))


@needs_kernel
@pytest.mark.skipif(not INTERPRET, reason="on the GPU every test runs these tiles already")
@pytest.mark.parametrize("precision,d,band", [("default", 64, False), ("accurate", 64, False),
                                              ("default", 128, False), ("default", 128, True),
                                              ("accurate", 128, False)])
def test_forward_h100_tiles_within_their_bound_in_the_interpreter(precision, d, band):
    """The H100 forward tiles (`kernel_config(..., interpret=False)`: 128×128 at d = 128, 64×64 for banded calls
    there (band), K/V descriptors for the accurate mode at d = 64) through the interpreter, within the bound of their
    own block_k: ragged N, Nq != Nk, GQA, causal bottom-right and fully masked rows across them. (The case is banded:
    on the GPU it runs the band tile at d = 128; the unbanded one is what `tiles=` asks for.)"""
    import torch

    from flashcheck.adapters import ours_precision
    from flashcheck.kernels.attention import kernel_config
    from flashcheck.proofs.bounds import forward_bound

    case = Case(Shape(1, 2, 1, 150, 200, d), causal="bottom_right", mask="fully_masked_rows",
                values="outliers", seed=4)
    inp = materialize(case, "float16")
    tiles = kernel_config(d, torch.float16, interpret=False, precision=precision, band=band)
    o, lse = run_kernel(inp, case, "float16", precision=precision, tiles=tiles)
    prec = ours_precision(torch.float16, head_dim=d, interpret=True, precision=precision, tiles=tiles)
    assert prec.block_k == tiles.fwd.block_n
    ref_o, ref_lse = reference_forward(inp, case)
    b = forward_bound(inp.q, inp.k, inp.v, scale=inp.scale, causal=case.causal, mask=inp.mask,
                      precision=prec)
    r_o = assert_within("O", o, ref_o, b.o)
    r_l = assert_within("LSE", lse, ref_lse, b.lse)
    record(f"{case} {tiles.fwd}: worst |err|/bound O {r_o:.3f}, LSE {r_l:.3f}")


def test_launch_retries_with_fewer_stages_when_shared_memory_does_not_fit():
    """A forward variant whose pipelined buffers exceed the GPU's shared memory (OutOfResources,
    raised before anything runs) is launched with one stage fewer, down to 1, then the error."""
    from triton.runtime.errors import OutOfResources

    from flashcheck.kernels.attention import _launch_fitting

    class Kernel:
        def __init__(self, fits):
            self.fits, self.tried = fits, []

        def __getitem__(self, grid):
            def launch(*args, num_stages, **kwargs):
                self.tried.append(num_stages)
                if num_stages > self.fits:
                    raise OutOfResources(1000 * num_stages, 1000 * self.fits, "shared memory")
                return args, kwargs
            return launch

    k = Kernel(fits=2)
    assert _launch_fitting(k, (1,), 4, "a", b=1) == (("a",), {"b": 1}) and k.tried == [4, 3, 2]
    k = Kernel(fits=0)
    with pytest.raises(OutOfResources):
        _launch_fitting(k, (1,), 3)
    assert k.tried == [3, 2, 1]

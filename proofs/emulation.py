"""CPU emulation of the FA2 kernel's rounding (kernels/triton_fwd.py, kernels/triton_bwd.py), in torch.

Used to measure how tight proofs/bounds is without a GPU. It rounds where the kernel rounds:
inputs in their dtype, logits and all accumulators in float32, base-2 exponent with the running max,
P (and dS in the backward) rounded to the operand dtype before the products, one division at the
end, the result stored in the output dtype. Products are added into the running accumulator as
tl.dot(a, b, acc) does (accumulation="recursive", the default): one rounding per product on CUDA
cores (an exact FMA: product and sum formed in float64, rounded once to fp32), one per `k_step`
products on tensor cores (fp16/bf16/tf32: the k_step products summed exactly, one rounding), through
ALL tiles, visited as our kernel does: per outer block (a program's query block, or the dK/dV kernel's key block) its
partial tiles first (any entry of block x tile masked: the ragged tile, a band's edges, a block-sparse mask's partial
list), then its full ones ascending, tiles with nothing visible skipped (_outer_visits, ported from kernels/tiles.py;
an unmasked head: the ragged tile first, then ascending, for every block); "blocked" sums each tile's product on its
own, then adds it. fa2_backward(dq_accumulation="blocked") sums dQ as the fused backward does in its dK/dV kernel
(fused_over_keys: per key tile one chain from zero, the partials added from the last tile down, or in the rotated
order; Precision.fused_dq);
mma="h100" puts the tensor-core products through the H100's measured truncating steps. What it cannot reproduce:
the GPU's ex2.approx / div.full approximation errors (torch uses correctly rounded-ish libm) and, without mma,
tensor-core truncation (torch's fp32 matmul rounds to nearest); so it is compared against bounds computed with
exp="libm" as well.

    o, lse = fa2_forward(q, k, v, dtype="float16", dot="fp16")
    dq, dk, dv = fa2_backward(q, k, v, o, lse, do, dtype="float16", dot="fp16")

ieee_fma_chain=True (fp32 inputs, dot "ieee"): the logits as Precision.ieee_fma_chain states our kernel computes
them on the GPU, each q.k one ascending fp32 FMA chain (flashcheck.proofs.fma_chain, exact) times the kernel's
qk_scale2 = fl32(fl32(scale) fl32(log2 e)) (bench/probe_fma_dot.py), and the exponent arguments in the forms our
forward compiles to (Precision.exp_argument "fma", bench/compile_forward.py): s2 = fl32(qk c) into the running max,
x = fl32(qk c - m) in one rounding on full tiles, fl32(s2 - m) on the masked tile, alpha = exp2(fl32(m_old - m_new));
otherwise a torch fp32 matmul times
fl32(scale log2 e).

Inputs are float64 NumPy arrays (B, H, N, d) holding values exactly representable in `dtype`
(use `round_to`); outputs are float64 NumPy arrays of what the kernel would return.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

LOG2E = 1.4426950408889634  # log2(e)
LN2 = 0.6931471805599453  # ln(2)

_TORCH = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
          "float64": torch.float64}


def round_to(x, dtype: str) -> np.ndarray:
    """x rounded to `dtype` (round to nearest even), returned as float64."""
    if dtype == "tf32":
        return _tf32(torch.as_tensor(np.asarray(x, dtype=np.float32))).double().numpy()
    return torch.as_tensor(np.asarray(x, dtype=np.float64)).to(_TORCH[dtype]).double().numpy()


def _tf32(x: torch.Tensor) -> torch.Tensor:
    """fp32 -> tf32 (10 explicit mantissa bits) as Triton's tl.dot(input_precision="tf32") does on
    NVIDIA: the raw fp32 bits go to mma/wgmma .tf32, which ignores the low 13 mantissa bits, i.e.
    truncation toward zero (relative error in (−2^-10, 0]; proofs/bounds.md sec. 6)."""
    b = x.float().contiguous().view(torch.int32)
    b = b & ~0x1FFF
    return b.view(torch.float32)


def _operand(x: torch.Tensor, dot: str, dtype) -> torch.Tensor:
    """The value a tensor-core product sees: rounded to the operand format, widened to fp32."""
    if dot == "tf32":
        return _tf32(x.float())
    if dot in ("fp16", "bf16"):
        return x.to(dtype).float()
    if dot == "fp64":
        return x.double()
    return x.float()


def _k_step(dot: str, k_step: int | None) -> int:
    if k_step is not None:
        return k_step
    if dot in ("fp16", "bf16", "tf32"):
        from flashcheck.proofs.bounds import HARDWARE

        return HARDWARE.mma_for(dot).k_step
    return 1


def _resolve_mma(mma, dot: str, k_step: int | None):
    """fa2_forward's / fa2_backward's `mma` argument as the MmaBehaviour of this dot (None: CUDA cores, or mma None)."""
    if mma is None:
        return None
    if mma != "h100":
        raise ValueError(f"mma must be None or 'h100', got {mma!r}")
    from flashcheck.proofs.hardware import h100

    mma = h100().mma_for(dot) if dot in ("fp16", "bf16", "tf32") else None
    if mma is not None and k_step is not None and k_step != mma.k_step:
        raise ValueError(f"k_step={k_step} contradicts the measured tensor-core step ({mma.k_step})")
    return mma


def _mma_dot(a: torch.Tensor, b: torch.Tensor, acc: torch.Tensor, mma) -> torch.Tensor:
    """acc + a @ b through the tensor core's measured step model (flashcheck.proofs.hardware.MmaBehaviour, emulated
    bit for bit by flashcheck.proofs.hardware_probe.BlockFma: k_step exact products aligned to the largest exponent
    with extra_bits below fp32's 24, truncated, summed, the sum truncated into fp32)."""
    from flashcheck.proofs.hardware_probe import BlockFma

    align = {"truncation": "trunc", "round": "rn", "floor": "floor"}[mma.alignment]
    norm = {"truncation": "rz", "round": "rn", "floor": "floor"}[mma.normalization]
    model = BlockFma(mma.k_step, mma.extra_bits, align, norm, mma.reference)
    A, B = a.double().numpy(), b.double().numpy()
    lead = np.broadcast_shapes(A.shape[:-2], B.shape[:-2], acc.shape[:-2])
    M, K, N = A.shape[-2], A.shape[-1], B.shape[-1]
    rows_a = np.broadcast_to(A[..., :, None, :], (*lead, M, N, K)).reshape(-1, K)
    rows_b = np.broadcast_to(np.swapaxes(B, -1, -2)[..., None, :, :], (*lead, M, N, K)).reshape(-1, K)
    c = np.broadcast_to(acc.double().numpy(), (*lead, M, N)).reshape(-1)
    out = model.emulate(c, rows_a, rows_b).reshape(*lead, M, N)
    return torch.as_tensor(out).to(acc.dtype)


def _dot_acc(a: torch.Tensor, b: torch.Tensor, acc: torch.Tensor, accumulation: str, k_step: int,
             mma=None) -> torch.Tensor:
    """acc + a @ b as the kernel's tl.dot(a, b, acc): recursive (one rounding of acc per k_step
    products, each step exact before its rounding; with `mma`, the tensor core's measured truncating
    steps, _mma_dot) or blocked (a @ b in acc's format, then added)."""
    if mma is not None and accumulation == "recursive" and acc.dtype == torch.float32:
        return _mma_dot(a, b, acc, mma)
    if acc.dtype == torch.float64 or accumulation == "blocked":
        return acc + (a.to(acc.dtype) @ b.to(acc.dtype))
    if k_step == 1 and acc.dtype == torch.float32:  # one FMA per product: the exact product, ONE rounding (float64
        # then fp32 would round twice; flashcheck.proofs.fma_chain rounds once)
        from flashcheck.proofs.fma_chain import fma_chain_dot

        out = fma_chain_dot(a.double().numpy(), b.double().numpy(), acc0=acc.double().numpy())
        return torch.from_numpy(out).to(torch.float32)
    a64, b64 = a.double(), b.double()
    for s0 in range(0, a.shape[-1], k_step):
        s1 = s0 + k_step
        acc = (acc.double() + a64[..., s0:s1] @ b64[..., s0:s1, :]).to(acc.dtype)
    return acc


def _tile_starts(Nk: int, block_k: int) -> list:
    """The key tiles in our kernel's order for an unmasked row (kernels/tiles.py, Precision.tile_order
    "partial_first"): a ragged last tile (masked elementwise) first, then the full tiles in ascending order."""
    full = (Nk // block_k) * block_k
    starts = list(range(0, full, block_k))
    return ([full] if full < Nk else []) + starts


@dataclass(frozen=True)
class _Band:
    """The kernel's band (kernels/attention.py `_band`): key j visible from query i iff i + off_lo <= j <= i + off_hi
    where `on`; nothing but the sequence ends otherwise."""
    on: bool
    off_lo: int
    off_hi: int

    @staticmethod
    def of(causal, window, nq: int, nk: int) -> "_Band":
        """The offsets our kernel launches with for these options (precision.band_offsets)."""
        from flashcheck.proofs.bounds.precision import band_offsets, is_band

        if not is_band(causal, window):
            return _Band(False, 0, 0)
        return _Band(True, *band_offsets(causal, window, nq, nk))

    def transposed(self) -> "_Band":
        """The dK/dV kernel's band (outer = keys): query i sees key j iff j - off_hi <= i <= j - off_lo."""
        return _Band(self.on, -self.off_hi, -self.off_lo)


def _band_range(a0: int, a1: int, n_in: int, band: _Band, block: int) -> tuple:
    """(lo, f_lo, f_hi, hi) of kernels/tiles.py `_band_range` for the outer rows [a0, a1): tiles in [lo, hi) may hold
    visible entries, those in [f_lo, f_hi) are visible in full."""
    if band.on:
        lo_e, hi_e = max(a0 + band.off_lo, 0), min(max(a1 - 1 + band.off_hi + 1, 0), n_in)
        flo_e, fhi_e = max(a1 - 1 + band.off_lo, 0), min(max(a0 + band.off_hi + 1, 0), n_in)
    else:
        lo_e, hi_e, flo_e, fhi_e = 0, n_in, 0, n_in
    lo = (lo_e // block) * block
    hi = max(-(-hi_e // block) * block, lo)
    f_lo = min(max(-(-flo_e // block) * block, lo), hi)
    f_hi = min(max((fhi_e // block) * block, f_lo), hi)
    return lo, f_lo, f_hi, hi


def _inner_visits(a0: int, a1: int, n_in: int, block: int, band: _Band, lists=None) -> tuple:
    """The inner tiles the outer block [a0, a1) visits, in our kernel's order (kernels/tiles.py inner_tiles,
    partial_start, full_start): ((start, partial), ...), the partial ones (MASKED: elementwise visibility) first, then
    the full ones; lists = (partial tile indices, full tile indices) of a block-sparse mask in their stored order,
    else the band's [lo, f_lo) and [f_hi, hi), then [f_lo, f_hi), ascending."""
    if lists is not None:
        return tuple((int(t) * block, True) for t in lists[0]) + tuple((int(t) * block, False) for t in lists[1])
    lo, f_lo, f_hi, hi = _band_range(a0, a1, n_in, band, block)
    partial = [*range(lo, f_lo, block), *range(f_hi, hi, block)]
    return tuple((s, True) for s in partial) + tuple((s, False) for s in range(f_lo, f_hi, block))


def _rotated(visits: tuple, rank: int) -> tuple:
    """_inner_visits' order as the fused backward's key block of rank `rank` (the last block rank 0) takes it where it
    rotates (kernels/gluon_bwd_fused.py): the partial tiles first, then the n_full full ones from the (rank mod
    n_full)-th on, cyclically."""
    partial, full = [x for x in visits if x[1]], [x for x in visits if not x[1]]
    r = rank % len(full) if full else 0
    return tuple(partial + full[r:] + full[:r])


def _sparse_lists(block_mask, which: str, b: int, h: int, m: int):
    """(partial, full) tile indices of outer block m of head (b, h) in a block-sparse mask's stored order (kernels/
    block_mask.py BlockSparseMask; which "kv": key tiles of a query block, "q": query tiles of a key block); batch and
    head dims of size 1 broadcast."""
    num, idx = getattr(block_mask, f"{which}_num_blocks"), getattr(block_mask, f"{which}_indices")
    fnum, fidx = getattr(block_mask, f"full_{which}_num_blocks"), getattr(block_mask, f"full_{which}_indices")
    bb, hh = min(b, num.shape[0] - 1), min(h, num.shape[1] - 1)
    return ([int(x) for x in idx[bb, hh, m, :int(num[bb, hh, m])]],
            [int(x) for x in fidx[bb, hh, m, :int(fnum[bb, hh, m])]])


def _outer_visits(n_out: int, block_out: int, n_in: int, block_in: int, band: _Band, block_mask=None,
                  which: str = "kv", heads: tuple = (1, 1), group: int = 1, rotated: bool = False) -> list:
    """How our kernel walks one accumulation: [(b, h, rows, visits)], rows a LongTensor of outer indices whose blocks
    of block_out visit alike, visits one _inner_visits per query head of the GQA group (which "q", the dK/dV kernel:
    h is the kv head, its group's heads in turn; "kv": h is the query head, group 1). With a block-sparse mask the
    lists of head (b, h) (per head where they differ; which "q": the query heads h group + g), else the band (the same
    for every head: b = h = None, all of them). rotated: the fused backward's rotated order (_rotated)."""
    per_head = block_mask is not None and any(x > 1 for x in getattr(block_mask, f"{which}_num_blocks").shape[:2])
    hs = [(b, h) for b in range(heads[0]) for h in range(heads[1])] if per_head else [(None, None)]
    alike = {}
    n_blocks = -(-n_out // block_out)
    for m, a0 in enumerate(range(0, n_out, block_out)):
        a1 = min(n_out, a0 + block_out)
        for b, h in hs:
            visits = tuple(_inner_visits(a0, a1, n_in, block_in, band, None if block_mask is None else
                                         _sparse_lists(block_mask, which, b or 0, (h or 0) * group + g, m))
                           for g in range(group))
            if rotated:
                visits = tuple(_rotated(x, n_blocks - 1 - m) for x in visits)
            alike.setdefault((b, h, visits), []).append(torch.arange(a0, a1))
    return [(b, h, torch.cat(rows), visits) for (b, h, visits), rows in alike.items()]


def _visit_indices(visits, n: int, block: int) -> torch.Tensor:
    """The inner indices of `visits` (_inner_visits) in visiting order, cut at n (a ragged tile's missing entries)."""
    parts = [torch.arange(j0, min(n, j0 + block)) for j0, _ in visits]
    return torch.cat(parts) if parts else torch.arange(0, dtype=torch.long)


def _heads_of(b, h) -> tuple:
    """The index of head (b, h) of (B, H, ...) tensors, keeping both dims (None: all)."""
    return (slice(None) if b is None else slice(b, b + 1), slice(None) if h is None else slice(h, h + 1))


def _visibility(B, H, Nq, Nk, causal, window, mask):
    from flashcheck.reference.masks import visibility

    return torch.as_tensor(visibility(B, H, Nq, Nk, causal=causal, window=window, mask=mask))


def _expand(x: np.ndarray, group: int) -> np.ndarray:
    return np.repeat(x, group, axis=1)


@dataclass(frozen=True)
class _Problem:
    """What the forward and backward emulations share: formats, sizes, the base-2 logit scale, the
    visibility matrix and K, V expanded over the GQA group in the input dtype."""
    tdt: torch.dtype
    acc_t: torch.dtype
    B: int
    Hq: int
    Hkv: int
    Nq: int
    Nk: int
    d: int
    group: int
    sc: float
    qk_scale: torch.Tensor
    vis: torch.Tensor
    kt: torch.Tensor
    vt: torch.Tensor
    band: _Band
    block_mask: object = None  # a kernels/block_mask.py BlockSparseMask: its tile lists, or None (the band's)
    has_mask: bool = False  # a dense mask applied elementwise on every tile (the kernel's HAS_MASK without lists)


def _fma_logits(qo: torch.Tensor, ko: torch.Tensor, sc: float):
    """(Q K^T as ascending fp32 FMA chains, the kernel's qk_scale2) as torch fp32 (Precision.ieee_fma_chain)."""
    from flashcheck.proofs.fma_chain import fma_chain_dot, kernel_qk_scale2

    x = fma_chain_dot(qo.double().numpy(), np.swapaxes(ko.double().numpy(), -1, -2))
    return torch.as_tensor(x).to(torch.float32), torch.tensor(kernel_qk_scale2(sc), dtype=torch.float32)


def _fused_argument(qk: torch.Tensor, c: torch.Tensor, m_shift: torch.Tensor) -> torch.Tensor:
    """fl32(qk c - m) rounded once (fma.rn.f32) for fp32 qk (..., n), c, m (...): qk c is exact in float64 (two
    24-bit significands), the sum with -m is the exact two-sum + round-to-odd of flashcheck.proofs.fma_chain."""
    from flashcheck.proofs.fma_chain import fma_step

    p = qk.double().numpy() * float(c)
    x = fma_step(np.broadcast_to(-m_shift.double().numpy()[..., None], p.shape), p)
    return torch.as_tensor(x).to(torch.float32)


def recomputed_p_h100(qk: torch.Tensor, c: torch.Tensor, lse2: torch.Tensor) -> torch.Tensor:
    """The backward's P~ as both our backward kernels compile (kernels/triton_bwd.py; bench/compile_forward.py
    --record, "bwd_exp_argument": "fma_min"): ex2(min(fl32(qk c - lse2), 0)) for the fp32 FMA-chain dots qk (..., n),
    c = qk_scale2 and lse2 = fl32(LSE fl32(log2 e)) (...), the argument rounded once (fma.rn.f32) and ex2 the H100's
    ex2.approx.ftz.f32 (flashcheck.proofs.ex2_model). fp32 in, fp32 out (masking is the caller's)."""
    from flashcheck.proofs import ex2_model

    y = torch.clamp(_fused_argument(qk, c, lse2), max=0.0)
    return _measured_unit(ex2_model.ex2, y, "ex2")


def _check_fma(ieee_fma_chain: bool, dtype: str, dot: str):
    if ieee_fma_chain and (dtype, dot) != ("float32", "ieee"):
        raise ValueError(f"ieee_fma_chain needs dtype='float32', dot='ieee' (got {dtype!r}, {dot!r})")


def _problem(q, k, v, dtype, dot, scale, causal, window, mask, block_mask=None) -> _Problem:
    if block_mask is not None:  # its dense mask and band are the masking (kernels/attention.py _normalize_mask)
        if mask is not None or causal is not False or window is not None:
            raise ValueError("block_mask carries the masking: pass causal, window and mask through it")
        causal, window = block_mask.causal, block_mask.window
        mask = None if block_mask.dense is None else block_mask.dense.cpu().numpy()
    tdt = _TORCH[dtype]
    acc_t = torch.float64 if dot == "fp64" else torch.float32
    B, Hq, Nq, d = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    group = Hq // Hkv
    sc = 1.0 / math.sqrt(d) if scale is None else float(scale)
    return _Problem(tdt, acc_t, B, Hq, Hkv, Nq, Nk, d, group, sc,
                    qk_scale=torch.tensor(sc * LOG2E, dtype=acc_t),
                    vis=_visibility(B, Hq, Nq, Nk, causal, window, mask),
                    kt=torch.as_tensor(_expand(k, group)).to(tdt),
                    vt=torch.as_tensor(_expand(v, group)).to(tdt),
                    band=_Band.of(causal, window, Nq, Nk), block_mask=block_mask,
                    has_mask=mask is not None and block_mask is None)


def _check_blocks(pb: _Problem, **blocks):
    """A block-sparse mask fixes every kernel's tiles (kernels/attention.py `_tiles`): the query blocks are its
    block_q, the key blocks its block_k."""
    bm = pb.block_mask
    if bm is None:
        return
    for name, b in blocks.items():
        want = bm.block_q if name.startswith("block_q") else bm.block_k
        if b != want:
            raise ValueError(f"{name}={b} contradicts the block mask's tiles ({bm.block_q} x {bm.block_k})")


_ROWSUMS = ("torch", "tree", "sequential")


def _rowsum(p: torch.Tensor, order: str) -> torch.Tensor:
    """The fp32 sum of each row of p (last axis) in the stated order (fa2_forward's `rowsum`). "tree": pairs
    (2i, 2i + 1) level by level, the row padded with zeros to a power of two (adding 0 is exact), so every term
    passes through ceil(log2 w) additions."""
    if order == "torch":
        return p.sum(dim=-1)
    if order == "sequential":
        out = p[..., 0].clone()
        for j in range(1, p.shape[-1]):
            out = out + p[..., j]
        return out
    w = p.shape[-1]
    x = torch.nn.functional.pad(p, (0, (1 << max(0, (w - 1).bit_length())) - w))
    while x.shape[-1] > 1:
        x = x[..., 0::2] + x[..., 1::2]
    return x[..., 0]


def _measured_unit(fn, y: torch.Tensor, name: str) -> torch.Tensor:
    """fn (flashcheck.proofs.ex2_model.ex2 or lg2_model.lg2: a measured fp32 unit, float64 in and out) on the fp32
    tensor y, as fp32 (its values are fp32: exact in either direction)."""
    if y.dtype != torch.float32:
        raise ValueError(f"{name}='h100' models the fp32 {name}.approx: the accumulate dtype must be float32")
    return torch.from_numpy(fn(y.numpy().astype(np.float64)).astype(np.float32))


def fa2_forward(q, k, v, *, dtype: str = "float16", dot: str = "fp16", out: str | None = None,
                scale=None, causal=False, window=None, mask=None, block_k: int = 64,
                accumulation: str = "recursive", k_step: int | None = None, p_split: bool = False,
                return_fp32_o: bool = False, mma=None, l_accumulate: str = "float32", ieee_fma_chain: bool = False,
                trace: list | None = None, rowsum: str = "torch", ex2: str = "torch", lg2: str = "torch",
                block_q: int = 64, block_mask=None):
    """(O, LSE) as the FA2 forward kernel computes them, see the module docstring (with
    return_fp32_o also O = acc / l before the store, what Delta uses with delta_from="fp32").
    block_q: the forward's query block (one program's rows): each block visits its partial key tiles first, then its
    full ones (kernels/tiles.py; under causal, window or a block-sparse mask the order differs from block to block).
    block_mask: a kernels/block_mask.py BlockSparseMask (its lists give the tiles; its tiles must be block_q x
    block_k; it carries the masking in place of causal, window and mask).
    mma: None (tensor-core steps summed exactly, rounded to nearest) or "h100" (both tensor-core dots,
    Q K^T and P V, through the H100's measured truncating step model, flashcheck.proofs.hardware.h100()).
    l_accumulate: the format of the running sum l across tiles ("float64": our kernel, each tile's fp32 rowsum
    added into an fp64 l, rounded once into fp32 at the end; Precision.l_accumulate).
    ieee_fma_chain: the logits as FMA chains (module docstring; Precision.ieee_fma_chain).
    trace: a list that receives, per tile in visiting order, (j0, j1, x, alpha's argument, m_new) as float64
    arrays (what tests compare with the bound's known arguments, Precision.exp_argument); only where every query block
    visits alike (unmasked heads).
    rowsum: the order of each tile's fp32 rowsum of P~ (_rowsum): "torch" (torch's own), "tree" (pairwise, depth
    ceil(log2 block_k): what Precision.rowsum_depth states), "sequential" (left to right, depth block_k - 1).
    ex2: the forward's exponentials P~ = exp2(x) and alpha = exp2(a): "torch" (torch.exp2 in the accumulate dtype) or
    "h100" (fp32 only: the H100's ex2.approx.ftz.f32 bit for bit, flashcheck.proofs.ex2_model; Precision.ex2_known).
    lg2: the LSE's log2 l: "torch" (torch.log2) or "h100" (the H100's lg2.approx.f32 bit for bit,
    flashcheck.proofs.lg2_model; fp32 only)."""
    _check_fma(ieee_fma_chain, dtype, dot)
    if ex2 not in ("torch", "h100"):
        raise ValueError(f"ex2 must be 'torch' or 'h100', got {ex2!r}")
    exp2 = torch.exp2
    if ex2 == "h100":
        from flashcheck.proofs import ex2_model

        def exp2(y):  # the measured table on fp32 arguments
            return _measured_unit(ex2_model.ex2, y, "ex2")
    if rowsum not in _ROWSUMS:
        raise ValueError(f"rowsum must be one of {_ROWSUMS}, got {rowsum!r}")
    ks = _k_step(dot, k_step)
    pb = _problem(q, k, v, dtype, dot, scale, causal, window, mask, block_mask)
    _check_blocks(pb, block_q=block_q, block_k=block_k)
    tdt, acc_t, qk_scale, vis, kt, vt = pb.tdt, pb.acc_t, pb.qk_scale, pb.vis, pb.kt, pb.vt
    mma = _resolve_mma(mma, dot, k_step)
    B, Hq, Nq, Nk = pb.B, pb.Hq, pb.Nq, pb.Nk
    qt = torch.as_tensor(q).to(tdt)
    qo = _operand(qt, dot, tdt).to(acc_t)
    m = torch.full((B, Hq, Nq), -math.inf, dtype=acc_t)
    l_t = torch.float64 if l_accumulate == "float64" else acc_t
    l = torch.zeros((B, Hq, Nq), dtype=l_t)
    acc = torch.zeros((B, Hq, Nq, v.shape[-1]), dtype=acc_t)
    if ieee_fma_chain:  # one chain per logit: the same whatever the tiles
        s_fma, qk_scale = _fma_logits(qo, _operand(kt, dot, tdt).to(acc_t), pb.sc)
    # each query block visits its own key tiles (partial first, kernels/tiles.py); blocks that visit alike run at once
    walks = _outer_visits(Nq, block_q, Nk, block_k, pb.band, pb.block_mask, "kv", (B, Hq))
    if trace is not None and len(walks) > 1:
        raise ValueError("trace records one visiting order: the query blocks of these masks visit their tiles apart")
    for b, h, rows, (visits,) in walks:
        ix = (*_heads_of(b, h), rows)
        m_r, l_r, acc_r = m[ix], l[ix], acc[ix]
        for j0, partial in visits:
            j1 = min(Nk, j0 + block_k)
            kb = _operand(kt[ix[0], ix[1], j0:j1], dot, tdt).to(acc_t)
            vb = _operand(vt[ix[0], ix[1], j0:j1], dot, tdt).to(acc_t)
            q_r = qo[ix]
            # S2 = Q Kᵀ · scale · log2(e), masked to -inf
            if ieee_fma_chain:
                s = s_fma[ix][..., j0:j1] * qk_scale
            elif mma is not None:  # the logit dot through the tensor core's steps, from a fresh accumulator
                s = _mma_dot(q_r, kb.transpose(-1, -2), torch.zeros(q_r.shape[:-1] + (kb.shape[-2],), dtype=acc_t),
                             mma)
                s = s * qk_scale
            else:
                s = (q_r @ kb.transpose(-1, -2)) * qk_scale
            s = torch.where(vis[ix][..., j0:j1], s, torch.tensor(-math.inf, dtype=acc_t))
            m_new = torch.maximum(m_r, s.amax(dim=-1))
            m_shift = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
            # s2 goes through tl.where before the subtraction on the block's partial tiles and under a dense mask
            # without tile lists (kernels/triton_fwd.py `_fwd_shift`: MASKED or HAS_MASK)
            if ieee_fma_chain and not (partial or pb.has_mask):
                # a full tile: x = fl32(qk c - m) in one rounding (fma.rn.f32, Precision.exp_argument "fma")
                x = _fused_argument(s_fma[ix][..., j0:j1], qk_scale, m_shift)
            else:  # the masked tile (or no FMA claim): the rounded product s2, then the subtraction rounded
                x = s - m_shift[..., None]
            p = exp2(x)
            a_arg = m_r - m_shift  # fl32(m_old - m_new), then exp2
            alpha = exp2(a_arg)
            if trace is not None:
                trace.append((j0, j1, x.double().numpy(), a_arg.double().numpy(), m_new.double().numpy()))
            l_r = l_r * alpha.to(l_t) + _rowsum(p, rowsum).to(l_t)
            acc_r = acc_r * alpha[..., None]
            p_hi = _operand(p, dot, tdt).to(acc_t)
            acc_r = _dot_acc(p_hi, vb, acc_r, accumulation, ks, mma)
            if p_split:  # P_lo = P - P_hi (exact in fp32), rounded to the operand format
                acc_r = _dot_acc(_operand(p - p_hi, dot, tdt).to(acc_t), vb, acc_r, accumulation, ks, mma)
            m_r = m_new
        m[ix], l[ix], acc[ix] = m_r, l_r, acc_r
    empty = l == 0
    l_safe = torch.where(empty, torch.ones_like(l), l).to(acc_t)
    o32 = acc / l_safe[..., None]
    o = o32.to(_TORCH[out or dtype])
    if lg2 == "h100":
        from flashcheck.proofs import lg2_model

        log2_l = _measured_unit(lg2_model.lg2, l_safe, "lg2")
    elif lg2 == "torch":
        log2_l = torch.log2(l_safe)
    else:
        raise ValueError(f"lg2 must be 'torch' or 'h100', got {lg2!r}")
    lse = torch.where(empty, torch.tensor(-math.inf, dtype=acc_t), (m + log2_l) * LN2)
    if return_fp32_o:
        return o.double().numpy(), lse.double().numpy(), o32.double().numpy()
    return o.double().numpy(), lse.double().numpy()


def delta_dot(do: torch.Tensor, o: torch.Tensor, tree: tuple | None = None) -> torch.Tensor:
    """Delta = rowsum(dO o O) of fp32 tensors (..., dv) in fp32 as the preprocess kernel computes it. tree
    (one of Precision.delta_trees, a leaf order read off its PTX by bench/compile_forward.py delta_tree; len >= dv, the
    columns past dv exact zeros): each pair fl32(x_a + fl32(x_b)) in one fma, x_a exact inside it (x = dO o formed in
    float64: a product of two fp32 values is exact there; fma_chain.fma_step rounds once), then fl32 adds level by level
    (NumPy's float32 adds: one rounding each, gradual underflow as add.f32 without .ftz). None: torch's fp32 sum of the
    rounded products, in its own order."""
    if tree is None:
        return (do * o).sum(-1)
    from flashcheck.proofs.fma_chain import fma_step

    if do.dtype != torch.float32 or o.dtype != torch.float32:
        raise ValueError("delta_dot: the tree is the kernel's fp32 dot; do and o must be float32")
    dv = do.shape[-1]
    if len(tree) < dv:
        raise ValueError(f"delta_dot: a tree of {len(tree)} leaves for {dv} columns")
    x = do.double().numpy() * o.double().numpy()
    x = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, len(tree) - dv)])[..., np.asarray(tree)]
    s = fma_step(x[..., 1::2].astype(np.float32).astype(np.float64), x[..., 0::2]).astype(np.float32)
    while s.shape[-1] > 1:
        s = s[..., 0::2] + s[..., 1::2]
    return torch.from_numpy(np.ascontiguousarray(s[..., 0]))


def _tiles_acc(a: torch.Tensor, b: torch.Tensor, acc: torch.Tensor, starts, n: int, block: int, accumulation: str,
               k_step: int, mma) -> torch.Tensor:
    """acc + a @ b through the inner tiles of `block` at `starts` (visiting order; a[..., idx], b[idx] for the tile's
    indices, cut at n), one tl.dot(a, b, acc) per tile: each tile's MMA k-steps start at the tile's first index
    (the kernel pads a ragged tile with exact zeros at its end, which no step model changes)."""
    for j0 in starts:
        idx = torch.arange(j0, min(n, j0 + block))
        acc = _dot_acc(a[..., idx], b[..., idx, :], acc, accumulation, k_step, mma)
    return acc


def over_keys(S: torch.Tensor, K: torch.Tensor, walks, block: int, accumulation: str = "recursive",
              k_step: int = 1, mma=None) -> torch.Tensor:
    """S @ K (S (B, H, Nq, Nk), K (B, H, Nk, d)) as the dQ kernel accumulates it: each query block over its key tiles
    in its order (walks: _outer_visits over the keys), from a zero accumulator (tl.dot(ds, k, dq)); with `mma` (an
    MmaBehaviour) the tiles' k-steps through the tensor core's step model, tile by tile."""
    out = torch.zeros(S.shape[:-1] + (K.shape[-1],), dtype=S.dtype)
    for b, h, rows, (visits,) in walks:
        hb, hh = _heads_of(b, h)
        if mma is not None:
            out[hb, hh, rows] = _tiles_acc(S[hb, hh][..., rows, :], K[hb, hh], torch.zeros_like(out[hb, hh, rows]),
                                           [j0 for j0, _ in visits], S.shape[-1], block, accumulation, k_step, mma)
            continue
        keys = _visit_indices(visits, S.shape[-1], block)
        out[hb, hh, rows] = _dot_acc(S[hb, hh][..., rows, :][..., keys], K[hb, hh][..., keys, :],
                                     torch.zeros_like(out[hb, hh, rows]), accumulation, k_step)
    return out


def _flush(x: torch.Tensor) -> torch.Tensor:
    """fp32 values below the smallest normal (2^-126) flushed to sign-preserving zero (PTX's .ftz)."""
    return torch.where(x.abs() < 2.0**-126, x * 0.0, x)


def rotated_add_ranks(q: int, n_kt: int, n_full: int) -> list:
    """The key-tile ranks (rank r: key tile n_kt − 1 − r) in the order they add into full query tile q under the fused
    backward's rotated order: rank r visits q at step (q − r) mod n_full, and q takes the adds by (step, rank)
    (kernels/gluon_bwd_fused.py full_tile_turn counts them)."""
    return sorted(range(n_kt), key=lambda r: ((q - r) % n_full, r))


def fused_over_keys(S: torch.Tensor, K: torch.Tensor, block: int, k_step: int = 1, mma=None,
                    ftz: bool = False, rotated_rows: int | None = None, band_rows: int | None = None,
                    visible: torch.Tensor | None = None) -> torch.Tensor:
    """S @ K (S (B, H, Nq, Nk), K (B, H, Nk, d), every entry visible) as the fused backward sums dQ in its dK/dV kernel
    (Precision.fused_dq, dq_accumulation "blocked"; proofs/bounds.md sec. 8b): per key tile of `block` keys (the
    dK/dV program's; the last one ragged), T_j = ONE chain from a zero fp32 accumulator over the tile's keys in
    ascending k-steps (_dot_acc "recursive": one rounding per k_step products, or the tensor core's step model
    with `mma`); then the T_j summed from the LAST tile down to the first (the first stored: the kernel's TMA store,
    0 + T without the add, a -0 kept), each later add ONE fp32 round-to-nearest addition (the TMA reduce-add;
    torch's float32 add). Each query head's rows are their own sums (a GQA group's K is its kv head's, repeated).
    ftz: each add flushes its subnormal operands and result to zero, as PTX's fp32 reduction adds (red / atom
    .add.f32) are documented to; the TMA reduce-add was measured not to (HardwareConstants.tma_add "nearest"): what
    the bound charges where that is not measured (precision._dq_tile_add_flush). rotated_rows: the rotated order over
    query tiles of this many rows (rotated_add_ranks at each full one; the ragged query tile by rank, descending).
    band_rows, visible (a banded call, descending; visible broadcastable to S's shape): each query tile of band_rows
    rows takes the partials of the key tiles with a visible entry in it only (the kernel's key tiles visit just those
    query tiles), the first of them stored; a tile none sees keeps its zeros (the launcher's zeroed accumulator)."""
    n = S.shape[-1]
    acc = torch.zeros(S.shape[:-1] + (K.shape[-1],), dtype=S.dtype)
    starts = list(range(0, n, block))
    parts = [_dot_acc(S[..., j0:min(n, j0 + block)], K[..., j0:min(n, j0 + block), :], torch.zeros_like(acc),
                      "recursive", k_step, mma) for j0 in starts]
    n_kt, n_q = len(starts), S.shape[-2]
    if rotated_rows is not None and band_rows is not None:
        raise ValueError("the fused kernel rotates unbanded calls only: rotated_rows or band_rows, not both")
    rows = rotated_rows or band_rows or n_q
    n_full = n_q // rows
    for i0 in range(0, n_q, rows):
        q, i1 = i0 // rows, min(n_q, i0 + rows)
        ranks = rotated_add_ranks(q, n_kt, n_full) if rotated_rows is not None and q < n_full else range(n_kt)
        if band_rows is not None:  # the key tiles that see this query tile, descending
            ranks = [r for r in ranks if bool(visible[..., i0:i1, starts[n_kt - 1 - r]:starts[n_kt - 1 - r] + block]
                                               .any())]
        for i, r in enumerate(ranks):
            part = parts[n_kt - 1 - r][..., i0:i1, :]
            if i > 0:  # the first partial stored, each later one added
                a = acc[..., i0:i1, :]
                part = _flush(_flush(a) + _flush(part)) if ftz else a + part
            acc[..., i0:i1, :] = part
    return acc


def over_rows(S: torch.Tensor, other: torch.Tensor, walks, group: int, block: int, accumulation: str = "recursive",
              k_step: int = 1, mma=None) -> torch.Tensor:
    """S^T @ other summed over the GQA group's query heads (S (B, Hq, Nq, Nk), other (B, Hq, Nq, n) -> (B, Hkv, Nk,
    n)) as the dK/dV kernel accumulates it: each key block through the group's heads in turn, each head's query tiles
    in the block's order (walks: _outer_visits over the query rows, which "q"), one accumulator (kernel: g outer,
    tiles inner); with `mma` the tiles' k-steps through the tensor core's step model, tile by tile."""
    B, Hq, Nq, Nk = S.shape
    Hkv, n = Hq // group, other.shape[-1]
    aT = S.transpose(-1, -2).reshape(B, Hkv, group, Nk, Nq).permute(0, 1, 3, 2, 4).reshape(B, Hkv, Nk, group * Nq)
    bb = other.reshape(B, Hkv, group * Nq, n)
    out = torch.zeros((B, Hkv, Nk, n), dtype=S.dtype)
    for b, h, keys, per_head in walks:
        hb, hh = _heads_of(b, h)
        if mma is not None:
            acc = torch.zeros_like(out[hb, hh, keys])
            for g, vs in enumerate(per_head):
                acc = _tiles_acc(aT[hb, hh][..., keys, g * Nq:(g + 1) * Nq], bb[hb, hh][..., g * Nq:(g + 1) * Nq, :],
                                 acc, [j0 for j0, _ in vs], Nq, block, accumulation, k_step, mma)
            out[hb, hh, keys] = acc
            continue
        idx = torch.cat([g * Nq + _visit_indices(vs, Nq, block) for g, vs in enumerate(per_head)])
        out[hb, hh, keys] = _dot_acc(aT[hb, hh][..., keys, :][..., idx], bb[hb, hh][..., idx, :],
                                     torch.zeros_like(out[hb, hh, keys]), accumulation, k_step)
    return out


def fa2_backward(q, k, v, o, lse, do, *, dtype: str = "float16", dot: str = "fp16", out: str | None = None,
                 scale=None, causal=False, window=None, mask=None, accumulation: str = "recursive",
                 k_step: int | None = None, delta_o=None, ieee_fma_chain: bool = False, block_k_dq: int = 64,
                 block_q: int = 64, ex2: str = "torch", block_q_dq: int = 64, block_k_dkdv: int = 64,
                 block_mask=None, delta_tree: tuple | None = None, dq_accumulation: str | None = None, mma=None,
                 dq_ftz: bool = False, rotated: bool = False):
    """(dQ, dK, dV) as the FA2 backward kernel computes them from its own (O, LSE): Delta from the
    stored O (or from `delta_o`, the fp32 O of fa2_forward(..., return_fp32_o=True), for
    delta_from="fp32"), P recomputed from the stored LSE in base 2, P and dS rounded to the operand dtype
    before the products, fp32 accumulation, scale applied once at the end, stored in `out`. dQ runs over the
    key tiles of block_k_dq (the dQ kernel's own key tiles, Precision.block_k_dq; the forward's block_k enters only
    through fa2_forward's o, lse and delta_o), dK and dV over the query tiles of block_q (per query head of the
    group), in our kernel's order (Precision.tile_order "partial_first"): per outer block, the dQ kernel's query blocks
    of block_q_dq rows and the dK/dV kernel's key blocks of block_k_dkdv keys (Precision.block_q_dq, block_k_dkdv), its
    partial tiles first (any entry of block x tile masked: the ragged tile, the band's edges, a block-sparse mask's
    partial list), then its full ones ascending; tiles with nothing visible are not visited (_outer_visits, a port of
    kernels/tiles.py). block_mask: as fa2_forward's (it fixes the tiles: block_q_dq = block_q = its block_q,
    block_k_dq = block_k_dkdv = its block_k).
    ieee_fma_chain: the logits as FMA chains (module docstring; Precision.ieee_fma_chain).
    ex2: the recomputed P~: "torch" (torch.exp2 of fl(s2) - lse2, two roundings) or "h100" (with ieee_fma_chain: the
    compiled form of both backward kernels, P~ = ex2(min(fl32(qk c - lse2), 0)) with the argument rounded once
    (fma.rn.f32) and ex2 the H100's ex2.approx.ftz.f32 bit for bit, flashcheck.proofs.ex2_model;
    Precision.bwd_p_known).
    delta_tree: Delta's fp32 dot in this leaf order of the preprocess kernel's tree (delta_dot; one of Precision.
    delta_trees); None: torch's sum.
    dq_accumulation: dQ's accumulation where it differs from `accumulation` (Precision.dq_accumulation; None: the
    same). "blocked": dQ summed in the dK/dV kernel as the fused backward does (Precision.fused_dq, fused_over_keys):
    per key tile of block_k_dq keys one chain from zero, the tiles' partials summed in fp32 from the last tile down
    (the first stored), or in the rotated order (`rotated`), then the scale and the store. The fused kernel runs
    unbanded calls and bands without a left edge that reach every key (precision.fused_band: causal; each
    query tile of block_q rows then takes the partials of the key tiles that see it, descending), no mask, no block
    mask. dq_ftz (blocked only): those adds flush subnormals (fused_over_keys' ftz).
    rotated (blocked only): the fused kernel's rotated order (Precision.dkdv_rotated): each key block of block_k_dkdv
    (rank r: the last block 0) takes its full query tiles from r mod n_full on, cyclically (dK, dV), and each full
    query tile of block_q rows takes the key tiles' dQ partials by (step, rank) (fused_over_keys' rotated_rows).
    mma: None (tensor-core steps summed exactly, rounded to nearest) or "h100" (every tensor-core product of the
    backward, the recomputed S = Q K^T, dP = dO V^T and the dV, dK, dQ chains, through the H100's measured truncating
    step model, as fa2_forward's)."""
    _check_fma(ieee_fma_chain, dtype, dot)
    if ex2 not in ("torch", "h100"):
        raise ValueError(f"ex2 must be 'torch' or 'h100', got {ex2!r}")
    if ex2 == "h100" and not ieee_fma_chain:
        raise ValueError("ex2='h100' in the backward models the fused argument of the FMA-chain logits: it needs "
                         "ieee_fma_chain=True")
    if dq_accumulation not in (None, "recursive", "blocked"):
        raise ValueError(f"dq_accumulation must be None, 'recursive' or 'blocked', got {dq_accumulation!r}")
    if rotated and dq_accumulation != "blocked":
        raise ValueError("rotated is the fused kernel's order: it needs dq_accumulation='blocked'")
    if dq_accumulation == "blocked":
        from flashcheck.proofs.bounds.precision import fused_band, is_band

        if ((is_band(causal, window) and not fused_band(causal, window, q.shape[-2], k.shape[-2]))
                or mask is not None or block_mask is not None):
            raise ValueError("dq_accumulation='blocked' is the fused kernel's dQ, which runs unbanded calls and bands "
                             "the fused kernel takes (precision.fused_band), without masks only (got "
                             f"causal={causal!r}, window={window!r}, "
                             f"mask={'given' if mask is not None else None}, "
                             f"block_mask={'given' if block_mask is not None else None})")
        if rotated and is_band(causal, window):
            raise ValueError("rotated is the fused kernel's order on unbanded calls (a band's is descending)")
    pb = _problem(q, k, v, dtype, dot, scale, causal, window, mask, block_mask)
    _check_blocks(pb, block_q=block_q, block_q_dq=block_q_dq, block_k_dq=block_k_dq, block_k_dkdv=block_k_dkdv)
    tdt, acc_t, qk_scale, vis, sc = pb.tdt, pb.acc_t, pb.qk_scale, pb.vis, pb.sc
    mma = _resolve_mma(mma, dot, k_step)
    B, Hkv, Nk, d, group = pb.B, pb.Hkv, pb.Nk, pb.d, pb.group
    qt = _operand(torch.as_tensor(q).to(tdt), dot, tdt).to(acc_t)
    kt = _operand(pb.kt, dot, tdt).to(acc_t)
    vt = _operand(pb.vt, dot, tdt).to(acc_t)
    dot_ = torch.as_tensor(do).to(tdt)
    dop = _operand(dot_, dot, tdt).to(acc_t)
    ks = _k_step(dot, k_step)
    # Delta from the stored O, or (delta_from="fp32") from the fp32 O before the store
    ot = torch.as_tensor(o).to(_TORCH[out or dtype]) if delta_o is None else torch.as_tensor(delta_o).to(acc_t)
    lset = torch.as_tensor(lse).to(acc_t)
    # Δ = rowsum(dO ∘ O) from the stored O (or the fp32 one), in the kernel's tree where stated
    delta = delta_dot(dot_.to(acc_t), ot.to(acc_t), delta_tree)
    lse2 = torch.where(torch.isinf(lset), torch.zeros_like(lset), lset * torch.tensor(LOG2E, dtype=acc_t))
    if ieee_fma_chain:
        s_fma, qk_scale = _fma_logits(qt, kt, sc)
        s = s_fma * qk_scale
    elif mma is not None:  # the logit dot through the tensor core's steps, from a fresh accumulator
        s = _mma_dot(qt, kt.transpose(-1, -2), torch.zeros(qt.shape[:-1] + (kt.shape[-2],), dtype=acc_t), mma)
        s = s * qk_scale
    else:
        s = (qt @ kt.transpose(-1, -2)) * qk_scale
    if ex2 == "h100":
        p = torch.where(vis, recomputed_p_h100(s_fma, qk_scale, lse2), torch.zeros_like(s))
    else:
        p = torch.where(vis, torch.exp2(s - lse2[..., None]), torch.zeros_like(s))
    Nq, Hq, dvd = pb.Nq, pb.Hq, v.shape[-1]
    pr = _operand(p, dot, tdt).to(acc_t)
    if ieee_fma_chain:  # dP = dO V^T as the same ascending fp32 FMA chains (the kernel's tl.dot(do, vT), probed)
        from flashcheck.proofs.fma_chain import fma_chain_dot

        dp = torch.as_tensor(fma_chain_dot(dop.double().numpy(), np.swapaxes(vt.double().numpy(), -1, -2))).to(acc_t)
    elif mma is not None:
        dp = _mma_dot(dop, vt.transpose(-1, -2), torch.zeros(dop.shape[:-1] + (vt.shape[-2],), dtype=acc_t), mma)
    else:
        dp = dop @ vt.transpose(-1, -2)
    ds = p * (dp - delta[..., None])
    dsr = _operand(ds, dot, tdt).to(acc_t)

    # dK, dV: each key block of block_k_dkdv (the dK/dV kernel's program) runs one accumulator through the query
    # heads of its GQA group in turn, each head's query tiles in that block's order (partial first, kernels/tiles.py)
    key_walks = _outer_visits(Nk, block_k_dkdv, Nq, block_q, pb.band.transposed(), pb.block_mask, "q", (B, Hkv),
                              group, rotated)
    dv = over_rows(pr, dop, key_walks, group, block_q, accumulation, ks, mma)
    if dq_accumulation == "blocked":  # dQ summed in the dK/dV kernel (the fused backward): tiles' partials, last first
        banded = pb.band.on
        dq = fused_over_keys(dsr, kt, block_k_dq, ks, mma, ftz=dq_ftz, rotated_rows=block_q if rotated else None,
                             band_rows=block_q if banded else None, visible=vis if banded else None)
    else:  # dQ: each query block of block_q_dq (the dQ kernel's program) over its own key tiles in its order
        walks = _outer_visits(Nq, block_q_dq, Nk, block_k_dq, pb.band, pb.block_mask, "kv", (B, Hq))
        dq = over_keys(dsr, kt, walks, block_k_dq, dq_accumulation or accumulation, ks, mma)
    dq = dq * torch.tensor(sc, dtype=acc_t)
    dk = over_rows(dsr, qt, key_walks, group, block_q, accumulation, ks, mma) * torch.tensor(sc, dtype=acc_t)
    odt = _TORCH[out or dtype]
    return tuple(x.to(odt).double().numpy() for x in (dq, dk, dv))

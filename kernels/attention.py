"""Public API of the Triton FlashAttention kernel: `attention(q, k, v, ...)`.

Input checks, tile configuration, the launches of the forward (`triton_fwd`) and backward
(`triton_bwd`) kernels, their registration as torch custom ops (`flashcheck::attention_fwd`,
`flashcheck::attention_bwd`, so `torch.compile` traces through without graph breaks) with autograd,
eager calls through a plain autograd.Function around the same launches (`_EagerAttention`: less host time),
and `arithmetic(...)`: what the kernel computes with (read by the bounds through flashcheck).

Precision modes (proofs/accurate_modes.md):
- backward `delta_from="fp32"` (default): when gradients are needed the forward also stores the
  rounding residual O_res = round(O_fp32 − round(O_fp32)) (one more tensor the size of O, saved for
  the backward) and Δ = rowsum(dO ∘ (O + O_res)) — Δ from an O accurate to ~2× the output precision
  instead of the rounded O. `delta_from="output"` is FlashAttention-2's Δ from the rounded O.
- forward `precision="accurate"` (opt-in): P·V as P_hi·V + P_lo·V (two tensor-core products).
Conventions (causal alignment, window, masks, GQA, fully masked rows) are ARCHITECTURE.md's.
"""
from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass, replace

import torch
import triton
from triton.runtime.errors import OutOfResources

from flashcheck.kernels.block_mask import BlockSparseMask, build_block_mask, from_flex_block_mask
from flashcheck.kernels.triton_bwd import (attn_bwd_dkdv_kernel, attn_bwd_dq_kernel,
                                           attn_bwd_preprocess_kernel)
from flashcheck.kernels.triton_fwd import attn_fwd_kernel

_DTYPES = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32"}
_CAUSAL = (False, True, "top_left", "bottom_right")
MAX_HEAD_DIM = 256
_INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class TileConfig:
    """Tile shape and pipelining of one kernel: block_m query rows × block_n key rows.

    The flags are code-generation choices of the forward (ignored by the backward kernels) that
    leave the arithmetic as it is (`triton_fwd`): kv_desc, K/V tiles through tensor descriptors
    (TMA; used where the strides allow it, else pointer loads); warp_specialize, the unmasked-tile
    loop split into producer/consumer warps (Triton's automatic warp specialization); pipeline_qk,
    the unmasked-tile loop software-pipelined by hand, S_{j+1} = Q K_{j+1}ᵀ issued before the
    softmax and P̃·V of tile j (two S tiles live; exclusive with warp_specialize; off until the GPU
    shows it faster: bench/NOTES.md, "Next device call: pipelined QK^T (issue 10)"). heavy_first (forward
    and dQ kernels; the dK/dV kernel's key blocks are heaviest first already): under a band (causal, window)
    the programs take the query blocks from the last one, so that the blocks that see the most keys start
    first and the light ones fill the tail (longest-processing-time order; only which program computes
    which block changes, not what a block computes; on where `kernel_config` turns it on:
    bench/NOTES.md, "Tiles and program order, 2026-11-26d"). gluon (forward only): the forward through
    `gluon_fwd` (Hopper: TMA producer warp, two consumer warpgroups, asynchronous wgmma; block_m = block_n = 128,
    d in {64, 128}) where the call is in its domain (`_gluon_forward`), else `triton_fwd` with the same tiles: the
    same arithmetic either way (gluon_fwd's docstring). fused (the dQ kernel's TileConfig only): dQ's products inside
    the dK/dV kernel (`gluon_bwd_fused`, Hopper: 128-key partials added in a fixed key-tile order, another
    arithmetic than the dQ kernel's: flashcheck.proofs.bounds.FusedDq) for unmasked fp16 / bf16 calls at head dim 64,
    unbanded or under a band it takes (`_fused_band`), on an sm_90 device (`_fused_call`); other calls run the dQ
    kernel with block_m x block_n."""
    block_m: int
    block_n: int
    num_warps: int = 4
    num_stages: int = 2
    kv_desc: bool = False
    warp_specialize: bool = False
    pipeline_qk: bool = False
    heavy_first: bool = False
    gluon: bool = False
    fused: bool = False


_TILE_FIELDS = 10  # ints per TileConfig in KernelConfig.flat()
_GLUON_AT = 8  # the index of TileConfig.gluon among them


@dataclass(frozen=True)
class KernelConfig:
    """Tiles of the three kernels: forward, backward dK/dV (block_n keys outer, block_m queries
    inner) and backward dQ. Passed to `attention(..., tiles=...)` to override `kernel_config`."""
    fwd: TileConfig
    dkdv: TileConfig
    dq: TileConfig

    def flat(self) -> list[int]:
        """3 × 10 ints, the form a torch custom op can carry."""
        return [int(x) for t in (self.fwd, self.dkdv, self.dq)
                for x in (t.block_m, t.block_n, t.num_warps, t.num_stages, t.kv_desc,
                          t.warp_specialize, t.pipeline_qk, t.heavy_first, t.gluon, t.fused)]

    @staticmethod
    def unflat(xs) -> "KernelConfig":
        if len(xs) != 3 * _TILE_FIELDS:
            raise ValueError(f"tiles: expected {3 * _TILE_FIELDS} ints (KernelConfig.flat()), got {len(xs)}")

        def one(x):
            return TileConfig(*x[:4], *(bool(b) for b in x[4:]))
        return KernelConfig(*(one(xs[i:i + _TILE_FIELDS]) for i in range(0, 3 * _TILE_FIELDS, _TILE_FIELDS)))


_PRECISIONS = ("default", "accurate")
_DELTA_FROM = ("fp32", "output")
_ENGINES = ("auto", "triton", "gluon")


def forward_engine() -> str:
    """The engine kernel_config gives by default: FLASHCHECK_FORWARD_ENGINE, "auto" unless set. "auto": the Gluon
    kernels (gluon_fwd, gluon_bwd) at head dim 128, and at head dim 64 for unmasked calls with at least LONG_KEYS
    keys (unbanded ones from SHORT_KEYS keys on), triton_fwd / triton_bwd elsewhere;
    "gluon": the Gluon kernels at head dims 64 and 128 whatever N; "triton": triton_fwd / triton_bwd everywhere.
    Measured on the H100 (bench/NOTES.md, "Session 2026-11-27g"): at d = 128 the Gluon kernels are 1.06-1.30x
    triton's speed forward and 1.13-1.18x backward on every cell of issue 10's table; at d = 64 the Gluon forward
    1.07-1.19x at N >= 4k but 0.78-0.94x at N = 1k, and the Gluon backward (2026-11-28) 0.99-1.16x at N >= 4k."""
    engine = os.environ.get("FLASHCHECK_FORWARD_ENGINE", "auto") or "auto"
    _check_choice("FLASHCHECK_FORWARD_ENGINE", engine, _ENGINES)
    return engine


# "auto" gives the Gluon kernels at head dim 64 from this many keys on, measured on the H100 side by side with
# triton's: the forward 1.12x / 1.19x triton_fwd at N = 4k / 16k (causal 1.07x / 1.15x) but 0.94x / 0.78x at N = 1k
# (bench/NOTES.md, "Session 2026-11-27g"); the backward, with LSE and Delta through the dK/dV kernel's ring, 0.99-1.06x
# triton_bwd at N = 4k-32k, causal 1.08-1.16x ("Session 2026-11-28", `bench/run.py --grid d64`). At N = 2k on the
# H200 ("Session 2026-11-29f", `--grid d64` from 1k): the Gluon backward 1.05-1.06x triton_bwd causal, 1.06-1.07x
# unmasked, the causal forward 0.98-1.01x (unbanded it is gluon_fwd's tile already: SHORT_KEYS); at N = 1k the
# backward 1.03x unmasked but 0.94x causal (the forward 0.84x): not there.
LONG_KEYS = 2048
# "auto" gives the Gluon kernels to unbanded, unmasked calls at head dim 64 with at least this many keys (banded ones
# from LONG_KEYS on), measured on the H200 side by side with the product's triton kernels: the Gluon forward, paired,
# 1.065x triton_fwd at N = 1k and 1.13x at 2k unmasked (bench/fwd_variants.py --cells pair, "product"; bench/NOTES.md
# "Session 2026-11-29b"), the Gluon backward 1.03-1.06x triton_bwd at N = 1k unmasked ("Session 2026-11-29f", `bench/
# run.py --grid d64`); banded calls keep triton's below LONG_KEYS (at N = 1k causal the Gluon forward 0.76-0.78x,
# "Session 2026-11-27g", 0.84-0.85x in "Session 2026-11-29f"; its backward 0.94x), and so do dense-masked ones
# (triton_fwd at the 128 x 128 tile 0.76-0.78x its 64 x 64 one: bench/dense_short.py, "Session 2026-11-29c")
SHORT_KEYS = 1024
# ... and the Gluon forward alone (gluon_fwd, PERSISTENT there; triton_bwd's backward) to banded, unmasked calls at head
# dim 64 from SHORT_KEYS keys below LONG_KEYS: causal N = 1k 1.076x triton_fwd's 64 x 64 (bench/fwd_variants.py
# --variants persistent, "product"; bench/NOTES.md "Session 2026-11-29j"), where the Gluon backward ran 0.94x
# "auto" (and "gluon") give the fused backward (gluon_bwd_fused: dQ's products inside the dK/dV kernel) to unbanded,
# unmasked calls at head dim 64 with at least this many queries and keys, no more keys than queries, and GQA groups up
# to FUSED_MAX_GROUP, measured on the H200 side by side with the two Gluon kernels, forward + backward
# (bench/fused_order.py, bench/NOTES.md "Session 2026-11-30b"; its rotated order below FUSED_ROTATE_KEY_TILES): N = 1k
# 1.045x, 2k 1.089x, 4k 1.106x, 8k 1.057x, 16k 1.069x (1.08x, 1.17x at 1k, 4k with dS before dV: "Session
# 2026-11-30c"); N_q / N_k = 4k / 1k 1.034x, 8k / 2k 1.084x; but N_q / N_k = 1k / 2k 0.87x, 1k / 4k 0.59x, 1k / 8k
# 0.35x (each query tile takes N_k / 128 ordered adds: with fewer query tiles than key tiles the chains outlast the
# work). GQA 2: 1.046x at 1k, 1.073x at 4k (its head loop unrolled); GQA 4: 1.033x / 1.057x; GQA 8: 1.005x / 1.087x
# ("Session 2026-11-30c"); larger groups not measured (the unrolled kernel grows with the group: 27 s to compile at
# GQA 8): the two kernels run them.
FUSED_QUERIES = 1024
FUSED_KEYS = 1024
FUSED_MAX_GROUP = 8
# ... and banded calls whose band has no left edge and reaches every key (`_fused_band`: causal; gluon_bwd_fused's
# descending order needs no rotation there) from this many keys, N_k <= N_q, GQA groups up
# to FUSED_BAND_MAX_GROUP, measured the same way ("Session 2026-11-30c"): causal N = 1k 0.975x, 4k 1.041x, 16k
# 1.054x; GQA 2 4k 0.946x, 1k 0.83x (its banded loops spill)
FUSED_BAND_KEYS = 2048
FUSED_BAND_MAX_GROUP = 1
GLUON_DQ = TileConfig(128, 64, 8, 3, heavy_first=True, gluon=True)  # gluon_bwd's dQ tile (kernel_config)
# the fused backward's rotated order (gluon_bwd_fused) up to this many key tiles a head: its waits then go to later
# programs too, so all of a head's must run at once (and the launcher checks the SM count: 64 is below every sm_90
# part's, 78-132, which the Precision's order, FusedDq.rotate_keys, assumes)
FUSED_ROTATE_KEY_TILES = 64
# gluon_fwd's programs run two query blocks each (PAIRED) on calls with at most this many keys, measured on the H200
# side by side (bench/fwd_variants.py --cells pair, bench/NOTES.md "Session 2026-11-29b"): d = 128 unmasked paired /
# unpaired 1.11x at N = 512, 1.07x at 1k, 1.02x at 2k, 0.99x at 4k (d = 64: 1.06x at 1k). Banded, as one loop of each
# kind (gluon_fwd._consumer_band_pair; "Session 2026-11-29g"): causal d = 128 1.036x at N = 1k, 1.024x at 2k, 1.010x
# at 4k; d = 64 1.037x at 2k (the two-copy pairs were 0.68x at d = 128 N = 1k causal: the instruction cache)
PAIR_KEYS = 2048
# gluon_fwd's programs run three consumer warpgroups (192 query rows, WIDE) on unbanded calls at head dim 64 with at
# least this many queries and keys, measured on the H200 side by side (bench/NOTES.md "Session 2026-11-29e": the
# kernel's three-warpgroup variant 1.056x at N = 4k, 1.080x at 16k, but 0.958x at 2k, 0.972x at 1k and 0.961x at 4k
# causal, so banded calls keep two; the product against main, bench/ab_trees.py, forward 1.059 / 1.079 / 1.081x at
# N = 4k / 8k / 16k, outputs bit for bit)
WIDE_ROWS = 4096
# the Triton versions that get the WIDE build: on 3.6 (timed above) its tile loops compile for sm_90 without a spill
# (12 local-memory instructions in the epilogue where O_res is written), while 3.9 spills 33 at 160 registers a
# consumer (the most three consumers may take), 29 inside the tile loops, and no GPU here runs 3.9 to time it: two
# consumer warpgroups there (tests/test_gluon_forward.py WIDE_LOCAL)
WIDE_TRITONS = ("3.6.", )
# gluon_fwd's PERSISTENT build (one program an SM, looping over the query blocks: each program's prologue paid once,
# an item's epilogue under the next one's loads) runs unbanded calls with at most this many keys, measured on the H200
# side by side with the build the launcher ran before (bench/fwd_variants.py --variants persistent, bench/NOTES.md
# "Session 2026-11-29i"): d = 128 1.126x at N = 512, 1.065x at 1k, 1.039x at 2k, 1.006x at 4k; d = 64 1.105x at 1k,
# 1.101x at 2k, 0.986x at 4k (the WIDE build's cell); O bit for bit
PERSIST_KEYS = 2048
# ... and banded calls (causal, windows) with at most this many keys whose work items the programs share evenly
# (`_persistent_imbalance` at most PERSIST_IMBALANCE), measured likewise ("Session 2026-11-29j", each head's blocks
# heaviest first, the heads in order): causal d = 128 1.080x at N = 512, 1.119x at 1k, 1.109x at 2k, 1.065x at 4k,
# 1.016x at 8k; d = 64 1.123x at 2k, 1.053x at 4k, 0.996x at 8k (at 1k 1.185x the Gluon programs, but "auto" runs
# triton_fwd there: LONG_KEYS); at 16k d = 128 (B 1, H 16: an imbalance of 1.54) 0.797x; O bit for bit
BAND_PERSIST_KEYS = 4096
# the most a PERSISTENT banded program's key tiles may exceed the least the busiest program could run (1: as even as
# any order of the blocks): at 1.03 (N = 1k-4k causal, B·N = 16k, 2048 hidden, 132 programs) it gained 1.05-1.12x,
# at 1.54 it lost 0.80x ("Session 2026-11-29j")
PERSIST_IMBALANCE = 1.05
# the multiprocessors a PERSISTENT launch record assumes where no CUDA device is there to ask (launches() predicting
# an sm_90 device's records on a CPU machine): an H100 SXM's and an H200's; the grid changes no result
SM90_MULTIPROCESSORS = 132


def _gluon_asked(engine: str, head_dim: int, n_keys: int | None, band: bool, n_queries: int | None,
                 forward: bool = False) -> bool:
    """Whether `engine` gives the Gluon kernels' tiles (forward and backward; `forward`: the forward's, which "auto"
    also gives banded calls at head dim 64 from SHORT_KEYS keys, their backward triton_bwd's) to a call at this head
    dim with n_keys keys (None: fewer than SHORT_KEYS), banded or not, and n_queries queries (None: a dense or
    block-sparse mask); their domain is checked apart. At head dim 64 "auto" gives them to unmasked calls from
    LONG_KEYS keys on, and to unbanded ones from SHORT_KEYS on (the Gluon forward 0.85x triton_fwd at N = 1k causal,
    its backward 0.94x; unbanded the forward paired 1.065x, the backward 1.03-1.06x: bench/NOTES.md "Session
    2026-11-29b", "Session 2026-11-29f"; PERSISTENT, the forward at 1k causal 1.076x: "Session 2026-11-29j").
    A dense mask keeps the Gluon kernels out, and triton_fwd at their 128 x 128 tile ran 0.76-0.82x its own 64 x 64 on
    such calls (bench/dense_short.py, "Session 2026-11-29c"); at head dim 128 triton_fwd's own tile is theirs."""
    return engine == "gluon" or (engine == "auto" and (head_dim == 128 or (
        head_dim == 64 and n_queries is not None and n_keys is not None
        and n_keys >= (SHORT_KEYS if not band or forward else LONG_KEYS))))


def _query_count(nq: int, dense, sparse) -> int | None:
    """A call's query count as kernel_config's n_queries (and Precision.for_call's Nq) take it: None where the call has
    a dense or block-sparse mask (the Gluon kernels take neither, so their tiles go to unmasked calls only)."""
    return None if dense is not None or sparse else nq


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _fused_asked(head_dim: int, band: bool, n_queries: int | None, n_keys: int | None) -> bool:
    """Whether kernel_config gives the fused backward's dQ tile (TileConfig.fused) to a call in the Gluon kernels'
    domain: head dim 64, at least FUSED_QUERIES x FUSED_KEYS (banded: FUSED_BAND_KEYS keys) and no more keys than
    queries (n_queries None: a masked call, or unknown), and a process whose CUDA device, if it has one, runs it
    (`_fused_device`). GQA groups above FUSED_MAX_GROUP (banded: FUSED_BAND_MAX_GROUP) and bands it does not take are
    kept out by the launcher (`_fused_dkdv`: kernel_config sees neither the heads nor the band's offsets)."""
    return (head_dim == 64 and n_queries is not None and n_keys is not None
            and n_queries >= FUSED_QUERIES and n_keys >= (FUSED_BAND_KEYS if band else FUSED_KEYS)
            and n_keys <= n_queries and _fused_device())


@functools.lru_cache(maxsize=None)
def _fused_device() -> bool:
    """No CUDA device (the tiles describe what an sm_90 device runs: compile checks, the bounds' Precision), or an
    sm_90 one: elsewhere the Gluon tiles run in triton_bwd, whose dQ loop is not the fused kernel's sum."""
    return not torch.cuda.is_available() or gluon_device()


def kernel_config(head_dim: int, dtype: torch.dtype, *, interpret: bool | None = None,
                  precision: str = "default", band: bool = False, engine: str | None = None,
                  n_keys: int | None = None, n_queries: int | None = None) -> KernelConfig:
    """Tiles per head dim, dtype, forward precision mode and whether the call is banded (causal, or a window with a
    side given: `_band`) (H100 tuned; the interpreter uses 16 × 16 tiles so that small test shapes still cross
    several tile boundaries). engine: "triton" (triton_fwd, triton_bwd), "gluon" (gluon_fwd, gluon_bwd: fp16 / bf16,
    head dims 64 and 128, precision "default"; other calls keep triton's tiles) or "auto" (gluon at head dim 128,
    and at head dim 64 on unmasked calls with n_keys >= LONG_KEYS, unbanded ones with n_keys >= SHORT_KEYS); None:
    `forward_engine()`.
    n_keys: the call's key count (None: fewer than SHORT_KEYS); n_queries: its query count where the call has no dense
    or block-sparse mask (None: masked): the head-dim-64 Gluon tiles need it (a dense mask keeps the Gluon kernels
    out); with both at least FUSED_QUERIES x FUSED_KEYS (banded: FUSED_BAND_KEYS keys) and n_keys <= n_queries, a
    head-dim-64 call in the Gluon domain gets the fused backward's dQ tile (TileConfig.fused; the launcher keeps it
    from larger GQA groups and from bands it does not take). The
    Gluon tiles are given whatever the device: on one that is not sm_90 (and for calls outside the Gluon kernels'
    domain) triton_fwd / triton_bwd run them; the fused dQ tile only where no CUDA device or an sm_90 one
    (`_fused_device`)."""
    if interpret is None:
        interpret = _interpreting()
    if interpret:
        t = TileConfig(16, 16, 1, 1)
        return KernelConfig(t, t, t)
    bd = max(16, triton.next_power_of_2(head_dim))
    engine = forward_engine() if engine is None else engine
    _check_choice("engine", engine, _ENGINES)
    gluon_domain = dtype != torch.float32 and precision == "default" and head_dim in (64, 128)
    # gluon_fwd: 128 query rows (two warpgroups of 64) x 128 keys, heaviest query blocks first under a band;
    # the K / V ring 2 deep at d = 128 (160 KB of shared memory), 3 at d = 64 (bench/NOTES.md, "Gluon forward")
    fwd = TileConfig(128, 128, 8, 2 if bd == 128 else 3, heavy_first=True, gluon=True)
    if _gluon_asked(engine, head_dim, n_keys, band, n_queries) and gluon_domain:
        # gluon_bwd's dK/dV: 128 keys (two warpgroups of 64) x 64 query rows, a 3-deep (Q, dO) ring. At d = 128 the
        # 64-row tile spills a few values (Sᵀ, dPᵀ, Pᵀ, dSᵀ beside dK, dV in 240 registers) and still runs 1.04-1.12x
        # the spill-free 32-row tile (bench/NOTES.md, "Session 2026-11-27g"; the same sums: bit for bit equal). At
        # d = 64: 128 query rows, a 2-deep ring, 1.04-1.18x the 64-row tile (3 deep: 0.55-1.06x; "Session
        # 2026-11-27h"; bit for bit equal where the band's partial tiles are the same)
        dkdv = TileConfig(128, 128, 8, 2, gluon=True) if bd == 64 else TileConfig(64, 128, 8, 3, gluon=True)
        # gluon_bwd's dQ: 128 query rows (two warpgroups of 64) x 64 keys, triton_bwd's d = 128 tiles; or dQ inside
        # the dK/dV kernel (gluon_bwd_fused: 128 query rows a tile, partials of the program's 128 keys)
        dq = GLUON_DQ
        if _fused_asked(head_dim, band, n_queries, n_keys):
            dq = TileConfig(128, 128, 8, 2, gluon=True, fused=True)
        return KernelConfig(fwd, dkdv, dq)
    if _gluon_asked(engine, head_dim, n_keys, band, n_queries, forward=True) and gluon_domain:
        # banded d = 64 calls from SHORT_KEYS keys below LONG_KEYS: gluon_fwd's tile, triton_bwd's (the default) tiles
        return replace(kernel_config(head_dim, dtype, interpret=False, precision=precision, engine="triton"), fwd=fwd)
    if dtype == torch.float32:  # 4-byte tiles: half the rows for the same shared memory
        if bd <= 64:
            return KernelConfig(TileConfig(64, 32, 4, 2), TileConfig(32, 64, 4, 2), TileConfig(64, 32, 4, 2))
        if bd <= 128:  # dK and dV accumulators (2 × 64 × 128 fp32) want 8 warps of registers
            return KernelConfig(TileConfig(64, 32, 4, 2), TileConfig(32, 64, 8, 2), TileConfig(64, 32, 4, 2))
        return KernelConfig(TileConfig(32, 32, 8, 1), TileConfig(32, 32, 8, 1), TileConfig(32, 32, 8, 1))
    # bf16/fp16, measured on the H100 (bench/NOTES.md "2026-11-23b"; bench/kernel_speed.py --variants,
    # B·N = 16k, H·d = 2048, side by side in one process). Forward: d <= 64 keeps 64×64 tiles, 4
    # warps, 3 stages (128-row tiles, TMA descriptors: 0.81–1.02× its speed); d = 128 takes 128×128
    # tiles with 8 warps (1.06× non-causal, 1.08× causal over 64×64: half the K/V traffic from L2
    # per query row).
    # precision="accurate" (three products per tile for two): d <= 64 loads K/V through tensor
    # descriptors (1.04× over pointer loads, 1.02× causal), d = 128 keeps 64×64 (128×128 with its
    # extra P_lo registers: not better). The backward: d = 128 prefers 128-wide dK/dV tiles, 8 warps.
    if bd <= 64:
        fwd = TileConfig(64, 64, 4, 3, kv_desc=precision == "accurate")
        return KernelConfig(fwd, TileConfig(64, 64, 4, 3), TileConfig(64, 64, 4, 3))
    if bd <= 128:
        # causal d = 128: query blocks heaviest first, 0.94× the time at N = 16k, 0.98× at 4k (2026-11-26d;
        # at d = 64 it was 1.06× at 16k: left off there, and in the dQ kernel, where it moved nothing beyond noise)
        fwd = TileConfig(64, 64, 4, 3) if precision == "accurate" else TileConfig(128, 128, 8, 3, heavy_first=True)
        if band and precision != "accurate":
            # banded d = 128: 64 × 64 tiles, 4 warps, heavy first: 0.81 / 0.85 / 0.89 / 0.98 / 0.99× the time of
            # 128 × 128 at N = 1k / 2k / 4k / 8k / 16k causal (2026-11-27d, bench/fwd_tile_threshold.py): 113 KB of
            # shared memory, two CTAs per SM, one's prologue and epilogue beside the other's tiles (short causal
            # programs are mostly those). Non-causal it is a wash below 4k and 1.04-1.11× above: not taken there.
            fwd = TileConfig(64, 64, 4, 3, heavy_first=True)
        return KernelConfig(fwd, TileConfig(64, 128, 8, 3), TileConfig(128, 64, 8, 3))
    # d in (128, 256]: fp32 accumulators of 64 × 256 (fwd) and 2 × 32 × 256 (dK, dV) need 8 warps
    return KernelConfig(TileConfig(64, 32, 8, 2), TileConfig(32, 32, 8, 2), TileConfig(32, 32, 8, 2))


@dataclass(frozen=True)
class Arithmetic:
    """What the kernel computes with, as plain values (kernels/ imports no other part of the project;
    `flashcheck.adapters` turns this into the `flashcheck.proofs.bounds.Precision` the bounds read).

    input/output: dtype names; dot: operand format of the tensor-core products ("fp16", "bf16",
    "tf32", "ieee"); exp: "ex2.approx" on the GPU, "libm" in the interpreter; block_k: K/V tile width
    of the forward inner loop (tl.dot(p, v, acc) adds each tile into the running accumulator);
    block_q: Q tile height of the backward dK/dV inner loop (likewise into the dK, dV accumulators);
    block_k_dq: K tile width of the backward dQ kernel's key loop (tl.dot(ds, k, dq) adds each tile into
    the running dQ, the ragged tile first: which keys form that tile follows this width, not block_k);
    block_q_dq, block_k_dkdv: the outer blocks of the backward kernels (the dQ kernel's query rows per program, the
    dK/dV kernel's keys per program): each block visits its partial inner tiles first, then its full ones
    (kernels/tiles.py inner_tiles), so under a band or block-sparse lists the order differs from block to block;
    block_q_fwd: the forward's query rows per program (BLOCK_M of kernels/triton_fwd.py): each query block visits its
    own key tiles, partial ones first (as block_q_dq for the dQ kernel);
    tile_lists: whether the partial tiles are the band's (dense masks are applied elementwise on every tile) or a
    block-sparse mask's lists ("band", "lists");
    p_split: the forward computes P·V as P_hi·V + P_lo·V (P_hi = round(P), P_lo = round(P − P_hi)
    in the dot's operand format; precision="accurate"); delta_from: "output" when the backward's
    Δ = rowsum(dO ∘ O) reads O rounded to the output dtype, "fp32" when it reads an O accurate to
    fp32 (O + O_res, the forward's rounding residual; float32 outputs are that O already);
    l_accumulate: the format of the forward's running sum l = alpha l + rowsum(P̃) across key tiles
    ("float64": each tile's fp32 rowsum added in fp64, l rounded once into fp32 at the end);
    block_k_band, block_q_fwd_band: the forward's key tile and query rows per program under a band (causal, or a
    window with a side given) where `kernel_config` gives banded calls a tile of their own; None: the same as
    block_k, block_q_fwd (the backward's tiles never depend on the band); band_keys: where that tile is given to
    banded, unmasked calls with at least this many keys only (SHORT_KEYS: "auto" at head dim 64, gluon_fwd's tile),
    None: to every banded call;
    block_k_long, block_q_fwd_long, long_keys: the forward's tile for calls with at least long_keys keys, banded or
    not, where `kernel_config` gives them one of their own (LONG_KEYS: "auto" at head dim 64, the Gluon kernels);
    None: no such tile; block_q_dq_long, block_k_dkdv_long, block_q_long: those calls' backward outer blocks and
    dK/dV query tile where they differ (the Gluon backward's 128-row dQ and 128-key dK/dV programs, its 128-row dK/dV
    query tiles at head dim 64; its dQ key tile is triton_bwd's), else None;
    block_k_short, block_q_fwd_short, short_keys: the forward's tile for unbanded calls with at least short_keys keys
    (and fewer than long_keys where that is stated) where `kernel_config` gives them one of their own (SHORT_KEYS:
    "auto" at head dim 64, gluon_fwd's tile); None: no such tile; block_q_dq_short, block_k_dkdv_short, block_q_short:
    those calls' backward outer blocks and dK/dV query tile where they differ (at head dim 64 the Gluon backward's, as
    the long calls'), else None;
    fused_dq_queries, fused_dq_keys, block_k_dq_fused: unbanded, unmasked calls with at least this many queries and
    keys run the fused backward (gluon_bwd_fused: dQ = scale · Σ_j T_j, each T_j one tensor-core chain from zero over
    a key tile of block_k_dq_fused keys, the T_j added in fp32 in a fixed tile order: `fused_tiles`), else None
    (FUSED_QUERIES x FUSED_KEYS under kernel_config's tiles; 1 x 1 under given fused tiles; never in the
    interpreter). Those calls' dK/dV are the long calls' (block_k_dkdv_long, block_q_long);
    fused_rotate_keys: those calls with at most this many keys take the rotated order (FUSED_ROTATE_KEY_TILES key
    tiles: each key tile's full query tiles from its own rank on, dQ's adds by (step, rank)), else None;
    fused_dq_max_group, fused_dq_keys_at_most_queries: under kernel_config's tiles the fused calls have GQA groups of
    at most FUSED_MAX_GROUP and no more keys than queries (True); under given fused tiles any (None, False);
    fused_band_keys, fused_band_max_group: banded calls whose band it takes (`_fused_band`) run it too from
    this many keys (FUSED_BAND_KEYS; given fused tiles: 1) with GQA groups up to fused_band_max_group
    (FUSED_BAND_MAX_GROUP; given: None, any), in the descending order (no rotation); None: no banded call."""
    input: str
    dot: str
    output: str
    exp: str
    block_k: int
    block_q: int
    block_k_dq: int
    block_q_dq: int
    block_k_dkdv: int
    tile_lists: str = "band"
    block_q_fwd: int | None = None
    p_split: bool = False
    delta_from: str = "fp32"
    l_accumulate: str = "float64"
    block_k_band: int | None = None
    block_q_fwd_band: int | None = None
    band_keys: int | None = None
    block_k_long: int | None = None
    block_q_fwd_long: int | None = None
    long_keys: int | None = None
    block_q_dq_long: int | None = None
    block_k_dkdv_long: int | None = None
    block_q_long: int | None = None
    block_k_short: int | None = None
    block_q_fwd_short: int | None = None
    short_keys: int | None = None
    block_q_dq_short: int | None = None
    block_k_dkdv_short: int | None = None
    block_q_short: int | None = None
    fused_dq_queries: int | None = None
    fused_dq_keys: int | None = None
    block_k_dq_fused: int | None = None
    fused_rotate_keys: int | None = None
    fused_dq_max_group: int | None = None
    fused_dq_keys_at_most_queries: bool = False
    fused_band_keys: int | None = None
    fused_band_max_group: int | None = None


def arithmetic(dtype, dot_precision: str | None = None, *, head_dim: int | None = None,
               interpret: bool | None = None, block_mask: BlockSparseMask | None = None,
               precision: str = "default", delta_from: str = "fp32",
               tiles: KernelConfig | None = None) -> Arithmetic:
    """The kernel's arithmetic for inputs in `dtype` run with these `attention` options:
    tensor-core operands in `dtype` (fp32: "ieee" unless dot_precision="tf32"), fp32 accumulation,
    outputs in `dtype`, exp2 via ex2.approx on the GPU (libm/numpy in the interpreter), the tile
    widths of the inner loops — those of `block_mask` when one is used, since it fixes the kernel's
    tile grid, else of `tiles` or `kernel_config` — and the precision modes (`Arithmetic`)."""
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    if dtype not in _DTYPES:
        raise TypeError(f"dtype must be float16, bfloat16 or float32, got {dtype}")
    name = _DTYPES[dtype]
    dot = {torch.float16: "fp16", torch.bfloat16: "bf16"}.get(dtype) or _dot_precision(dot_precision)
    p_split = _p_split(precision, dtype, dot)
    _check_choice("delta_from", delta_from, _DELTA_FROM)
    if interpret is None:
        interpret = _interpreting()
    cfg = tiles or kernel_config(head_dim or 64, dtype, interpret=interpret, precision=precision)
    block_k, block_q, block_k_dq = cfg.fwd.block_n, cfg.dkdv.block_m, cfg.dq.block_n
    block_q_dq, block_k_dkdv = cfg.dq.block_m, cfg.dkdv.block_n
    block_q_fwd = cfg.fwd.block_m
    band = None if tiles else kernel_config(head_dim or 64, dtype, interpret=interpret, precision=precision,
                                            band=True).fwd
    if band is not None and (band.block_m, band.block_n, band.num_warps) == (block_q_fwd, block_k, cfg.fwd.num_warps):
        band = None  # the same code (stages and program order change neither the tiles nor the rowsum's tree)
    band_keys = None
    if band is None and not tiles:  # a band tile from SHORT_KEYS keys on (unmasked calls), "auto" at head dim 64
        short_band = kernel_config(head_dim or 64, dtype, interpret=interpret, precision=precision, band=True,
                                   n_keys=SHORT_KEYS, n_queries=SHORT_KEYS).fwd
        if ((short_band.block_m, short_band.block_n, short_band.num_warps, short_band.gluon)
                != (block_q_fwd, block_k, cfg.fwd.num_warps, cfg.fwd.gluon)):
            band, band_keys = short_band, SHORT_KEYS
    # the tiles of long calls (unmasked, from LONG_KEYS keys) and of short unbanded ones (from SHORT_KEYS)
    long, long_bwd = (None, None) if tiles else _kind_tiles(
        kernel_config(head_dim or 64, dtype, interpret=interpret, precision=precision, n_keys=LONG_KEYS,
                      n_queries=LONG_KEYS), cfg, "long")
    short, short_bwd = (None, None) if tiles else _kind_tiles(
        kernel_config(head_dim or 64, dtype, interpret=interpret, precision=precision, n_keys=SHORT_KEYS,
                      n_queries=SHORT_KEYS), cfg, "short unbanded")
    # the fused backward (unmasked calls, unbanded or under a band it takes): given fused tiles run it on every such
    # call, kernel_config's from FUSED_QUERIES x FUSED_KEYS on (banded: FUSED_BAND_KEYS); its dK/dV tile is then the
    # one of those tiles
    fused_cfg = tiles or (None if interpret else kernel_config(head_dim or 64, dtype, interpret=False,
                                                               precision=precision, n_keys=FUSED_KEYS,
                                                               n_queries=FUSED_QUERIES))
    fused = fused_band = None
    if not interpret and fused_cfg is not None and fused_tiles(fused_cfg, head_dim or 64, dtype):
        fused = (1, 1) if tiles else (FUSED_QUERIES, FUSED_KEYS)
        if (fused_cfg.dkdv.block_n, fused_cfg.dkdv.block_m) != ((long_bwd or (0, block_k_dkdv, block_q))[1:]):
            raise RuntimeError("the fused backward's dK/dV tile is not the long calls' (or the only) one, which no "
                               "Precision field states per call")
        # banded calls (the bands `_fused_band` takes) from FUSED_BAND_KEYS keys, on the same dK/dV tile
        band_cfg = tiles or kernel_config(head_dim or 64, dtype, interpret=False, precision=precision, band=True,
                                          n_keys=FUSED_BAND_KEYS, n_queries=FUSED_BAND_KEYS)
        if fused_tiles(band_cfg, head_dim or 64, dtype):
            if band_cfg.dkdv != fused_cfg.dkdv:
                raise RuntimeError("the banded fused backward's dK/dV tile is not the unbanded one's, which no "
                                   "Precision field states per call")
            fused_band = (1, None) if tiles else (FUSED_BAND_KEYS, FUSED_BAND_MAX_GROUP)
    if block_mask is not None:  # its tile grid is every kernel's (_tiles: dq's block_n is its block_k too)
        block_k, block_q, block_k_dq = block_mask.block_k, block_mask.block_q, block_mask.block_k
        block_q_dq, block_k_dkdv = block_mask.block_q, block_mask.block_k
        block_q_fwd = block_mask.block_q
        band = long = long_bwd = fused = fused_band = short = short_bwd = band_keys = None
    return Arithmetic(input=name, dot=dot, output=name, exp="libm" if interpret else "ex2.approx",
                      block_k=block_k, block_q=block_q, block_k_dq=block_k_dq, block_q_dq=block_q_dq,
                      block_k_dkdv=block_k_dkdv, block_q_fwd=block_q_fwd,
                      tile_lists="band" if block_mask is None else "lists",
                      p_split=p_split, delta_from=delta_from,
                      block_k_band=None if band is None else band.block_n,
                      block_q_fwd_band=None if band is None else band.block_m,
                      band_keys=band_keys,
                      block_k_long=None if long is None else long.block_n,
                      block_q_fwd_long=None if long is None else long.block_m,
                      long_keys=None if long is None else LONG_KEYS,
                      block_q_dq_long=None if long_bwd is None else long_bwd[0],
                      block_k_dkdv_long=None if long_bwd is None else long_bwd[1],
                      block_q_long=None if long_bwd is None or long_bwd[2] == block_q else long_bwd[2],
                      block_k_short=None if short is None else short.block_n,
                      block_q_fwd_short=None if short is None else short.block_m,
                      short_keys=None if short is None else SHORT_KEYS,
                      block_q_dq_short=None if short_bwd is None else short_bwd[0],
                      block_k_dkdv_short=None if short_bwd is None else short_bwd[1],
                      block_q_short=None if short_bwd is None or short_bwd[2] == block_q else short_bwd[2],
                      fused_dq_queries=None if fused is None else fused[0],
                      fused_dq_keys=None if fused is None else fused[1],
                      block_k_dq_fused=None if fused is None else fused_cfg.dq.block_n,
                      fused_rotate_keys=None if fused is None else FUSED_ROTATE_KEY_TILES * fused_cfg.dkdv.block_n,
                      fused_dq_max_group=None if fused is None or tiles else FUSED_MAX_GROUP,
                      fused_dq_keys_at_most_queries=fused is not None and not tiles,
                      fused_band_keys=None if fused_band is None else fused_band[0],
                      fused_band_max_group=None if fused_band is None else fused_band[1])


def _kind_tiles(kind: KernelConfig, cfg: KernelConfig, name: str) -> tuple[TileConfig | None, tuple | None]:
    """A call kind's tiles (kernel_config for its key count) against the default ones `cfg`: its forward tile, None
    where it is the same tile and engine (the rowsum record is per tile and engine), and its backward's outer blocks
    and dK/dV query tile (dQ rows, dK/dV keys per program, dK/dV query rows), None where the kind has no forward tile
    of its own or they are the same. Raises where the kind changes the dQ kernel's key tile, which Precision.for_call
    keeps (no Precision field states it per call)."""
    f, d = kind.fwd, cfg.fwd
    if (f.block_m, f.block_n, f.num_warps, f.gluon) == (d.block_m, d.block_n, d.num_warps, d.gluon):
        return None, None
    if kind.dq.fused:  # its calls of the kind that run a dQ kernel (GQA, more keys than queries) run gluon_bwd's; the
        # fused calls' dQ is FusedDq's (Precision.for_call substitutes it)
        kind = replace(kind, dq=GLUON_DQ)
    if kind.dq.block_n != cfg.dq.block_n:
        raise RuntimeError(f"kernel_config's {name} tiles change the dQ kernel's key tile, which no Precision field "
                           "states per call")
    bwd = (kind.dq.block_m, kind.dkdv.block_n, kind.dkdv.block_m)
    return f, None if bwd == (cfg.dq.block_m, cfg.dkdv.block_n, cfg.dkdv.block_m) else bwd


def _check_choice(name, value, allowed):
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")


def _p_split(precision, dtype, dot: str) -> bool:
    """Whether precision="accurate" splits P: for fp16/bf16 operands. fp32 with "ieee" products
    has P exact already (nothing to split); with "tf32" a split is not implemented: refused."""
    _check_choice("precision", precision, _PRECISIONS)
    if precision == "default" or dtype != torch.float32:
        return precision == "accurate"
    if dot == "tf32":
        raise ValueError("precision='accurate' with dot_precision='tf32' is not supported "
                         "(use dot_precision='ieee', whose P·V is exact in fp32 already)")
    return False


def _dot_precision(dot_precision) -> str:
    if dot_precision is None:
        return "ieee"
    if dot_precision not in ("ieee", "tf32"):
        raise ValueError(f"dot_precision must be None, 'ieee' or 'tf32', got {dot_precision!r}")
    return dot_precision


def _modes(dtype, dot_precision, precision, delta_from, grad: bool) -> tuple[str, bool, bool]:
    """(dot, p_split, save_res) of a call in `dtype` with these options; `grad`: a backward may follow."""
    if dtype == torch.float32:
        dot = _dot_precision(dot_precision)
    else:
        _dot_precision(dot_precision)  # still reject unknown spellings
        dot = "tf32"  # no effect on fp16/bf16 operands (the backend default spelling)
    p_split = _p_split(precision, dtype, dot)
    _check_choice("delta_from", delta_from, _DELTA_FROM)
    # The residual is worth storing only when a backward can read it, and only below fp32 output.
    save_res = delta_from == "fp32" and dtype != torch.float32 and grad
    return dot, p_split, save_res


def _check_tiles(tiles) -> None:
    if tiles is None:
        return
    if not isinstance(tiles, KernelConfig):
        raise TypeError(f"tiles must be a flashcheck.kernels.attention.KernelConfig or None, got {type(tiles).__name__}")
    for name in ("fwd", "dkdv", "dq"):
        t = getattr(tiles, name)
        for f in ("block_m", "block_n"):
            b = getattr(t, f)
            if not isinstance(b, int) or b < 16 or b & (b - 1):
                raise ValueError(f"tiles.{name}.{f} must be a power of 2 >= 16, got {b!r}")
        if t.pipeline_qk and t.warp_specialize:
            raise ValueError(f"tiles.{name}: pipeline_qk and warp_specialize are alternative schedules "
                             "of the unmasked-tile loop; set at most one")


# --------------------------------------------------------------------------- input checks

def _check_tensor(name, t):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != 4:
        raise ValueError(f"{name} must have shape (B, H, N, d), got {tuple(t.shape)}")
    if t.dtype not in _DTYPES:
        raise TypeError(f"{name} must be float16, bfloat16 or float32, got {t.dtype}")


def _band(causal, window, nq: int, nk: int) -> tuple[bool, int, int]:
    """(BAND, off_lo, off_hi): key j visible from query i iff i + off_lo <= j <= i + off_hi."""
    if not (causal is False or causal is True or causal in ("top_left", "bottom_right")):
        raise ValueError(f"causal must be False, True, 'top_left' or 'bottom_right', got {causal!r}")
    left = right = None
    if window is not None:
        if not isinstance(window, (tuple, list)) or len(window) != 2:
            raise ValueError(f"window must be a (left, right) pair, got {window!r}")
        left, right = window
        for side, w in (("left", left), ("right", right)):
            if w is not None and (isinstance(w, bool) or not isinstance(w, int) or w < 0):
                raise ValueError(f"window {side} must be None or an int >= 0, got {w!r}")
    off = nk - nq if causal == "bottom_right" else 0
    if causal is not False:
        right = 0 if right is None else min(right, 0)
    if left is None and right is None:
        return False, 0, 0
    big = nq + nk + 1  # farther than any (i, j) distance: "unbounded" without leaving int32
    lo = off - (big if left is None else min(left, big))
    hi = off + (big if right is None else min(right, big))
    return True, lo, hi


def _normalize_mask(mask, B, Hq, nq, nk, causal, window, device):
    """Returns (dense int8 mask (B|1, H|1, Nq|1, Nk|1) or None, BlockSparseMask or None, causal, window)."""
    if mask is None:
        return None, None, causal, window
    if not isinstance(mask, (torch.Tensor, BlockSparseMask)):
        try:
            from torch.nn.attention.flex_attention import BlockMask
        except ImportError:  # pragma: no cover
            BlockMask = ()
        if BlockMask and isinstance(mask, BlockMask):
            mask = from_flex_block_mask(mask)
        else:
            raise TypeError("mask must be a bool tensor, a flashcheck.kernels.block_mask.BlockSparseMask or a "
                            f"flex_attention.BlockMask, got {type(mask).__name__}")
    if isinstance(mask, BlockSparseMask):
        if (mask.nq, mask.nk) != (nq, nk):
            raise ValueError(f"mask was built for (Nq, Nk) = ({mask.nq}, {mask.nk}), got ({nq}, {nk})")
        mb, mh = mask.kv_num_blocks.shape[:2]
        if mb not in (1, B) or mh not in (1, Hq):
            raise ValueError(f"mask batch/head dims ({mb}, {mh}) do not broadcast to ({B}, {Hq})")
        if (causal is not False and causal != mask.causal) or (window is not None and tuple(window) != mask.window):
            raise ValueError("causal/window differ from those the block mask was built with "
                             f"(mask: causal={mask.causal!r}, window={mask.window!r})")
        if mask.kv_num_blocks.device != device:
            raise ValueError(f"mask is on {mask.kv_num_blocks.device}, q on {device}")
        dense = mask.dense.view(torch.int8) if mask.dense is not None else None
        return dense, mask, mask.causal, mask.window
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True = attend), got dtype {mask.dtype}")
    if mask.device != device:
        raise ValueError(f"mask is on {mask.device}, q on {device}")
    if mask.dim() > 4:
        raise ValueError(f"mask must have at most 4 dims, got shape {tuple(mask.shape)}")
    m4 = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
    for axis, (got, want) in enumerate(zip(m4.shape, (B, Hq, nq, nk))):
        if got not in (1, want):
            raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to "
                             f"(B, Hq, Nq, Nk) = {(B, Hq, nq, nk)} (axis {axis})")
    return m4.contiguous().view(torch.int8), None, causal, window


def attention(q, k, v, *, scale=None, causal=False, window=None, mask=None, return_lse=False,
              dot_precision=None, precision="default", delta_from="fp32", tiles=None):
    """Softmax(scale · Q Kᵀ, masked) V with FlashAttention-2 tiling.

    q (B, Hq, Nq, d), k (B, Hkv, Nk, d), v (B, Hkv, Nk, dv); Hq a multiple of Hkv; d, dv <= 256;
    float16 / bfloat16 / float32 (dot_precision "ieee" (default) or "tf32" for float32; ignored
    otherwise). causal: False | True | "top_left" | "bottom_right"; window: (left, right);
    mask: bool tensor broadcastable to (B, Hq, Nq, Nk), a `BlockSparseMask` or a flex `BlockMask`.
    precision: "default" | "accurate" (forward P·V as P_hi·V + P_lo·V; fp16/bf16);
    delta_from: "fp32" (default; the backward's Δ from O + its rounding residual, which the forward
    then stores when q, k or v requires grad) | "output" (Δ from the rounded O, as FA2);
    tiles: a `KernelConfig` replacing `kernel_config`'s table (benchmarks, tuning).
    Returns O (B, Hq, Nq, dv), and the natural-log LSE (B, Hq, Nq) float32 when return_lse.
    Differentiable in q, k, v (and through LSE). Tensors whose last dim is strided are copied.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_tensor(name, t)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    if q.device.type == "cpu" and not _interpreting():
        raise ValueError("q, k, v are CPU tensors: the Triton kernel needs CUDA tensors, or "
                         "TRITON_INTERPRET=1 to run on the CPU")
    if q.device.type == "cpu" and q.dtype == torch.bfloat16:
        raise TypeError("q, k, v are bfloat16 on the CPU: the Triton interpreter cannot compute "
                        "bf16 dots (it multiplies raw bit patterns); use float16/float32 or CUDA")
    if q.device.type not in ("cpu", "cuda"):
        raise ValueError(f"q must be a CUDA tensor (or CPU with TRITON_INTERPRET=1), got {q.device}")
    B, Hq, nq, d = q.shape
    Bk, Hkv, nk, dk_ = k.shape
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(f"k and v must agree in (B, Hkv, Nk), got {tuple(k.shape)} and {tuple(v.shape)}")
    if Bk != B:
        raise ValueError(f"k batch {Bk} differs from q batch {B}")
    if dk_ != d:
        raise ValueError(f"k head dim {dk_} differs from q head dim {d}")
    dv = v.shape[3]
    if Hkv == 0 or Hq % Hkv:
        raise ValueError(f"q heads ({Hq}) must be a multiple of k/v heads ({Hkv})")
    for name, dim in (("q/k head dim d", d), ("v head dim dv", dv)):
        if not 1 <= dim <= MAX_HEAD_DIM:
            raise ValueError(f"{name} must be in 1..{MAX_HEAD_DIM}, got {dim}")
    # Batch/head offsets are int64 in the kernels; offsets inside one head (row · row stride +
    # column) and the band arithmetic (i + off ± window) are int32: refuse what would overflow.
    for name, t in (("q", q), ("k", k), ("v", v)):
        inner = (t.shape[2] - 1) * max(t.stride(2), t.shape[3]) + t.shape[3]
        if inner > _INT32_MAX or nq + nk > 2**29:
            raise ValueError(f"{name}: sequence lengths Nq={nq}, Nk={nk} with head dim {t.shape[3]} "
                             "exceed the kernel's int32 per-head offsets (split the sequence)")
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise TypeError(f"scale must be a finite float or None, got {scale!r}")
    grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    dot, p_split, save_res = _modes(q.dtype, dot_precision, precision, delta_from, grad)
    _check_tiles(tiles)
    dense, sparse, causal, window = _normalize_mask(mask, B, Hq, nq, nk, causal, window, q.device)
    band, off_lo, off_hi = _band(causal, window, nq, nk)
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    sparse_list = [] if sparse is None else sparse.tensors()
    bm = (sparse.block_q, sparse.block_k) if sparse is not None else (0, 0)
    args = (q, k, v, dense, sparse_list, float(scale), band, off_lo, off_hi, bm[0], bm[1], dot, p_split, save_res,
            tiles.flat() if tiles is not None else [])
    if torch.compiler.is_compiling():  # traced as the custom op (no graph break)
        o, lse, _ = torch.ops.flashcheck.attention_fwd(*args)
    elif grad:
        # eager: the same launches through a plain autograd.Function, without the custom op's dispatch
        # (its argument flattening took more host time per call than a short kernel runs: _EagerAttention)
        o, lse, _ = _EagerAttention.apply(*args[:4], *args[5:], *sparse_list)
    else:
        o, lse, _ = _fwd_impl(*args)
    return (o, lse) if return_lse else o


# --------------------------------------------------------------------------- launch configuration
#
# Every launch is first described in plain values (`Launch`), by the functions below, from plain
# descriptions of its tensors (`Layout`); `_fwd_impl`/`_bwd_impl` then launch exactly that. The same
# functions tell, without a GPU or a tensor, which binaries a call compiles (`launches`): Triton
# compiles one per kernel, constexprs, num_warps/num_stages, pointer dtypes and 16-byte alignments,
# and class of each integer argument (== 1, divisible by 16, 32/64-bit); flashcheck's warm-up reads it.

_DTYPE_NAMES = {getattr(torch, name): name for name in ("float16", "bfloat16", "float32", "int8", "int32", "bool")}
_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "int8": 1, "int32": 4, "bool": 1}


@dataclass(frozen=True)
class Layout:
    """A tensor as a launch reads it: dtype name, shape, strides (elements), 16-byte aligned base."""
    dtype: str
    shape: tuple
    strides: tuple
    aligned: bool = True

    @classmethod
    def of(cls, t: torch.Tensor) -> "Layout":
        name = _DTYPE_NAMES.get(t.dtype) or str(t.dtype).replace("torch.", "")
        return cls(name, tuple(t.shape), tuple(t.stride()), t.data_ptr() % 16 == 0)

    @classmethod
    def dense(cls, dtype: str, shape) -> "Layout":
        """A freshly allocated contiguous tensor (torch's strides: size-0/1 dims count as 1)."""
        strides, n = [], 1
        for size in reversed(tuple(shape)):
            strides.append(n)
            n *= max(size, 1)
        return cls(dtype, tuple(shape), tuple(reversed(strides)))

    def like(self) -> "Layout":
        """torch.empty_like of this tensor (preserve_format): its strides when it is non-overlapping and
        dense (the dims of size > 1, by increasing stride, tile memory without gaps), else contiguous."""
        expected = 1
        for size, stride in sorted(((n, st) for n, st in zip(self.shape, self.strides) if n != 1),
                                   key=lambda x: x[1]):
            if stride != expected:
                return Layout.dense(self.dtype, self.shape)
            expected *= size
        return Layout(self.dtype, self.shape, self.strides)

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self.dtype]

    def broadcast_strides(self, n: int) -> tuple:
        """The strides of the first n dims, 0 on a dim of size 1 (broadcast over it)."""
        return tuple(0 if self.shape[i] == 1 else self.strides[i] for i in range(n))


@dataclass(frozen=True)
class Launch:
    """One kernel launch as plain values: `kernel[grid](*leading, *ints, **constexprs, num_warps=,
    num_stages=)` where `leading` are its pointer arguments (and sm_scale), passed by the launcher.
    `pointers`: (dtype, 16-byte aligned) of each pointer argument, in order (gluon_fwd's TMA descriptors: (dtype,
    True), their boxes and layouts set by the constexprs); num_warps/num_stages
    None: Triton's default (not passed)."""
    kernel: str
    grid: tuple
    pointers: tuple
    ints: tuple
    constexprs: tuple  # ((name, value), ...) in the kernel's order
    num_warps: int | None = None
    num_stages: int | None = None


def _strides3(t: Layout) -> tuple:
    return tuple(t.strides[:3])


def _mask_strides(dense: Layout | None) -> tuple:
    if dense is None:
        return (0, 0, 0, 0)
    return dense.broadcast_strides(4)


def _sparse_strides(num: Layout, idx: Layout) -> tuple:
    return num.broadcast_strides(2) + (num.strides[2],) + idx.broadcast_strides(2) + (idx.strides[2],)


def _ptr(t: Layout) -> tuple:
    return (t.dtype, t.aligned)


def _tiles(d: int, dv: int, dtype, block_q, block_k, tiles: list[int], precision: str = "default",
           interpret: bool | None = None, band: bool = False, engine: str | None = None, n_keys: int | None = None,
           n_queries: int | None = None):
    # a block-sparse mask fixes the tile grid (below): its warps and stages follow the unbanded, short-N table
    cfg = KernelConfig.unflat(tiles) if tiles else kernel_config(max(d, dv), dtype, interpret=interpret,
                                                                 precision=precision, band=band and not block_q,
                                                                 engine=engine,
                                                                 n_keys=None if block_q else n_keys,
                                                                 n_queries=None if block_q else n_queries)
    if block_q:  # a block-sparse mask fixes the tile grid
        w = cfg.fwd
        # 8 warps are two warpgroups of 64 rows each: only for tiles of 128 rows and more
        warps = w.num_warps if block_q >= 128 else min(w.num_warps, 4)
        fixed = TileConfig(block_q, block_k, warps, w.num_stages)
        cfg = KernelConfig(replace(w, block_m=block_q, block_n=block_k, num_warps=warps), fixed, fixed)
    return cfg, max(16, triton.next_power_of_2(d)), max(16, triton.next_power_of_2(dv))


def _descriptor_ok(t: Layout) -> bool:
    """A (Nk, d) tensor descriptor per head needs a 16-byte aligned head base and row stride
    (TMA); the last dim is contiguous already (attention() copies it otherwise)."""
    return t.aligned and all((t.strides[i] * t.itemsize) % 16 == 0 for i in range(3))


def forward_launch(q: Layout, k: Layout, v: Layout, o: Layout, dense: Layout | None,
                   sparse: tuple | None, *, band: bool, off_lo: int, off_hi: int, block_q: int,
                   block_k: int, dot: str, p_split: bool, save_res: bool, tiles: list[int],
                   interpret: bool | None = None) -> Launch:
    """The forward kernel's launch. `sparse`: the Layouts of the block-sparse (num, idx) lists or
    None; `dense`: the int8 (B|1, H|1, Nq|1, Nk|1) mask or None."""
    return _forward_launch(q, k, v, o, dense, sparse, band, off_lo, off_hi, block_q, block_k, dot, p_split,
                           save_res, tuple(tiles), _interpreting() if interpret is None else interpret,
                           forward_engine())


# The launch records are pure functions of plain values, computed once per distinct call layout: building them
# took ~45 us of host time per forward on the H100 host, as long as a short kernel runs (bench/host_profile.py).
@functools.lru_cache(maxsize=1024)
def _forward_launch(q, k, v, o, dense, sparse, band, off_lo, off_hi, block_q, block_k, dot, p_split, save_res,
                    tiles: tuple, interpret: bool, engine: str) -> Launch:
    B, Hq, nq, d = q.shape
    Hkv, nk, dv = k.shape[1], k.shape[2], v.shape[3]
    cfg, bd, bdv = _tiles(d, dv, getattr(torch, q.dtype), block_q, block_k, tiles,
                          "accurate" if p_split else "default", interpret, band, engine, nk,
                          _query_count(nq, dense, sparse))
    t = cfg.fwd
    lse = Layout.dense("float32", (B, Hq, nq))
    num, idx = sparse if sparse else (lse, lse)
    sp = _sparse_strides(num, idx) if sparse else (0,) * 6
    # pointers: Q, K, V, O, ORes (O when not written), LSE, Mask (Q when none), the four sparse lists
    pointers = (_ptr(q), _ptr(k), _ptr(v), _ptr(o), _ptr(o), _ptr(lse), _ptr(dense or q),
                _ptr(num), _ptr(idx), _ptr(num), _ptr(idx))
    ints = (nq, nk, Hq, off_lo, off_hi, *_strides3(q), *_strides3(k), *_strides3(v), *_strides3(o),
            *_mask_strides(dense), *sp)
    constexprs = (("GROUP", Hq // Hkv), ("HEAD_D", d), ("HEAD_DV", dv), ("BLOCK_D", bd), ("BLOCK_DV", bdv),
                  ("BLOCK_M", t.block_m), ("BLOCK_N", t.block_n), ("BAND", band),
                  ("HAS_MASK", dense is not None), ("SPARSE", bool(sparse)), ("DOT_PRECISION", dot),
                  ("P_SPLIT", p_split), ("WRITE_RES", save_res),
                  ("KV_DESC", t.kv_desc and _descriptor_ok(k) and _descriptor_ok(v)),
                  ("WARP_SPEC", t.warp_specialize), ("PIPE_QK", t.pipeline_qk),
                  ("HEAVY_FIRST", t.heavy_first and band))
    return Launch("attn_fwd_kernel", (triton.cdiv(nq, t.block_m), B * Hq), pointers, ints, constexprs,
                  t.num_warps, t.num_stages)


def backward_launches(q: Layout, k: Layout, v: Layout, o: Layout, do: Layout, grads: tuple, has_res: bool,
                      dense: Layout | None, sparse: tuple | None, *, band: bool, off_lo: int, off_hi: int,
                      block_q: int, block_k: int, dot: str, tiles: list[int],
                      interpret: bool | None = None) -> tuple[Launch, Launch, Launch]:
    """The backward's launches: Δ (preprocess), dK/dV, dQ. `grads`: the Layouts of dQ, dK, dV;
    `sparse`: the Layouts of the (num, idx, q_num, q_idx) lists or None."""
    return _backward_launches(q, k, v, o, do, grads, has_res, dense, sparse, band, off_lo, off_hi, block_q,
                              block_k, dot, tuple(tiles), _interpreting() if interpret is None else interpret)


@functools.lru_cache(maxsize=1024)
def _backward_launches(q, k, v, o, do, grads, has_res, dense, sparse, band, off_lo, off_hi, block_q, block_k, dot,
                       tiles: tuple, interpret: bool) -> tuple[Launch, Launch, Launch]:
    B, Hq, nq, d = q.shape
    Hkv, nk, dv = k.shape[1], k.shape[2], v.shape[3]
    cfg, bd, bdv = _tiles(d, dv, getattr(torch, q.dtype), block_q, block_k, tiles, interpret=interpret, band=band,
                          n_keys=nk, n_queries=_query_count(nq, dense, sparse))
    lse = delta = Layout.dense("float32", (B, Hq, nq))
    dq, dk, dv_ = grads
    pre_m = 16 if interpret else 64
    pre = Launch("attn_bwd_preprocess_kernel", (triton.cdiv(nq, pre_m), B * Hq),
                 (_ptr(o), _ptr(o), _ptr(do), _ptr(delta)),
                 (nq, Hq, *_strides3(o), *_strides3(do)),
                 (("HEAD_DV", dv), ("BLOCK_DV", bdv), ("BLOCK_M", pre_m), ("HAS_RES", has_res)))
    num, idx, qnum, qidx = sparse if sparse else (lse,) * 4
    sp_kv, sp_q = (_sparse_strides(num, idx), _sparse_strides(qnum, qidx)) if sparse else ((0,) * 6,) * 2
    ms = _mask_strides(dense)
    common = (("GROUP", Hq // Hkv), ("HEAD_D", d), ("HEAD_DV", dv), ("BLOCK_D", bd), ("BLOCK_DV", bdv))
    flags = (("BAND", band), ("HAS_MASK", dense is not None), ("SPARSE", bool(sparse)), ("DOT_PRECISION", dot))
    inputs = (_ptr(q), _ptr(k), _ptr(v), _ptr(do), _ptr(lse), _ptr(delta))
    t = cfg.dkdv
    dkdv = Launch("attn_bwd_dkdv_kernel", (triton.cdiv(nk, t.block_n), B * Hkv),
                  inputs + (_ptr(dk), _ptr(dv_), _ptr(dense or q), _ptr(qnum), _ptr(qidx), _ptr(qnum), _ptr(qidx)),
                  (nq, nk, Hkv, off_lo, off_hi, *_strides3(q), *_strides3(k), *_strides3(v), *_strides3(do),
                   *_strides3(dk), *_strides3(dv_), *ms, *sp_q),
                  common + (("BLOCK_M", t.block_m), ("BLOCK_N", t.block_n)) + flags, t.num_warps, t.num_stages)
    t = cfg.dq
    dq_ = Launch("attn_bwd_dq_kernel", (triton.cdiv(nq, t.block_m), B * Hq),
                 inputs + (_ptr(dq), _ptr(dense or q), _ptr(num), _ptr(idx), _ptr(num), _ptr(idx)),
                 (nq, nk, Hq, off_lo, off_hi, *_strides3(q), *_strides3(k), *_strides3(v), *_strides3(do),
                  *_strides3(dq), *ms, *sp_kv),
                 common + (("BLOCK_M", t.block_m), ("BLOCK_N", t.block_n)) + flags
                 + (("HEAVY_FIRST", t.heavy_first and band),), t.num_warps, t.num_stages)
    return pre, dkdv, dq_


def launches(q: Layout, k: Layout, v: Layout, *, causal=False, window=None, mask_shape: tuple | None = None,
             grad: bool = False, dot_precision=None, precision="default", delta_from="fp32",
             interpret: bool | None = None, gluon: bool = False) -> tuple[Launch, ...]:
    """The launches `attention(q, k, v, causal=, window=, mask=<bool tensor of mask_shape, contiguous>,
    dot_precision=, precision=, delta_from=)` makes for tensors laid out as `q`, `k`, `v` (Layouts; the
    last dim contiguous), and, with `grad`, those of its backward (dO of O's shape, contiguous): what a
    call compiles. No tensor, no GPU. `gluon`: the call runs on an sm_90 device (`gluon_device()`), where the
    Gluon kernels run the calls their tiles ask for and their domain holds: their records then; else (another
    GPU) triton_fwd's and triton_bwd's with the same tiles."""
    q, k, v = (t if t.strides[-1] == 1 else Layout.dense(t.dtype, t.shape) for t in (q, k, v))
    B, Hq, nq, d = q.shape
    nk, dv = k.shape[2], v.shape[3]
    dtype = getattr(torch, q.dtype)
    dot, p_split, save_res = _modes(dtype, dot_precision, precision, delta_from, grad)
    band, off_lo, off_hi = _band(causal, window, nq, nk)
    dense = None
    if mask_shape is not None:
        dense = Layout.dense("int8", (1,) * (4 - len(mask_shape)) + tuple(mask_shape))
    o = Layout.dense(q.dtype, (B, Hq, nq, dv))
    if B * Hq * nq * dv == 0:
        return ()
    interpret = _interpreting() if interpret is None else interpret
    kw = dict(band=band, off_lo=off_lo, off_hi=off_hi, block_q=0, block_k=0, dot=dot, tiles=[],
              interpret=interpret)
    engine = forward_engine()
    # as _fwd_impl and _bwd_impl choose (the default scale is positive: gluon_fwd's raw-logit max holds)
    compiled = gluon and not interpret  # the Gluon kernels compile (not in the interpreter)
    n_queries = _query_count(nq, dense, None)
    asked = compiled and _gluon_asked(engine, max(d, dv), nk, band, n_queries)
    g_fwd = (_gluon_forward(q, k, v, dense is not None, False, band, p_split, (), False, engine)
             if compiled and _gluon_asked(engine, max(d, dv), nk, band, n_queries, forward=True) else None)
    out = ((_gluon_launch(q, k, band, off_lo, off_hi, save_res, g_fwd) if g_fwd is not None else
            forward_launch(q, k, v, o, dense, None, p_split=p_split, save_res=save_res, **kw)),)
    if grad and B * Hq * nq * d and k.shape[0] * k.shape[1] * nk * d:
        grads = (q.like(), k.like(), v.like())
        pre, dkdv, dq = backward_launches(q, k, v, o, o, grads, save_res, dense, None, **kw)
        group = Hq // k.shape[1]
        fused = asked and dense is None and _fused_dkdv(d, dv, dtype, nq, nk, (), engine, group, band, off_lo, off_hi)
        if fused:
            # the fused backward (on TMA-readable copies where these layouts are not: `_fused_backward`)
            return out + (pre, _gluon_fused_launch(Layout.dense(q.dtype, q.shape), Layout.dense(k.dtype, k.shape),
                                                   band, off_lo, off_hi, fused))
        if asked:
            g_dkdv, g_dq = _gluon_backward(q, k, v, o, *grads, dense is not None, False, band, (), False, engine)
            dkdv = dkdv if g_dkdv is None else _gluon_dkdv_launch(q, k, band, off_lo, off_hi, g_dkdv)
            dq = dq if g_dq is None else _gluon_dq_launch(q, k, band, off_lo, off_hi, g_dq)
        out += (pre, dkdv, dq)
    return out


def gluon_device() -> bool:
    """Whether this process's CUDA device runs the Gluon kernels (capability 9.0): `launches(gluon=)`."""
    return torch.cuda.is_available() and _gluon_device(torch.device("cuda", torch.cuda.current_device()))


# --------------------------------------------------------------------------- launches

def _fwd_impl(q, k, v, dense, sparse, scale, band, off_lo, off_hi, block_q, block_k, dot,
              p_split, save_res, tiles):
    B, Hq, nq, _ = q.shape
    dv = v.shape[3]
    o = torch.empty((B, Hq, nq, dv), dtype=q.dtype, device=q.device)
    # O_res shares O's layout (the kernels index both with O's strides); empty when not asked for.
    o_res = torch.empty_like(o) if save_res else o.new_empty((0,))
    lse = torch.empty((B, Hq, nq), dtype=torch.float32, device=q.device)
    if o.numel() == 0:
        return o, lse.fill_(float("-inf")), o_res
    # gluon_fwd where the tiles ask for it (the flag of the forward's TileConfig, flat() index _GLUON_AT; or,
    # without tiles, the engine kernel_config gives) and the call is in its domain; looked up only then (host time)
    engine = forward_engine()
    asked = (bool(tiles[_GLUON_AT]) if tiles
             else _gluon_asked(engine, max(q.shape[3], v.shape[3]), k.shape[2], band,
                               _query_count(q.shape[2], dense, sparse), forward=True))
    lq, lk = (Layout.of(q), Layout.of(k)) if asked else (None, None)
    gluon = (_gluon_forward(lq, lk, Layout.of(v), dense is not None, bool(sparse), band, p_split, tuple(tiles),
                            _interpreting(), engine) if asked else None)
    # scale > 0: gluon_fwd takes each full tile's running max from the raw logits, rowmax(S) · c (c = scale · log2 e)
    if gluon is not None and scale > 0 and _gluon_device(q.device):
        from flashcheck.kernels import gluon_fwd

        # the SM count of q's device (a PERSISTENT grid's size), in the cache key
        launch = _gluon_launch(lq, lk, band, off_lo, off_hi, save_res, gluon, sms=_tensor_sms(q))
        half = gluon.block_m // 2
        o_desc = gluon_fwd.descriptor(o, half)
        _launch(gluon_fwd.attn_fwd_gluon_kernel, launch, gluon_fwd.descriptor(q, half),
                gluon_fwd.descriptor(k, gluon.block_n), gluon_fwd.descriptor(v, gluon.block_n), o_desc,
                gluon_fwd.descriptor(o_res, half) if save_res else o_desc, lse, scale)
        return o, lse, o_res
    launch = forward_launch(
        Layout.of(q), Layout.of(k), Layout.of(v), Layout.of(o), None if dense is None else Layout.of(dense),
        (Layout.of(sparse[0]), Layout.of(sparse[1])) if sparse else None, band=band, off_lo=off_lo,
        off_hi=off_hi, block_q=block_q, block_k=block_k, dot=dot, p_split=p_split, save_res=save_res,
        tiles=tiles)
    if dict(launch.constexprs)["KV_DESC"]:
        _use_descriptor_allocator()
    mask_t = dense if dense is not None else q
    num, idx, fnum, fidx = sparse[:4] if sparse else (lse,) * 4
    _launch(attn_fwd_kernel, launch, q, k, v, o, o_res if save_res else o, lse, mask_t, num, idx, fnum, fidx,
            scale, fitting=True)
    return o, lse, o_res


@functools.lru_cache(maxsize=1024)
def _gluon_forward(q: Layout, k: Layout, v: Layout, has_dense: bool, sparse: bool, band: bool, p_split: bool,
                   tiles: tuple, interpret: bool, engine: str) -> TileConfig | None:
    """The forward's tiles when gluon_fwd runs this call, else None (triton_fwd runs it with the same tiles): tiles
    asking for it (TileConfig.gluon), in its domain: fp16 / bf16, d = dv in {64, 128}, no dense or block-sparse
    mask, no P split, at least one key (a TMA box needs a row: N_k = 0 is triton_fwd's, every row O = 0, LSE = −inf),
    and every tensor a TMA source (16-byte aligned base, positive batch, head and row strides in 16-byte multiples,
    the last dim contiguous). The device (capability 9.0) is checked by `_gluon_device`."""
    if interpret or has_dense or sparse or p_split or k.shape[2] == 0:
        return None
    cfg, _, _ = _tiles(q.shape[3], v.shape[3], getattr(torch, q.dtype), 0, 0, list(tiles), interpret=False, band=band,
                       engine=engine, n_keys=k.shape[2], n_queries=q.shape[2])  # (unmasked: has_dense, sparse out)
    t = cfg.fwd
    return t if t.gluon and (t.block_m, t.block_n) == (128, 128) and _gluon_tensors(q, k, v) else None


def _gluon_tensors(q: Layout, *rest: Layout) -> bool:
    """Tensors gluon_fwd / gluon_bwd read and write: fp16 / bf16 alike, head dims d = dv in {64, 128}, each a TMA
    source (16-byte aligned base, positive batch, head and row strides in 16-byte multiples, the last dim
    contiguous)."""
    d = q.shape[3]
    return (q.dtype in ("float16", "bfloat16") and d in (64, 128)
            and all(x.dtype == q.dtype and x.shape[3] == d for x in rest)
            and all(_descriptor_ok(x) and x.strides[3] == 1 and all(s > 0 for s in x.strides[:3])
                    for x in (q, *rest)))


@functools.lru_cache(maxsize=1024)
def _gluon_backward(q: Layout, k: Layout, v: Layout, do: Layout, dq: Layout, dk: Layout, dv: Layout, has_dense: bool,
                    sparse: bool, band: bool, tiles: tuple, interpret: bool,
                    engine: str) -> tuple[TileConfig | None, TileConfig | None]:
    """The (dK/dV, dQ) kernels' tiles where gluon_bwd runs them for this backward, None where triton_bwd does (with
    the same tiles): tiles asking for it (TileConfig.gluon), no dense or block-sparse mask, every tensor in
    `_gluon_tensors`' domain."""
    if interpret or has_dense or sparse or not _gluon_tensors(q, k, v, do, dq, dk, dv):
        return None, None
    cfg, _, _ = _tiles(q.shape[3], v.shape[3], getattr(torch, q.dtype), 0, 0, list(tiles), interpret=False,
                       band=band, engine=engine, n_keys=k.shape[2], n_queries=q.shape[2])
    a, b = cfg.dkdv, cfg.dq
    if b.fused and (band or not fused_tiles(cfg, q.shape[3], q.dtype)):
        b = replace(b, fused=False)  # the dQ kernel with these tiles (the Precision's for_call says the same)
    return (a if a.gluon and a.block_n == 128 and a.block_m in (32, 64, 128) else None,
            b if b.gluon and b.block_m == 128 and b.block_n in (64, 128) else None)


def fused_tiles(cfg: KernelConfig, head_dim: int, dtype) -> bool:
    """Whether tiles `cfg` run the fused backward (gluon_bwd_fused) on the unmasked calls of this head dim (unbanded,
    or under a band it takes) and dtype (fp16 / bf16 names or torch dtypes): a fused dQ tile of 128 x 128 over
    gluon_bwd's d = 64 dK/dV tile (128 x 128, two warpgroups), at head dim 64. `arithmetic` states the same
    (Arithmetic.fused_dq_keys)."""
    name = _DTYPES.get(dtype, dtype)
    return (cfg.dq.fused and (cfg.dq.block_m, cfg.dq.block_n) == (128, 128) and cfg.dkdv.gluon
            and (cfg.dkdv.block_m, cfg.dkdv.block_n) == (128, 128) and head_dim == 64
            and name in ("float16", "bfloat16"))


@functools.lru_cache(maxsize=1024)
def _gluon_dkdv_launch(q: Layout, k: Layout, band: bool, off_lo: int, off_hi: int, t: TileConfig) -> Launch:
    """gluon_bwd's dK/dV launch: eight TMA descriptors (Q's and dO's of block_m-row boxes, K's, V's, dK's and dV's of
    64 rows, LSE's and Delta's of block_m per-row values: gluon_bwd.rows_descriptor) as its leading "pointers", then
    sm_scale."""
    B, Hq, nq, d = q.shape
    Hkv, nk = k.shape[1], k.shape[2]
    return Launch("attn_bwd_dkdv_gluon_kernel", (triton.cdiv(nk, t.block_n), B * Hkv),
                  ((q.dtype, True),) * 6 + (("float32", True),) * 2, (nq, nk, Hkv, off_lo, off_hi),
                  (("GROUP", Hq // Hkv), ("HEAD_D", d), ("BLOCK_M", t.block_m), ("BLOCK_N", t.block_n),
                   ("STAGES", t.num_stages), ("BAND", band)), 4, None)


@functools.lru_cache(maxsize=1024)
def _gluon_dq_launch(q: Layout, k: Layout, band: bool, off_lo: int, off_hi: int, t: TileConfig) -> Launch:
    """gluon_bwd's dQ launch: five TMA descriptors (Q's, dO's and dQ's of 64-row boxes, K's and V's of block_n rows)
    as its leading "pointers", then LSE, Delta, sm_scale."""
    B, Hq, nq, d = q.shape
    lse = Layout.dense("float32", (B, Hq, nq))
    return Launch("attn_bwd_dq_gluon_kernel", (triton.cdiv(nq, t.block_m), B * Hq),
                  ((q.dtype, True),) * 5 + (_ptr(lse), _ptr(lse)), (nq, k.shape[2], Hq, off_lo, off_hi),
                  (("GROUP", Hq // k.shape[1]), ("HEAD_D", d), ("BLOCK_M", t.block_m), ("BLOCK_N", t.block_n),
                   ("STAGES", t.num_stages), ("BAND", band), ("HEAVY_FIRST", t.heavy_first and band)), 4, None)


@functools.lru_cache(maxsize=1024)
def _gluon_launch(q: Layout, k: Layout, band: bool, off_lo: int, off_hi: int, save_res: bool,
                  t: TileConfig, paired: bool | None = None, wide: bool | None = None,
                  persistent: bool | None = None, sms: int | None = None) -> Launch:
    """gluon_fwd's launch (`_gluon_forward` said it runs the call): five TMA descriptors (q's, O's and O_res's of
    64-row boxes, k's and v's of block_n rows; the binary depends on their dtype, box and layout, set by the dtype,
    HEAD_D and the tiles) as its leading "pointers", then LSE, sm_scale. paired: two query blocks a program or one
    (None: `_gluon_paired`'s rule; a value: bench/fwd_variants.py's side-by-side runs); wide: three consumer
    warpgroups a program or two (None: `_gluon_wide`'s rule; a value: likewise); persistent: at most `sms` programs
    (None: the current device's multiprocessors), each looping over query blocks (None: `_gluon_persistent`'s rule;
    any program count computes every block)."""
    B, Hq, nq, d = q.shape
    lse = Layout.dense("float32", (B, Hq, nq))
    pointers = ((q.dtype, True),) * 5 + (_ptr(lse),)
    ints = (nq, k.shape[2], Hq, off_lo, off_hi, B * Hq)
    n_blocks = triton.cdiv(nq, t.block_m)
    # PERSISTENT programs hold one block of the tile's rows at a time: neither paired nor wide
    if persistent is None or persistent:
        sms = _launch_sms(sms)
    if persistent is None:
        persistent = _gluon_persistent(nq, k.shape[2], band, off_lo, off_hi, B * Hq, sms)
    paired = not persistent and (_gluon_paired(n_blocks, k.shape[2]) if paired is None else paired)
    # the program's query rows: the tile's, or under WIDE three consumer warpgroups' (t.block_m is two's)
    wide = not persistent and (_gluon_wide(d, nq, k.shape[2], band, paired) if wide is None else wide)
    block_m = 3 * t.block_m // 2 if wide else t.block_m
    n_blocks = triton.cdiv(nq, block_m)
    constexprs = (("GROUP", Hq // k.shape[1]), ("HEAD_D", d), ("BLOCK_M", block_m), ("BLOCK_N", t.block_n),
                  ("STAGES", t.num_stages), ("BAND", band), ("WRITE_RES", save_res),
                  ("HEAVY_FIRST", t.heavy_first and band and not persistent), ("PAIRED", paired),
                  ("PERSISTENT", persistent))
    if persistent:
        grid = (min(n_blocks * B * Hq, sms), 1)
    else:
        grid = (triton.cdiv(n_blocks, 2) if paired else n_blocks, B * Hq)
    return Launch("attn_fwd_gluon_kernel", grid, pointers, ints, constexprs, 4, None)


def _gluon_persistent(n_queries: int, n_keys: int, band: bool, off_lo: int, off_hi: int, heads: int,
                      programs: int) -> bool:
    """Whether gluon_fwd runs this call PERSISTENT (at most `programs` programs, each looping over query blocks of
    `heads` batch x head pairs: items pid, pid + G, ...; gluon_fwd.item_w, item_block): unbanded calls with at most
    PERSIST_KEYS keys; banded ones with at most BAND_PERSIST_KEYS keys and a static imbalance
    (`_persistent_imbalance`) of at most PERSIST_IMBALANCE. Which program computes a block changes nothing in a row's
    arithmetic (O and LSE bit for bit)."""
    if not band:
        return n_keys <= PERSIST_KEYS
    return (n_keys <= BAND_PERSIST_KEYS
            and _persistent_imbalance(n_queries, n_keys, off_lo, off_hi, heads, programs) <= PERSIST_IMBALANCE)


@functools.lru_cache(maxsize=1024)
def _persistent_imbalance(n_queries: int, n_keys: int, off_lo: int, off_hi: int, heads: int, programs: int,
                          block_m: int = 128, block_n: int = 128) -> float:
    """The banded PERSISTENT build's static schedule: the most key tiles a program runs over the least the busiest
    program could run (the mean over the programs, or the heaviest block; 1: as even as any order). Its order is
    gluon_fwd.item_w's and item_block's: program p of G runs items i G + p (odd rounds i G + G − 1 − p), item w being
    block n − 1 − w % n of pair w // n (n blocks a head); a block's key tiles are kernels/tiles.py `_band_range`'s."""
    n = triton.cdiv(n_queries, block_m)
    tiles = [_key_tiles(b * block_m, min(b * block_m + block_m, n_queries), n_keys, off_lo, off_hi, block_n)
             for b in range(n)]
    items = n * heads
    g = min(items, programs)
    w = torch.arange(triton.cdiv(items, g) * g).view(-1, g)  # round i, program p: w = i G + p
    w[1::2] = w[1::2].flip(1)  # odd rounds: i G + G − 1 − p
    load = torch.tensor(tiles)[n - 1 - w % n].masked_fill(w >= items, 0).sum(0)
    least = max(sum(tiles) * heads / g, max(tiles))
    return float(load.max()) / least if least else 1.0


def _key_tiles(a0: int, a1: int, n_keys: int, off_lo: int, off_hi: int, block_n: int) -> int:
    """The key tiles query rows [a0, a1) visit under a band (key j visible from query i iff i + off_lo <= j <= i +
    off_hi): kernels/tiles.py `_band_range`'s hi − lo over block_n."""
    lo = max(a0 + off_lo, 0) // block_n * block_n
    hi = triton.cdiv(min(max(a1 + off_hi, 0), n_keys), block_n) * block_n
    return max(hi - lo, 0) // block_n


@functools.lru_cache(maxsize=None)
def _sm_count(device: int) -> int:
    """The multiprocessors of CUDA device `device` (a PERSISTENT launch's most programs)."""
    return torch.cuda.get_device_properties(device).multi_processor_count


def _tensor_sms(x: torch.Tensor) -> int | None:
    """The SM count of x's device for a launch record's key (not the first device's); None for a CPU tensor (a test
    standing in for sm_90: the launch's own default, `_launch_sms`, as launches() predicts)."""
    return _sm_count(x.device.index) if x.is_cuda else None


def _launch_sms(sms: int | None) -> int:
    """sms, or the current CUDA device's multiprocessors, or (no CUDA) an sm_90 part's."""
    return sms or (_sm_count(torch.cuda.current_device()) if torch.cuda.is_available() else SM90_MULTIPROCESSORS)


def _gluon_paired(n_blocks: int, n_keys: int) -> bool:
    """Whether gluon_fwd's programs run two query blocks each (PAIRED: block n_blocks − 1 − p, then p; the second's
    loads under the first's last tiles and epilogue) for a call of n_blocks query blocks a head and n_keys keys.
    Which program computes a block changes nothing in a row's arithmetic (O and LSE bit for bit); under a band (causal,
    window) the pair is gluon_fwd._consumer_band_pair's, one loop of each kind."""
    return n_blocks > 1 and n_keys <= PAIR_KEYS


def _gluon_wide(head_dim: int, n_queries: int, n_keys: int, band: bool, paired: bool) -> bool:
    """Whether gluon_fwd's programs run three consumer warpgroups (WIDE: 192 query rows a program, each K / V tile
    read once for them) on this call. Unbanded, a row's key tiles and their order do not depend on the rows a program
    holds (the ragged last key tile is every block's one partial tile; the bounds read Precision.block_q_fwd only for
    masked rows: proofs/bounds/forward.py _query_block_orders), so O and LSE are bit for bit the two warpgroups'."""
    return (head_dim == 64 and not band and not paired and n_queries >= WIDE_ROWS and n_keys >= WIDE_ROWS
            and triton.__version__.startswith(WIDE_TRITONS))


@functools.lru_cache(maxsize=None)
def _gluon_device(device: torch.device) -> bool:
    """Whether gluon_fwd runs on this device: CUDA capability 9.0 (its wgmma, TMA and setmaxnreg are sm_90a's)."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device) == (9, 0)


def _launch(kernel, launch: Launch, *leading, fitting: bool = False):
    """`launch` of `kernel` with these leading (pointer, float) arguments; `fitting`: through
    `_launch_fitting` (the forward). A launch record seen before on this device goes straight to the binary
    Triton compiled for it (`_direct`); the first goes through Triton's JIT, which compiles or finds it."""
    direct = _direct_device(kernel)
    if direct is not None:
        binary = _BINARIES.get((launch, direct))
        if binary is not None:
            try:
                return _direct(binary, launch, direct, leading)
            except TypeError:  # a launcher that takes its arguments otherwise: the JIT from now on (checked
                _BINARIES.clear()  # before anything launches: the launcher parses its arguments first)
                _DIRECT_OFF.append(True)
    kwargs = dict(launch.constexprs)
    if launch.num_warps is not None:
        kwargs["num_warps"] = launch.num_warps
    if fitting:
        binary = _launch_fitting(kernel, launch.grid, launch.num_stages, *leading, *launch.ints, **kwargs)
    else:
        if launch.num_stages is not None:
            kwargs["num_stages"] = launch.num_stages
        binary = kernel[launch.grid](*leading, *launch.ints, **kwargs)
    if direct is not None and _launchable(binary) and _arguments_in_order(kernel, launch, len(leading)):
        if len(_BINARIES) >= _MAX_BINARIES:  # every distinct N is a record of its own: bounded, not an LRU
            _BINARIES.clear()
        _BINARIES[(launch, direct)] = binary
    return binary


# --------------------------------------------------------------------------- direct launches
#
# Triton's JIT spends tens of microseconds of host time per launch binding and specializing ~55 arguments to find
# the binary (bench/host_profile.py: 38-58 us per launch on the H100 host, four launches per forward + backward),
# longer than a short kernel runs. The binary Triton picks is a function of what a `Launch` records: constexprs,
# num_warps/num_stages, each pointer's dtype and 16-byte alignment, and each integer's value (Triton keys on
# == 1, divisibility by 16 and 32/64-bit width; the record has the values themselves). So the binary a launch
# record got once is the binary it gets again, and later calls hand the arguments straight to its launcher,
# as Triton's JIT does after its lookup (launch hooks included). Only where the compiled kernel has the launcher
# interface of Triton 3.6-3.9; otherwise every call goes through the JIT.

_BINARIES: dict = {}  # (Launch, device index) -> the compiled kernel Triton launched for it
_MAX_BINARIES = 4096  # records kept (a few hundred bytes each; Triton's own cache keeps the binaries)
_DIRECT_OFF: list = []  # non-empty once a launcher refused the direct arguments
_RUNTIME = getattr(getattr(triton, "knobs", None), "runtime", None)  # the launch hooks (Triton >= 3.4)


def _direct_device(kernel):
    """The current CUDA device index when launches of `kernel` may go direct, else None."""
    if _DIRECT_OFF or _interpreting() or not hasattr(kernel, "arg_names") or _RUNTIME is None:
        return None
    return triton.runtime.driver.active.get_current_device()


def _launchable(binary) -> bool:
    return all(hasattr(binary, name) for name in ("run", "function", "packed_metadata", "launch_metadata"))


def _arguments_in_order(kernel, launch: Launch, n_leading: int) -> bool:
    """Whether the kernel's parameters are the leading arguments, then `launch.ints`, then its constexprs in the
    record's order: the positional list a launcher takes."""
    names, n = list(kernel.arg_names), n_leading + len(launch.ints)  # (asked once per new record)
    return len(names) >= n and names[n:] == [name for name, _ in launch.constexprs]


def _direct(binary, launch: Launch, device: int, leading: tuple):
    """What Triton's JIT does once it has found the binary: launch metadata and hooks included (a profiler's launch
    hooks still see every launch)."""
    grid = tuple(launch.grid) + (1,) * (3 - len(launch.grid))
    stream = triton.runtime.driver.active.get_current_stream(device)
    args = (*leading, *launch.ints, *(value for _, value in launch.constexprs))
    binary.run(*grid, stream, binary.function, binary.packed_metadata, binary.launch_metadata(grid, stream, *args),
               _RUNTIME.launch_enter_hook, _RUNTIME.launch_exit_hook, *args)
    return binary


def _launch_fitting(kernel, grid, num_stages: int, *args, **kwargs):
    """kernel[grid](*args, **kwargs, num_stages=...), with one pipeline stage fewer while the compiled
    variant needs more shared memory than the GPU has (Triton raises OutOfResources before anything
    runs). The tiles are sized for the plain variant; a dense mask or block-sparse lists add buffers
    per stage. Fewer stages only prefetch fewer tiles: the arithmetic is the same."""
    while True:
        try:
            return kernel[grid](*args, **kwargs, num_stages=num_stages)
        except OutOfResources:
            if num_stages <= 1:
                raise
            num_stages -= 1


_allocator_set = False


def _use_descriptor_allocator() -> None:
    """Device-side descriptors (tl.make_tensor_descriptor) need global scratch memory from the
    allocator Triton is given (set once per process; torch's caching allocator)."""
    global _allocator_set
    if not _allocator_set:
        def alloc(size: int, alignment: int, stream):
            return torch.empty(size, dtype=torch.int8,
                               device="cpu" if _interpreting() else "cuda")
        triton.set_allocator(alloc)
        _allocator_set = True


def _per_row(t: torch.Tensor) -> torch.Tensor:
    """A (B, H, N) fp32 tensor of per-row values (LSE, Delta) as the (B·H, N) matrix gluon_bwd's TMA reads: a view
    when its rows are contiguous and start 16 bytes apart, else a copy into rows padded to 4 values."""
    B, H, n = t.shape
    if t.is_contiguous() and n % 4 == 0:
        return t.view(B * H, n)
    padded = torch.empty((B * H, -(-n // 4) * 4), dtype=t.dtype, device=t.device)[:, :n]
    return padded.copy_(t.reshape(B * H, n))


def _bwd_impl(q, k, v, o, o_res, lse, do, dlse, dense, sparse, scale, band, off_lo, off_hi,
              block_q, block_k, dot, tiles):
    B, Hq, nq, _ = q.shape
    do = do if do.stride(-1) == 1 else do.contiguous()
    dq = torch.empty_like(q)
    dk = torch.empty_like(k)
    dv_ = torch.empty_like(v)
    if q.numel() == 0 or k.numel() == 0:
        return dq.zero_(), dk.zero_(), dv_.zero_()
    has_res = o_res is not None and o_res.numel() > 0
    pre, dkdv, dq_launch = backward_launches(
        Layout.of(q), Layout.of(k), Layout.of(v), Layout.of(o), Layout.of(do),
        (Layout.of(dq), Layout.of(dk), Layout.of(dv_)), has_res,
        None if dense is None else Layout.of(dense),
        tuple(Layout.of(t) for t in (sparse[0], sparse[1], sparse[4], sparse[5])) if sparse else None,
        band=band, off_lo=off_lo, off_hi=off_hi, block_q=block_q, block_k=block_k, dot=dot, tiles=tiles)
    delta = torch.empty((B, Hq, nq), dtype=torch.float32, device=q.device)
    _launch(attn_bwd_preprocess_kernel, pre, o, o_res if has_res else o, do, delta)
    if dlse is not None:
        # LSE's own gradient: ∂LSE_i/∂S_ij = P_ij, so dS = P ∘ (dP − (Δ − dLSE)).
        delta = delta - dlse.to(torch.float32)
    mask_t = dense if dense is not None else q
    num, idx, fnum, fidx, qnum, qidx, fqnum, fqidx = sparse if sparse else (lse,) * 8
    # gluon_bwd's kernels where their tiles ask for it (the dkdv and dq TileConfigs' flags in flat(); or, without
    # tiles, the engine kernel_config gives) and the backward is in their domain; looked up only then (host time)
    engine = forward_engine()
    asked = (bool(tiles[_TILE_FIELDS + _GLUON_AT] or tiles[2 * _TILE_FIELDS + _GLUON_AT]) if tiles
             else _gluon_asked(engine, max(q.shape[3], v.shape[3]), k.shape[2], band,
                               _query_count(q.shape[2], dense, sparse)))
    g_dkdv, g_dq = None, None
    fused = asked and _fused_call(q, k, v, dense, sparse, band, off_lo, off_hi, tuple(tiles), engine)
    if fused:
        # the fused backward's sum is what the Precision states for this call: it runs, on TMA-readable copies of
        # the inputs where a stride or base is not (never triton_bwd's dQ loop, another sum)
        return _fused_backward(q, k, v, do, lse, delta, scale, band, off_lo, off_hi, fused, dq, dk, dv_)
    if asked and _gluon_device(q.device):
        lays = tuple(Layout.of(t) for t in (q, k, v, do, dq, dk, dv_))
        g_dkdv, g_dq = _gluon_backward(*lays, dense is not None, bool(sparse), band, tuple(tiles), _interpreting(),
                                       engine)
    if g_dkdv is not None or g_dq is not None:
        from flashcheck.kernels import gluon_bwd, gluon_fwd
    if g_dkdv is not None:
        launch = _gluon_dkdv_launch(lays[0], lays[1], band, off_lo, off_hi, g_dkdv)
        half = g_dkdv.block_n // 2
        _launch(gluon_bwd.attn_bwd_dkdv_gluon_kernel, launch, gluon_fwd.descriptor(q, g_dkdv.block_m),
                gluon_fwd.descriptor(k, half), gluon_fwd.descriptor(v, half), gluon_fwd.descriptor(do, g_dkdv.block_m),
                gluon_fwd.descriptor(dk, half), gluon_fwd.descriptor(dv_, half),
                gluon_bwd.rows_descriptor(_per_row(lse), g_dkdv.block_m),
                gluon_bwd.rows_descriptor(_per_row(delta), g_dkdv.block_m), scale)
    else:
        _launch(attn_bwd_dkdv_kernel, dkdv, q, k, v, do, lse, delta, dk, dv_, mask_t, qnum, qidx, fqnum, fqidx,
                scale)
    if g_dq is not None:
        launch = _gluon_dq_launch(lays[0], lays[1], band, off_lo, off_hi, g_dq)
        half = g_dq.block_m // 2
        _launch(gluon_bwd.attn_bwd_dq_gluon_kernel, launch, gluon_fwd.descriptor(q, half),
                gluon_fwd.descriptor(k, g_dq.block_n), gluon_fwd.descriptor(v, g_dq.block_n),
                gluon_fwd.descriptor(do, half), gluon_fwd.descriptor(dq, half), lse, delta, scale)
    else:
        _launch(attn_bwd_dq_kernel, dq_launch, q, k, v, do, lse, delta, dq, mask_t, num, idx, fnum, fidx, scale)
    return dq, dk, dv_


def _fused_call(q, k, v, dense, sparse, band: bool, off_lo: int, off_hi: int, tiles: tuple,
                engine: str) -> TileConfig | None:
    """The dK/dV tile of the fused kernel (gluon_bwd_fused) where this backward runs it, else None: its tiles (given,
    or kernel_config's for this call) fused (`fused_tiles`), unbanded or a band it takes (`_fused_band`),
    no dense or block-sparse mask, not in the interpreter; on a device that is not sm_90 such tiles are refused
    (ValueError), since triton_bwd's dQ loop is another sum than the one they state."""
    if dense is not None or sparse or _interpreting():
        return None
    t = _fused_dkdv(q.shape[3], v.shape[3], q.dtype, q.shape[2], k.shape[2], tiles, engine, q.shape[1] // k.shape[1],
                    band, off_lo, off_hi)
    if t is None:
        return None
    if not _gluon_device(q.device):
        raise ValueError("tiles: a fused dQ tile (TileConfig.fused) runs on an sm_90 device only (gluon_bwd_fused), "
                         f"got a {q.device} tensor")
    return t


def _fused_band(band: bool, off_lo: int, off_hi: int, nq: int, nk: int) -> bool:
    """Whether a band (`_band`'s offsets) is one the fused backward takes: no left edge inside the problem (every query
    row i sees key 0 or no key: i + off_lo <= 0 for i <= N_q − 1; the descending order's waits then follow the band)
    and every key seen by some row (the last row sees the last key; a key tile that sees no row would visit a rounded
    query tile without a turn in its order: band_tile_turn). Causal calls with N_k <= N_q, windows without a left
    side whose right one reaches the last key. proofs' Precision.for_call decides by the same (precision.fused_band)."""
    return band and off_lo <= 1 - nq and nq - 1 + off_hi >= nk - 1


@functools.lru_cache(maxsize=1024)
def _fused_dkdv(d: int, dv: int, dtype, nq: int, nk: int, tiles: tuple, engine: str,
                group: int = 1, band: bool = False, off_lo: int = 0, off_hi: int = 0) -> TileConfig | None:
    """The dK/dV tile of the tiles an unmasked call of this shape runs (given, or kernel_config's) where they are
    `fused_tiles`, else None; banded calls (`_band`'s offsets) only with a band it takes (`_fused_band`: the
    descending order's waits then go along the band); kernel_config's for GQA groups up to FUSED_MAX_GROUP (banded:
    FUSED_BAND_MAX_GROUP) only (kernel_config does not see the heads), given ones for any group."""
    if band and not _fused_band(band, off_lo, off_hi, nq, nk):
        return None
    if group > (FUSED_BAND_MAX_GROUP if band else FUSED_MAX_GROUP) and not tiles:
        return None
    cfg, _, _ = _tiles(d, dv, dtype, 0, 0, list(tiles), interpret=False, band=band, engine=engine, n_keys=nk,
                       n_queries=nq)
    return cfg.dkdv if dv == d and fused_tiles(cfg, d, dtype) else None


def _fused_backward(q, k, v, do, lse, delta, scale, band: bool, off_lo: int, off_hi: int, t: TileConfig, dq, dk, dv):
    """(dQ, dK, dV) of the fused backward (kernels/gluon_bwd_fused.py) over dK/dV tile t (`_fused_call`) into dq, dk,
    dv where TMA can write them (else new contiguous tensors), from TMA-readable copies of q, k, v, do where a stride
    or base is not: dK, dV from its
    dK/dV part, dQ summed in an fp32 accumulator (each tile's first partial stored, the others TMA reduce-adds) in
    the kernel's fixed key-tile order (descending, or rotated: gluon_bwd_fused) under
    per-(head, query tile) counters, then dQ = fl32(acc · scale) rounded into the input format."""
    from flashcheck.kernels import gluon_bwd, gluon_bwd_fused, gluon_fwd

    # a fresh copy: .contiguous() of a contiguous view at an unaligned offset is the view itself
    q, k, v, do = (x if _gluon_tensors(Layout.of(x)) else torch.empty(x.shape, dtype=x.dtype, device=x.device).copy_(x)
                   for x in (q, k, v, do))
    dq, dk, dv = (x if _gluon_tensors(Layout.of(x)) else torch.empty(x.shape, dtype=x.dtype, device=x.device)
                  for x in (dq, dk, dv))
    B, Hq, nq, d = q.shape
    launch = _gluon_fused_launch(Layout.of(q), Layout.of(k), band, off_lo, off_hi, t, _tensor_sms(q))
    # unbanded, not zeroed: each query tile's first add is a store (gluon_bwd_fused _writer); under a band a query
    # tile may be seen by no key tile (its rows' dQ 0)
    acc = (torch.zeros if band else torch.empty)((B * Hq, nq, d), dtype=torch.float32, device=q.device)
    sem = torch.zeros(B * Hq * triton.cdiv(nq, t.block_m), dtype=torch.int32, device=q.device)
    half = t.block_n // 2
    _launch(gluon_bwd_fused.attn_bwd_fused_gluon_kernel, launch, gluon_fwd.descriptor(q, t.block_m),
            gluon_fwd.descriptor(k, half), gluon_fwd.descriptor(v, half), gluon_fwd.descriptor(do, t.block_m),
            gluon_fwd.descriptor(dk, half), gluon_fwd.descriptor(dv, half),
            gluon_bwd.rows_descriptor(_per_row(lse), t.block_m), gluon_bwd.rows_descriptor(_per_row(delta), t.block_m),
            gluon_bwd_fused.dq_acc_descriptor(acc), sem, scale)
    # dQ = scale · Σ_j T_j: one fp32 product (the kernels' fp32 sm_scale), then the rounding into the input format,
    # in one pass (torch computes in fp32, the common dtype, and rounds on the store into dq)
    torch.mul(acc.view(B, Hq, nq, d), scale, out=dq)
    return dq, dk, dv


@functools.lru_cache(maxsize=1024)
def _gluon_fused_launch(q: Layout, k: Layout, band: bool, off_lo: int, off_hi: int, t: TileConfig,
                        sms: int | None = None) -> Launch:
    """gluon_bwd_fused's launch over the dK/dV tile t: eight TMA descriptors as gluon_bwd's dK/dV launch, the fp32
    accumulator's, the counters (one int32 per head and query tile of t.block_m rows), then sm_scale, N_q, N_k, H_kv
    and `rotate`: 1 where a head's key-tile programs are at most FUSED_ROTATE_KEY_TILES and `sms` (the device's
    multiprocessors, one program each; None: the current device's), so that all of them run at once (the rotated
    order waits on later programs)."""
    B, Hq, nq, d = q.shape
    Hkv, nk = k.shape[1], k.shape[2]
    n_kt = triton.cdiv(nk, t.block_n)
    rotate = int(not band and n_kt <= min(FUSED_ROTATE_KEY_TILES, _launch_sms(sms)))
    return Launch("attn_bwd_fused_gluon_kernel", (n_kt, B * Hkv),
                  ((q.dtype, True),) * 6 + (("float32", True),) * 3 + (("int32", True),),
                  (nq, nk, Hkv, rotate, off_lo, off_hi),
                  (("GROUP", Hq // Hkv), ("HEAD_D", d), ("BLOCK_M", t.block_m), ("BLOCK_N", t.block_n),
                   ("STAGES", t.num_stages), ("BAND", band)), 4, None)


# --------------------------------------------------------------------------- custom ops

@torch.library.custom_op("flashcheck::attention_fwd", mutates_args=())
def _attention_fwd_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      dense: torch.Tensor | None, sparse: list[torch.Tensor], scale: float,
                      band: bool, off_lo: int, off_hi: int, block_q: int, block_k: int,
                      dot: str, p_split: bool, save_res: bool,
                      tiles: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(O, LSE, O_res); O_res is empty unless save_res."""
    return _fwd_impl(q, k, v, dense, sparse, scale, band, off_lo, off_hi, block_q, block_k, dot,
                     p_split, save_res, tiles)


@_attention_fwd_op.register_fake
def _(q, k, v, dense, sparse, scale, band, off_lo, off_hi, block_q, block_k, dot, p_split,
      save_res, tiles):
    B, Hq, nq, _ = q.shape
    o = q.new_empty((B, Hq, nq, v.shape[3]))
    return (o, q.new_empty((B, Hq, nq), dtype=torch.float32),
            torch.empty_like(o) if save_res else q.new_empty((0,)))


@torch.library.custom_op("flashcheck::attention_bwd", mutates_args=())
def _attention_bwd_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                      o_res: torch.Tensor | None, lse: torch.Tensor, do: torch.Tensor,
                      dlse: torch.Tensor | None, dense: torch.Tensor | None,
                      sparse: list[torch.Tensor], scale: float, band: bool, off_lo: int,
                      off_hi: int, block_q: int, block_k: int, dot: str,
                      tiles: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _bwd_impl(q, k, v, o, o_res, lse, do, dlse, dense, sparse, scale, band, off_lo, off_hi,
                     block_q, block_k, dot, tiles)


@_attention_bwd_op.register_fake
def _(q, k, v, o, o_res, lse, do, dlse, dense, sparse, scale, band, off_lo, off_hi, block_q,
      block_k, dot, tiles):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _save(ctx, q, k, v, o, lse, o_res, dense, sparse, save_res: bool, args: tuple) -> None:
    """What the backward reads, on `ctx` (the custom op's and _EagerAttention's alike); args: the backward's
    (scale, band, off_lo, off_hi, block_q, block_k, dot, tiles)."""
    ctx.save_for_backward(q, k, v, o, lse, *([o_res] if save_res else []),
                          *([dense] if dense is not None else []), *sparse)
    ctx.has_res = save_res
    ctx.has_dense = dense is not None
    ctx.n_sparse = len(sparse)
    ctx.args = args


def _saved(ctx, do) -> tuple:
    """_bwd_impl's arguments before `dlse` (q, k, v, o, o_res, lse, do) and after it (dense, sparse), from what
    `_save` kept; an unused O's gradient `do` (None) is zero."""
    q, k, v, o, lse, *rest = ctx.saved_tensors
    o_res = rest.pop(0) if ctx.has_res else None
    dense = rest.pop(0) if ctx.has_dense else None
    return (q, k, v, o, o_res, lse, torch.zeros_like(o) if do is None else do), (dense, rest)


def _setup_context(ctx, inputs, output):
    (q, k, v, dense, sparse, scale, band, off_lo, off_hi, block_q, block_k, dot, p_split, save_res,
     tiles) = inputs
    o, lse, o_res = output
    _save(ctx, q, k, v, o, lse, o_res, dense, sparse, save_res,
          (scale, band, off_lo, off_hi, block_q, block_k, dot, tiles))


def _backward(ctx, do, dlse, _do_res):
    head, tail = _saved(ctx, do)
    dq, dk, dv = torch.ops.flashcheck.attention_bwd(*head, dlse, *tail, *ctx.args)
    # One entry per op input, in the structure torch's custom-op autograd flattens the inputs to: the `sparse`
    # list of tensors as a list of Nones; the `tiles` list of ints as one None (a list of non-tensors is one
    # leaf), but as [] when empty (an empty list counts as a list of tensors).
    return (dq, dk, dv, None, [None] * ctx.n_sparse, None, None, None, None, None, None, None,
            None, None, None if ctx.args[-1] else [])


_attention_fwd_op.register_autograd(_backward, setup_context=_setup_context)


class _EagerAttention(torch.autograd.Function):
    """The custom op's forward and backward (`_fwd_impl`, `_bwd_impl`: the same launches, bit for bit) as a plain
    autograd.Function, for eager calls: torch.library's dispatch (flattening and default-filling the arguments)
    costs tens of microseconds of host time per call, as much as a short kernel runs (bench/NOTES.md
    "Session 2026-11-27c"). torch.compile keeps tracing the custom ops. Arguments: the custom op's, with `sparse`
    moved to the end as separate tensors."""

    @staticmethod
    def forward(ctx, q, k, v, dense, scale, band, off_lo, off_hi, block_q, block_k, dot, p_split, save_res, tiles,
                *sparse):
        o, lse, o_res = _fwd_impl(q, k, v, dense, list(sparse), scale, band, off_lo, off_hi, block_q, block_k, dot,
                                  p_split, save_res, tiles)
        _save(ctx, q, k, v, o, lse, o_res, dense, sparse, save_res,
              (scale, band, off_lo, off_hi, block_q, block_k, dot, tiles))
        ctx.set_materialize_grads(False)  # an unused LSE's gradient stays None, as the custom op's
        ctx.mark_non_differentiable(o_res)
        return o, lse, o_res

    @staticmethod
    def backward(ctx, do, dlse, _do_res):
        head, tail = _saved(ctx, do)
        dq, dk, dv = _bwd_impl(*head, dlse, *tail, *ctx.args)
        return (dq, dk, dv) + (None,) * (11 + ctx.n_sparse)


# `flashcheck.kernels.attention` names both this module and, once the package is imported, the function;
# `flashcheck.kernels.attention.arithmetic(...)` works either way.
attention.arithmetic = arithmetic

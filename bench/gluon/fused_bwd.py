"""Prototype (bench only; one variant of it is the product's kernels/gluon_bwd_fused.py): the backward in one Gluon
kernel with 5 tensor-core products a tile pair, dQ's key-tile partials added into global memory in a fixed order
(issue 10; bench/NOTES.md, "Session 2026-11-28b").

Today's backward is two kernels (kernels/gluon_bwd.py): dK/dV (Sᵀ, dPᵀ, dV += Pᵀ dO, dK += dSᵀ Q) and dQ (S, dP
again, dQ += dS K): 7 products where FA3 and cuDNN do 5, because the issue keeps the backward deterministic and
without atomic adds of the data. Here the dK/dV kernel keeps its schedule and adds a fifth product:

- each consumer warpgroup writes its 64 keys' rows of dSᵀ (rounded into the input format, as the operand of dK's
  product) into a shared 2-slot buffer [BLOCK_N, BLOCK_M]; once both halves are there (mbarrier `ds_full`, two
  arrivals), each warpgroup computes its share of the partial dQ = dS K over the program's 128 keys (A = dS from
  shared memory, MN-major): at d = 128 all 64 rows and its half of d (B = K's column half: FA3's split), at d = 64
  its half of the 128 rows and all of d (`dq_share`), 32 fp32 registers a thread either way;
- that partial is added into an fp32 accumulator in global memory, one query tile at a time, **in a fixed order of
  key tiles**: descending key tile j among those that see the query tile. A per-(head, query tile) counter in global
  memory says how many warpgroups have added; warpgroup w of key tile j waits (acquire) until 2·rank have, then
  reads, adds and writes its share with plain loads and stores (L2 only: `.cg`), and releases the counter.
  The first contributor stores without reading, the last one writes dQ · scale in the input format: no memset, no
  pass after. Deterministic: each element is the same sum in the same order whatever the timing.
- WRITER (a second variant): the consumers stage the partial (fp32, 32 KB: 231.4 KB of shared memory in all at
  d = 128) and a 1-warp writer partition waits, reads, adds and writes, so the consumers never wait on the order.
  Its registers come out of the default consumer warpgroup's (Triton 3.6 gives it 240 − (WRITER_REGS − 24)): FA3's
  writer needs none because it reduce-adds through TMA (DQ_MODE 5 below).
- Key tiles are handed out highest first (program 0 runs key tile n_kt − 1), so a program waits only on programs
  launched before it: no deadlock on a grid larger than the GPU; under a causal band a key tile's first query tile
  was visited earlier by every higher key tile (FA3's descending order), so in the ideal timing nobody waits.

Domain of the prototype: gluon_bwd's (fp16 / bf16, d in {64, 128}, any band: causal either way, windows, Nq != Nk,
ragged N), contiguous (B, H, N, d) tensors. Query tiles start at multiples of BLOCK_M in every program
(`_band_range`), so the counters count canonical tiles; under a band the key tiles visiting query tile i are a range
[j_lo(i), j_hi(i)] (`_dq_turn`), and tiles no key tile visits keep the zeros the launcher writes into dQ. dK and dV
are computed exactly as gluon_bwd's (the same instructions in the same order: bit for bit); dQ's arithmetic differs
from the dQ kernel's (128-key wgmma chains summed in descending key-tile order against one running chain of 64-key
tiles), so the Precision would need a new description before this could ship.

Measured on the H100 (Triton 3.6; bench/NOTES.md, "Session 2026-11-28c"): right (after the d = 128 fix of K's
halves) but **0.58-0.64x the product's two kernels** at N = 16k, the WRITER variant 0.20-0.35x. Taken apart
(`--diag`, DQ_MODE): the fifth product with no add at all is 1.10x (d = 128) to 1.33x (d = 64) the product, a plain
fp32 store of each partial from the consumers' registers already 0.82-1.03x, the read-add-write 0.60-0.71x without
the order's waits and 0.58-0.64x with them. The partials' fp32 traffic from the consumer warpgroups costs more than
the two products it saves. Not taken as measured. FA3 hands the add to TMA's reduce-add (asynchronous, in L2):
DQ_MODE 5 (`tma_unordered`, Triton 3.6 through its builder's op, `_tma_reduce_add`) and its ordered form, WRITER
with DQ_MODE 6 (`tma_ordered`, `_dq_tma_writer`; `--check`'s `fused_tma`) or 7 (two stage slots, d = 64 only:
`fused_tma2`). Measured on the H200 ("Session 2026-11-28d"): right on every check cell, dQ bit for bit the ordered
read-add-write's; 1.09-1.10x the product at d = 64 N = 16k unmasked, 0.69-0.97x everywhere else. `fused_tma2` at
d = 64, unbanded, is the product's fused backward since 2026-11-28e (kernels/gluon_bwd_fused.py, its TMA helpers
imported here; kernel_config gives it from N_q, N_k >= 8192: bench/fused_threshold.py).

    PYTHONPATH=$PWD python3 bench/gluon/fused_bwd.py --compile          # CPU: spills and HGMMA counts, sm_90
    PYTHONPATH=$PWD python3 bench/gluon/fused_bwd.py --check --time     # H100: against gluon_bwd, then timed
    PYTHONPATH=$PWD python3 bench/gluon/fused_bwd.py --diag             # H100/H200: the dQ add taken apart
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:
    sys.path.insert(1, str(_ROOT))

from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma,  # noqa: E402
                                                             warpgroup_mma, warpgroup_mma_wait)

from flashcheck.kernels.gluon_bwd import HALF_N, _producer, _query_tiles  # noqa: E402
from flashcheck.kernels.gluon_fwd import CONSUMER_REGS, LOG2E, _tma_store, barriers, inner_start  # noqa: E402
from flashcheck.kernels.tiles import full_start, partial_start  # noqa: E402

# the TMA reduce-add (a shim on Triton 3.6), the fixed order's wait, release and completion, shared with the product's
# fused kernel (kernels/gluon_bwd_fused.py: this file's `fused_tma2` at d = 64, unbanded)
from flashcheck.kernels.gluon_bwd_fused import (DS_SLOTS, NEW_REINTERPRET, _bulk_complete, _proxy_fence,  # noqa: E402
                                                _release, _thread_barrier, _tma_reduce_add, _wait_turn,
                                                dq_stage_layout)


@gluon.constexpr_function
def dq_share(HEAD_D, BLOCK_M):
    """(rows, columns) of a query tile's dQ that each consumer warpgroup computes: at d = 128 (64 query rows) the
    tile's rows and half of d each (FA3's split: B = K's column half, one 128-byte swizzle atom); at d = 64 (128
    rows) half of the rows and all of d (A = dS's row half, again one atom: half of d = 64 bytes would cut the K
    tile's swizzle atom)."""
    HEAD_D, BLOCK_M = int(HEAD_D), int(BLOCK_M)
    return (BLOCK_M, HEAD_D // 2) if HEAD_D == 128 else (BLOCK_M // 2, HEAD_D)


@gluon.jit
def _dq_turn(Sem, bh, start_m, start_n, Nq, Nk, off_lo, off_hi, BAND: gl.constexpr, BLOCK_M: gl.constexpr,
             BLOCK_N: gl.constexpr):
    """(counter, rank, last) of key tile start_n // BLOCK_N in the fixed order of query tile start_m // BLOCK_M's dQ
    adds (head bh): descending key tile among the key tiles that visit the query tile. counter: the tile's int32 in
    Sem ((B·H, query tiles)); rank: how many key tiles add before this one; last: it adds last."""
    i = start_m // BLOCK_M
    j = start_n // BLOCK_N
    j_hi = (Nk + BLOCK_N - 1) // BLOCK_N - 1
    j_lo = 0
    if BAND:
        # the key tiles whose query range (kernels/tiles.py `_band_range`, the band transposed: lo(j) =
        # ⌊max(j·BN − off_hi, 0) / BM⌋·BM, hi(j) = ⌈min(j·BN + BN − off_lo, Nq) / BM⌉·BM) holds tile i: lo(j) <= i·BM
        # iff j·BN < (i + 1)·BM + off_hi; hi(j) > i·BM iff j >= ⌊(i·BM + off_lo) / BN⌋ (both monotone in j, so a
        # range; a visited tile has a nonnegative numerator in the first, and the second is clamped at 0 where
        # truncating and flooring division differ)
        j_hi = gl.minimum(j_hi, ((i + 1) * BLOCK_M + off_hi - 1) // BLOCK_N)
        j_lo = gl.maximum((i * BLOCK_M + off_lo) // BLOCK_N, 0)
    return Sem + bh * ((Nq + BLOCK_M - 1) // BLOCK_M) + i, j_hi - j, j == j_lo


@gluon.jit
def _add_in_place(part, DQacc, DQ, offs, inside, rank, last, sm_scale):
    """One contributor's add into dQ's tile, its turn come (DQacc, DQ point at the tile's first element, `offs` 32-bit):
    the contributors' sum so far read back unless it is the first (from L2: `.cg`, L1 is not coherent), then the new
    sum stored in fp32, or by the last as dQ = scale · Σ_j dS_j K_j in the input format."""
    if rank > 0:
        part = part + gl.load(DQacc + offs, mask=inside, other=0.0, cache_modifier=".cg")
    if last:
        gl.store(DQ + offs, (part * sm_scale).to(DQ.dtype.element_ty), mask=inside)
    else:
        gl.store(DQacc + offs, part, mask=inside)


@gluon.jit
def _dq_add(part, DQacc, DQ, Sem, bh, start_m, start_n, Nq, Nk, off_lo, off_hi, sm_scale, WG: gl.constexpr,
            BAND: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr,
            DQ_MODE: gl.constexpr, dq_layout: gl.constexpr):
    """Add this warpgroup's partial dQ (its share of query tile start_m: `dq_share`) in its place in the fixed order
    (`_dq_turn`); the counter counts warpgroups (two a key tile)."""
    ROWS: gl.constexpr = dq_share(HEAD_D, BLOCK_M)[0]
    COLS: gl.constexpr = dq_share(HEAD_D, BLOCK_M)[1]
    row0: gl.constexpr = 0 if ROWS == BLOCK_M else WG * ROWS
    col0: gl.constexpr = WG * COLS if ROWS == BLOCK_M else 0
    counter, rank, last = _dq_turn(Sem, bh, start_m, start_n, Nq, Nk, off_lo, off_hi, BAND, BLOCK_M, BLOCK_N)
    if DQ_MODE == 0 or DQ_MODE == 3:
        _wait_turn(counter, 2 * rank)
    # one 64-bit base a tile, 32-bit offsets the same for every tile (ptxas folds them into the addresses' immediates)
    base = (bh.to(gl.int64) * Nq + start_m + row0) * HEAD_D + col0
    r = gl.arange(0, ROWS, layout=gl.SliceLayout(1, dq_layout))
    c = gl.arange(0, COLS, layout=gl.SliceLayout(0, dq_layout))
    inside = (r[:, None] < Nq - start_m - row0) & (c[None, :] < COLS)
    offs = r[:, None] * HEAD_D + c[None, :]
    if DQ_MODE == 0 or DQ_MODE == 1:
        _add_in_place(part, DQacc + base, DQ + base, offs, inside, rank, last, sm_scale)
    elif DQ_MODE == 2:
        gl.store(DQacc + base + offs, part, mask=inside)
    elif DQ_MODE == 4:  # never true (Nq > 0): the product stays, its add does not
        gl.store(DQacc + base + offs, part, mask=inside & (Nq < 0))
    if DQ_MODE == 0 or DQ_MODE == 3:
        _release(counter)


WRITER_REGS: gl.constexpr = gl.constexpr(48)  # the default warpgroup gets 240 - (WRITER_REGS - 24): Triton's split


@gluon.jit
def _dq_writer(DQacc, DQ, Sem, dq_stage, stage_full, stage_free, sm_scale, off_b, off_hkv, Hq, start_n, Nq, Nk,
               off_lo, off_hi, GROUP: gl.constexpr, HEAD_D: gl.constexpr, BLOCK_N: gl.constexpr,
               BLOCK_M: gl.constexpr, BAND: gl.constexpr):
    # one warp (WRITER): each tile's dQ partial, staged in shared memory by both consumer warpgroups, added in its
    # place in the fixed order (`_dq_turn`; the counter counts key tiles), CHUNK rows at a time (16 fp32 a thread)
    CHUNK: gl.constexpr = 512 // HEAD_D
    layout: gl.constexpr = gl.BlockedLayout([1, HEAD_D // 32], [1, 32], [1, 1], [1, 0])
    r = gl.arange(0, CHUNK, layout=gl.SliceLayout(1, layout))
    c = gl.arange(0, HEAD_D, layout=gl.SliceLayout(0, layout))
    offs = r[:, None] * HEAD_D + c[None, :]
    it = 0
    for g in range(GROUP):
        off_h, n_partial, n_tiles, lo, f_lo, f_hi = _query_tiles(off_hkv, g, GROUP, start_n, Nq, Nk, off_lo, off_hi,
                                                                 BAND, BLOCK_N, BLOCK_M)
        bh = off_b * Hq + off_h
        for t in range(n_tiles):
            start_m = inner_start(t, n_partial, lo, f_lo, f_hi, BLOCK_M)  # the consumers' order
            counter, rank, last = _dq_turn(Sem, bh, start_m, start_n, Nq, Nk, off_lo, off_hi, BAND, BLOCK_M,
                                           BLOCK_N)
            mbarrier.wait(stage_full, it & 1)
            _wait_turn(counter, rank)
            base = (bh.to(gl.int64) * Nq + start_m) * HEAD_D
            for r0 in gl.static_range(0, BLOCK_M, CHUNK):
                inside = (r[:, None] < Nq - start_m - r0) & (c[None, :] < HEAD_D)
                at = base + r0 * HEAD_D  # the chunk's first element: a scalar, the per-element offsets 32-bit
                _add_in_place(dq_stage.slice(r0, CHUNK, dim=0).load(layout), DQacc + at, DQ + at, offs, inside, rank,
                              last, sm_scale)
            mbarrier.arrive(stage_free)  # the stage read: the consumers may write the next partial
            _release(counter)
            it += 1


@gluon.constexpr_function
def writer_regs(DQ_MODE):
    """The writer warp's registers: the TMA writer (DQ_MODE 6) holds no data, so the consumers keep theirs (Triton
    3.6 gives the default warpgroup 240 - (this - 24))."""
    return 24 if int(DQ_MODE) >= 6 else int(WRITER_REGS)


TMA2_HEAD_DIMS = (64, )  # DQ_MODE 7's two slots of fp32 stages fit in shared memory at these head dims only


@gluon.constexpr_function
def tma_slots(DQ_MODE):
    """The TMA writer's stage slots: 1 (DQ_MODE 6: the consumers' next partial waits for the previous tile's adds to
    complete), 2 (DQ_MODE 7: they run a tile ahead; 64 KB of fp32 stages, room at d = 64 only)."""
    return 2 if int(DQ_MODE) == 7 else 1


@gluon.jit
def _writer(DQacc, DQ, Sem, DQdesc, dq_stage, stage_full, stage_free, sm_scale, off_b, off_hkv, Hq, start_n, Nq, Nk,
            off_lo, off_hi, GROUP: gl.constexpr, HEAD_D: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr,
            BAND: gl.constexpr, DQ_MODE: gl.constexpr):
    """The WRITER partition: the TMA writer under DQ_MODE 6, else the read-add-write one."""
    if DQ_MODE >= 6:
        _dq_tma_writer(Sem, DQdesc, dq_stage, stage_full, stage_free, off_b, off_hkv, Hq, start_n, Nq, Nk, off_lo,
                       off_hi, GROUP, HEAD_D, BLOCK_N, BLOCK_M, BAND, tma_slots(DQ_MODE))
    else:
        _dq_writer(DQacc, DQ, Sem, dq_stage, stage_full, stage_free, sm_scale, off_b, off_hkv, Hq, start_n, Nq, Nk,
                   off_lo, off_hi, GROUP, HEAD_D, BLOCK_N, BLOCK_M, BAND)


@gluon.jit
def _dq_tma_writer(Sem, DQdesc, dq_stage, stage_full, stage_free, off_b, off_hkv, Hq, start_n, Nq, Nk, off_lo, off_hi,
                   GROUP: gl.constexpr, HEAD_D: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr,
                   BAND: gl.constexpr, SLOTS: gl.constexpr):
    # one warp (WRITER, DQ_MODE 6): each tile's two staged partials added by the TMA unit in the fixed order
    # (`_dq_turn`; the counter counts key tiles): its turn come, the reduce-adds issued, waited for until performed,
    # then the counter released. No data passes through its registers.
    ROWS: gl.constexpr = dq_share(HEAD_D, BLOCK_M)[0]
    COLS: gl.constexpr = dq_share(HEAD_D, BLOCK_M)[1]
    it = 0
    for g in range(GROUP):
        off_h, n_partial, n_tiles, lo, f_lo, f_hi = _query_tiles(off_hkv, g, GROUP, start_n, Nq, Nk, off_lo, off_hi,
                                                                 BAND, BLOCK_N, BLOCK_M)
        bh = off_b * Hq + off_h
        for t in range(n_tiles):
            start_m = inner_start(t, n_partial, lo, f_lo, f_hi, BLOCK_M)  # the consumers' order
            counter, rank, last = _dq_turn(Sem, bh, start_m, start_n, Nq, Nk, off_lo, off_hi, BAND, BLOCK_M,
                                           BLOCK_N)
            s = it % SLOTS
            mbarrier.wait(stage_full.index(s), (it // SLOTS) & 1)
            _wait_turn(counter, rank)
            _proxy_fence(bh)
            for w in gl.static_range(2):
                if ROWS == BLOCK_M:
                    _tma_reduce_add(DQdesc, [bh, start_m, w * COLS], dq_stage.index(2 * s + w))
                else:
                    _tma_reduce_add(DQdesc, [bh, start_m + w * ROWS, 0], dq_stage.index(2 * s + w))
            _bulk_complete(bh)
            mbarrier.arrive(stage_free.index(s))
            _release(counter)
            it += 1


@gluon.jit
def _tile(dk, dv, it, k_smem, v_smem, k_all, q_ring, do_ring, lse_ring, delta_ring, ds_smem, q_ready, do_ready,
          tile_free, ds_full, ds_free, dq_stage, stage_full, stage_free, DQacc, DQ, Sem, DQdesc, bh, keys, start_m,
          start_n,
          qk_scale2, sm_scale, Nq, Nk, off_lo, off_hi, WG: gl.constexpr, MASKED: gl.constexpr, BAND: gl.constexpr,
          BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr, STAGES: gl.constexpr,
          WRITER: gl.constexpr, DQ_MODE: gl.constexpr, s_layout: gl.constexpr, a_layout: gl.constexpr,
          dq_layout: gl.constexpr):
    """gluon_bwd `_ring_tile` (the same dK, dV arithmetic) plus dQ's partial over the program's keys."""
    dtype: gl.constexpr = q_ring.dtype
    slot = it % STAGES
    phase = (it // STAGES) & 1
    mbarrier.wait(q_ready.index(slot), phase)
    mbarrier.wait(do_ready.index(slot), phase)
    q_smem = q_ring.index(slot).reshape([BLOCK_M, HEAD_D])
    do_smem = do_ring.index(slot).reshape([BLOCK_M, HEAD_D])
    s_zero = gl.zeros([HALF_N, BLOCK_M], gl.float32, s_layout)
    queries = start_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, s_layout))
    # Sᵀ = K Qᵀ and dPᵀ = V dOᵀ, issued together
    sT = warpgroup_mma(k_smem, q_smem.permute((1, 0)), s_zero, use_acc=False, is_async=True)
    dpT = warpgroup_mma(v_smem, do_smem.permute((1, 0)), s_zero, use_acc=False, is_async=True)
    lse = lse_ring.index(slot).reshape([BLOCK_M]).load(gl.SliceLayout(0, s_layout))
    sT = warpgroup_mma_wait(1, deps=(sT, ))
    # Pᵀ = exp2(min(S2ᵀ − LSE2, 0))   /   p[i,j] = 2^min(s2[i,j] − lse[i]·log2 e, 0)
    pT = gl.exp2(gl.minimum(sT * qk_scale2 - (lse * LOG2E)[None, :], 0.0))
    if MASKED:
        vis = (queries[None, :] < Nq) & (keys[:, None] < Nk)
        if BAND:
            vis = vis & (keys[:, None] >= queries[None, :] + off_lo) & (keys[:, None] <= queries[None, :] + off_hi)
        pT = gl.where(vis, pT, 0.0)
    # dV = Pᵀ dO   /   dv[j,c] += Σ_i p[i,j] dO[i,c]
    p_op = gl.convert_layout(pT.to(dtype), a_layout)
    dv = warpgroup_mma(p_op, do_smem, dv, is_async=True)
    dpT = warpgroup_mma_wait(1, deps=(dpT, ))
    delta = delta_ring.index(slot).reshape([BLOCK_M]).load(gl.SliceLayout(0, s_layout))
    # dS = P ∘ (dP − Δ)   /   dS[i,j] = P[i,j] * (dP[i,j] − Δ[i])
    ds16 = (pT * (dpT - delta[None, :])).to(dtype)
    # dSᵀ's 64 rows of this warpgroup into the shared slot (its previous tile's dQ products done with it)
    b = it % DS_SLOTS
    b_phase = (it // DS_SLOTS) & 1
    mbarrier.wait(ds_free.index(b), b_phase ^ 1)  # fresh barrier: the first round never waits
    ds_buf = ds_smem.index(b)
    ds_buf.slice(WG * HALF_N, HALF_N, dim=0).store(ds16)
    fence_async_shared()
    mbarrier.arrive(ds_full.index(b))
    # dK = dSᵀ Q (scale applied once at the end)   /   dk[j,c] += Σ_i dS[i,j] q[i,c]
    ds_op = gl.convert_layout(ds16, a_layout)
    dk = warpgroup_mma(ds_op, q_smem, dk, is_async=True)
    # dQ's partial over the program's 128 keys, this warpgroup's share   /   dq[i,c] = Σ_j dS[i,j] k[j,c]
    mbarrier.wait(ds_full.index(b), b_phase)
    ROWS: gl.constexpr = dq_share(HEAD_D, BLOCK_M)[0]
    COLS: gl.constexpr = dq_share(HEAD_D, BLOCK_M)[1]
    dq_zero = gl.zeros([ROWS, COLS], gl.float32, dq_layout)
    if ROWS == BLOCK_M:  # d = 128: all rows, this warpgroup's half of d; one product per K half (k_all: the halves)
        dq = warpgroup_mma(ds_buf.slice(0, HALF_N, dim=0).permute((1, 0)),
                           k_all.index(0).reshape([HALF_N, HEAD_D]).slice(WG * COLS, COLS, dim=1), dq_zero,
                           use_acc=False, is_async=True)
        dq = warpgroup_mma(ds_buf.slice(HALF_N, HALF_N, dim=0).permute((1, 0)),
                           k_all.index(1).reshape([HALF_N, HEAD_D]).slice(WG * COLS, COLS, dim=1), dq, is_async=True)
    else:  # d = 64: this warpgroup's half of the rows, all of d
        dq = warpgroup_mma(ds_buf.slice(WG * ROWS, ROWS, dim=1).permute((1, 0)), k_all, dq_zero, use_acc=False,
                           is_async=True)
    dv, dk, dq, p_op, ds_op = warpgroup_mma_wait(0, deps=(dv, dk, dq, p_op, ds_op))
    mbarrier.arrive(ds_free.index(b))
    mbarrier.arrive(tile_free.index(slot))
    if WRITER and DQ_MODE >= 6:  # the TMA's source: each warpgroup's own [ROWS, COLS] stage in slot it % SLOTS
        SLOTS: gl.constexpr = tma_slots(DQ_MODE)
        s = it % SLOTS
        mbarrier.wait(stage_free.index(s), ((it // SLOTS) & 1) ^ 1)  # the writer's adds from that slot completed
        dq_stage.index(2 * s + WG).reshape([ROWS, COLS]).store(dq)
        fence_async_shared()
        mbarrier.arrive(stage_full.index(s))
    elif WRITER:  # staged for the writer warp (its previous tile's partial read out first)
        mbarrier.wait(stage_free, (it & 1) ^ 1)
        if ROWS == BLOCK_M:
            dq_stage.slice(WG * COLS, COLS, dim=1).store(dq)
        else:
            dq_stage.slice(WG * ROWS, ROWS, dim=0).store(dq)
        mbarrier.arrive(stage_full)
    elif DQ_MODE == 5:  # unordered: staged, then added by the TMA unit (FA3's non-deterministic dQ)
        tma.store_wait(0)  # this warpgroup's previous reduce has read its stage (the issuing thread's bulk group)
        _thread_barrier()
        stage = dq_stage.index(WG)
        stage.reshape([ROWS, COLS]).store(dq)
        fence_async_shared()
        row0: gl.constexpr = 0 if ROWS == BLOCK_M else WG * ROWS
        col0: gl.constexpr = WG * COLS if ROWS == BLOCK_M else 0
        _tma_reduce_add(DQdesc, [bh, start_m + row0, col0], stage)
    else:
        _dq_add(dq, DQacc, DQ, Sem, bh, start_m, start_n, Nq, Nk, off_lo, off_hi, sm_scale, WG, BAND, BLOCK_M, BLOCK_N,
                HEAD_D, DQ_MODE, dq_layout)
    return dk, dv


@gluon.jit
def _consumer(WG: gl.constexpr, dk_desc, dv_desc, k_halves, v_halves, q_ring, do_ring, lse_ring, delta_ring, ds_smem,
              kv_ready, q_ready, do_ready, tile_free, ds_full, ds_free, dq_stage, stage_full, stage_free, DQacc, DQ,
              Sem, DQdesc, sm_scale, off_b, off_hkv, Hq, start_n, Nq, Nk, off_lo, off_hi, GROUP: gl.constexpr,
              HEAD_D: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, STAGES: gl.constexpr,
              BAND: gl.constexpr, WRITER: gl.constexpr, DQ_MODE: gl.constexpr):
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_M, 16])
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, HEAD_D, 16])
    dq_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                        instr_shape=[16, dq_share(HEAD_D, BLOCK_M)[1], 16])
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    k_smem = k_halves.index(WG).reshape([HALF_N, HEAD_D])
    v_smem = v_halves.index(WG).reshape([HALF_N, HEAD_D])
    # dQ's B operand over the program's 128 keys. At d = 64 both halves are one [BLOCK_N, d] tile (a row is one
    # 128-byte swizzle atom, which repeats every 8 rows: the same bytes). At d = 128 a half's rows span two atoms
    # stored one after the other ([column half][row][64]), so the two halves are not one [128, 128] tile (read as one,
    # its rows 64-127 of columns 0-63 are half 0's columns 64-127: the first GPU check's wrong dQ): the halves
    # themselves, one product each.
    k_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, HEAD_D], k_halves.dtype)
    if HEAD_D == 128:
        k_all = k_halves
    elif NEW_REINTERPRET:
        k_all = k_halves.reinterpret(k_halves.dtype, [BLOCK_N, HEAD_D], k_layout)
    else:
        k_all = k_halves._reinterpret(k_halves.dtype, [BLOCK_N, HEAD_D], k_layout)
    keys = start_n + WG * HALF_N + gl.arange(0, HALF_N, layout=gl.SliceLayout(1, s_layout))
    dk = gl.zeros([HALF_N, HEAD_D], gl.float32, acc_layout)
    dv = gl.zeros([HALF_N, HEAD_D], gl.float32, acc_layout)
    qk_scale2 = sm_scale * LOG2E
    mbarrier.wait(kv_ready, 0)
    it = 0
    for g in range(GROUP):
        off_h, n_partial, n_tiles, lo, f_lo, f_hi = _query_tiles(off_hkv, g, GROUP, start_n, Nq, Nk, off_lo, off_hi,
                                                                 BAND, BLOCK_N, BLOCK_M)
        bh = off_b * Hq + off_h
        for t in range(0, n_partial):
            dk, dv = _tile(dk, dv, it, k_smem, v_smem, k_all, q_ring, do_ring, lse_ring, delta_ring, ds_smem, q_ready,
                           do_ready, tile_free, ds_full, ds_free, dq_stage, stage_full, stage_free, DQacc, DQ, Sem,
                           DQdesc, bh, keys,
                           partial_start(t, None, lo, f_lo, f_hi, False, BLOCK_M), start_n, qk_scale2, sm_scale, Nq,
                           Nk, off_lo, off_hi, WG, True, BAND, BLOCK_M, BLOCK_N, HEAD_D, STAGES, WRITER, DQ_MODE,
                           s_layout, a_layout, dq_layout)
            it += 1
        for t in range(0, n_tiles - n_partial):
            dk, dv = _tile(dk, dv, it, k_smem, v_smem, k_all, q_ring, do_ring, lse_ring, delta_ring, ds_smem, q_ready,
                           do_ready, tile_free, ds_full, ds_free, dq_stage, stage_full, stage_free, DQacc, DQ, Sem,
                           DQdesc, bh, keys,
                           full_start(t, None, f_lo, False, BLOCK_M), start_n, qk_scale2, sm_scale, Nq, Nk, off_lo,
                           off_hi, WG, False, BAND, BLOCK_M, BLOCK_N, HEAD_D, STAGES, WRITER, DQ_MODE, s_layout,
                           a_layout, dq_layout)
            it += 1
    dk = dk * sm_scale
    dtype: gl.constexpr = k_halves.dtype
    # the other warpgroup's dQ products read both K halves until its last tile: wait for its last ds_free arrival
    # before this half is overwritten with dK
    if it > 0:
        last = it - 1
        mbarrier.wait(ds_free.index(last % DS_SLOTS), (last // DS_SLOTS) & 1)
    k_smem.store(dk.to(dtype))
    v_smem.store(dv.to(dtype))
    fence_async_shared()
    if DQ_MODE == 5:
        tma.store_wait(0)
    _tma_store(dk_desc, [off_b, off_hkv, start_n + WG * HALF_N, 0], k_halves.index(WG))
    _tma_store(dv_desc, [off_b, off_hkv, start_n + WG * HALF_N, 0], v_halves.index(WG))
    tma.store_wait(0)


@gluon.jit
def attn_bwd_fused_gluon_kernel(
    q_desc, k_desc, v_desc, do_desc, dk_desc, dv_desc, lse_desc, delta_desc, DQacc, DQ, Sem, DQdesc,
    sm_scale, Nq, Nk, Hkv, off_lo, off_hi,
    GROUP: gl.constexpr, HEAD_D: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
    STAGES: gl.constexpr, BAND: gl.constexpr, WRITER: gl.constexpr, DQ_MODE: gl.constexpr = 0,
):
    gl.static_assert(BLOCK_N == 2 * HALF_N, "two consumer warpgroups of HALF_N keys each")
    gl.static_assert(HEAD_D == 64 or HEAD_D == 128, "head dims 64 and 128")
    gl.static_assert(BLOCK_N % BLOCK_M == 0, "query tiles nest in key tiles: the counters' canonical tiles")
    n_kt = (Nk + BLOCK_N - 1) // BLOCK_N
    start_n = (n_kt - 1 - gl.program_id(0)) * BLOCK_N  # the highest key tile first: waits go to earlier programs
    pid_bh = gl.program_id(1)
    off_b = pid_bh // Hkv
    off_hkv = pid_bh % Hkv
    Hq = Hkv * GROUP

    dtype: gl.constexpr = q_desc.dtype
    k_halves = gl.allocate_shared_memory(dtype, [2, 1, 1, HALF_N, HEAD_D], k_desc.layout)
    v_halves = gl.allocate_shared_memory(dtype, [2, 1, 1, HALF_N, HEAD_D], v_desc.layout)
    q_ring = gl.allocate_shared_memory(dtype, [STAGES, 1, 1, BLOCK_M, HEAD_D], q_desc.layout)
    do_ring = gl.allocate_shared_memory(dtype, [STAGES, 1, 1, BLOCK_M, HEAD_D], do_desc.layout)
    lse_ring = gl.allocate_shared_memory(gl.float32, [STAGES, 1, BLOCK_M], lse_desc.layout)
    delta_ring = gl.allocate_shared_memory(gl.float32, [STAGES, 1, BLOCK_M], delta_desc.layout)
    ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_M], dtype)
    ds_smem = gl.allocate_shared_memory(dtype, [DS_SLOTS, BLOCK_N, BLOCK_M], ds_layout)
    kv_ready = barriers(1, 1).index(0)
    q_ready = barriers(STAGES, 1)
    do_ready = barriers(STAGES, 1)
    tile_free = barriers(STAGES, 2)
    ds_full = barriers(DS_SLOTS, 2)  # both warpgroups' dSᵀ rows written
    ds_free = barriers(DS_SLOTS, 2)  # both warpgroups' dQ products done reading the slot
    if DQ_MODE >= 5:
        # each warpgroup's partial (fp32, [ROWS, COLS], unswizzled: DQdesc's layout) for the TMA reduce-add, in each
        # of the writer's slots (index 2 · slot + warpgroup)
        dq_stage = gl.allocate_shared_memory(gl.float32, [2 * tma_slots(DQ_MODE), 1, dq_share(HEAD_D, BLOCK_M)[0],
                                                          dq_share(HEAD_D, BLOCK_M)[1]], DQdesc.layout)
        if WRITER:
            stage_full = barriers(tma_slots(DQ_MODE), 2)  # both warpgroups' partials staged in the slot
            stage_free = barriers(tma_slots(DQ_MODE), 1)  # the writer's adds from the slot have completed
        else:
            stage_full, stage_free = ds_full, ds_free  # not used
    elif WRITER:
        # the tile's dQ partial (fp32, both halves of d) for the writer warp: 32 KB (231.4 KB in all at d = 128)
        # swizzled in groups of 4 rows: the writer reads 4 (d = 128) or 8 at a time
        stage_layout: gl.constexpr = gl.SwizzledSharedLayout(2, 1, 4, [1, 0])
        dq_stage = gl.allocate_shared_memory(gl.float32, [BLOCK_M, HEAD_D], stage_layout)
        stage_full = barriers(1, 2).index(0)  # both warpgroups' halves staged
        stage_free = barriers(1, 1).index(0)  # the writer has read the stage
    else:
        dq_stage, stage_full, stage_free = ds_smem, ds_full, ds_free  # not used
    fence_async_shared()

    # the argument lists written out in full in both branches: built as tuples (`(0, ) + args`) the constexprs among
    # them reach the partitions as tensors
    if WRITER:
        gl.warp_specialize([
            (_consumer, (0, dk_desc, dv_desc, k_halves, v_halves, q_ring, do_ring, lse_ring, delta_ring, ds_smem,
                     kv_ready, q_ready, do_ready, tile_free, ds_full, ds_free, dq_stage, stage_full, stage_free, DQacc,
                     DQ, Sem, DQdesc, sm_scale, off_b, off_hkv, Hq, start_n, Nq, Nk, off_lo, off_hi, GROUP, HEAD_D,
                     BLOCK_N, BLOCK_M, STAGES, BAND, WRITER, DQ_MODE)),
            (_consumer, (1, dk_desc, dv_desc, k_halves, v_halves, q_ring, do_ring, lse_ring, delta_ring, ds_smem,
                     kv_ready, q_ready, do_ready, tile_free, ds_full, ds_free, dq_stage, stage_full, stage_free, DQacc,
                     DQ, Sem, DQdesc, sm_scale, off_b, off_hkv, Hq, start_n, Nq, Nk, off_lo, off_hi, GROUP, HEAD_D,
                     BLOCK_N, BLOCK_M, STAGES, BAND, WRITER, DQ_MODE)),
            (_producer, (q_desc, k_desc, v_desc, do_desc, lse_desc, delta_desc, k_halves, v_halves, q_ring, do_ring,
                     lse_ring, delta_ring, kv_ready, q_ready, do_ready, tile_free, off_b, off_hkv, Hq, start_n, Nq, Nk,
                     off_lo, off_hi, GROUP, BAND, BLOCK_N, BLOCK_M, STAGES)),
            (_writer, (DQacc, DQ, Sem, DQdesc, dq_stage, stage_full, stage_free, sm_scale, off_b, off_hkv, Hq, start_n,
                       Nq, Nk, off_lo, off_hi, GROUP, HEAD_D, BLOCK_N, BLOCK_M, BAND, DQ_MODE)),
        ], [4, 1, 1], [CONSUMER_REGS, 24, writer_regs(DQ_MODE)])
    else:
        gl.warp_specialize([
            (_consumer, (0, dk_desc, dv_desc, k_halves, v_halves, q_ring, do_ring, lse_ring, delta_ring, ds_smem,
                     kv_ready, q_ready, do_ready, tile_free, ds_full, ds_free, dq_stage, stage_full, stage_free, DQacc,
                     DQ, Sem, DQdesc, sm_scale, off_b, off_hkv, Hq, start_n, Nq, Nk, off_lo, off_hi, GROUP, HEAD_D,
                     BLOCK_N, BLOCK_M, STAGES, BAND, WRITER, DQ_MODE)),
            (_consumer, (1, dk_desc, dv_desc, k_halves, v_halves, q_ring, do_ring, lse_ring, delta_ring, ds_smem,
                     kv_ready, q_ready, do_ready, tile_free, ds_full, ds_free, dq_stage, stage_full, stage_free, DQacc,
                     DQ, Sem, DQdesc, sm_scale, off_b, off_hkv, Hq, start_n, Nq, Nk, off_lo, off_hi, GROUP, HEAD_D,
                     BLOCK_N, BLOCK_M, STAGES, BAND, WRITER, DQ_MODE)),
            (_producer, (q_desc, k_desc, v_desc, do_desc, lse_desc, delta_desc, k_halves, v_halves, q_ring, do_ring,
                     lse_ring, delta_ring, kv_ready, q_ready, do_ready, tile_free, off_b, off_hkv, Hq, start_n, Nq, Nk,
                     off_lo, off_hi, GROUP, BAND, BLOCK_N, BLOCK_M, STAGES)),
        ], [4, 1], [CONSUMER_REGS, 24])


# ------------------------------------------------------------------------------------------------- CPU: the order


def _tdiv(a: int, b: int) -> int:
    """Integer division as the kernel's `//` on int32 (`arith.divsi`: truncation toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def visited_query_tiles(j: int, nq: int, nk: int, band: bool, off_lo: int, off_hi: int, block_m: int,
                        block_n: int) -> range:
    """The query tiles key tile j's program visits (kernels/tiles.py `_band_range` with the band transposed, as
    gluon_bwd `_query_tiles` calls it: every tile of [lo, hi))."""
    if not band:
        return range(0, -(-nq // block_m))
    a0, a1 = j * block_n, min(j * block_n + block_n, nk)
    lo_e = max(a0 - off_hi, 0)
    hi_e = min(max(a1 - 1 - off_lo + 1, 0), nq)
    lo = lo_e // block_m * block_m
    hi = max(-(-hi_e // block_m) * block_m, lo)
    return range(lo // block_m, hi // block_m)


def dq_order(i: int, j: int, nk: int, band: bool, off_lo: int, off_hi: int, block_m: int,
             block_n: int) -> tuple[int, bool]:
    """`_dq_turn`'s (rank, last) in Python, with the kernel's truncating division."""
    j_hi, j_lo = -(-nk // block_n) - 1, 0
    if band:
        j_hi = min(j_hi, _tdiv((i + 1) * block_m + off_hi - 1, block_n))
        j_lo = max(_tdiv(i * block_m + off_lo, block_n), 0)
    return j_hi - j, j == j_lo


def order_errors(nq: int, nk: int, band: bool, off_lo: int, off_hi: int, block_m: int, block_n: int = 128) -> list:
    """Where the kernel's fixed order would be wrong for this call: for every query tile, the key tiles that visit it
    must take ranks 0, 1, …, in descending key-tile order, exactly one of them last (a gap is a wait that never ends,
    a repeat a lost or doubled add)."""
    visitors: dict[int, list[int]] = {}
    for j in range(-(-nk // block_n)):
        for i in visited_query_tiles(j, nq, nk, band, off_lo, off_hi, block_m, block_n):
            visitors.setdefault(i, []).append(j)
    errors = []
    for i, js in visitors.items():
        got = sorted((dq_order(i, j, nk, band, off_lo, off_hi, block_m, block_n), j) for j in js)
        ranks = [r for (r, _), _ in got]
        lasts = [j for (_, last), j in got if last]
        if ranks != list(range(len(js))) or [j for _, j in got] != sorted(js, reverse=True) or lasts != [min(js)]:
            errors.append((i, sorted(js), got))
    return errors


# ------------------------------------------------------------------------------------------------- CPU: compiled

def compile_fused(dtype: str, d: int, band: bool, group: int, block_m: int, stages: int, writer: bool = False,
                  dq_mode: int = 0):
    """The kernel compiled for sm_90 as gluon_bwd's dK/dV launch specializes it (bench/compile_forward.py), with its
    three more pointers after Delta's descriptor."""
    from bench.compile_forward import _compile_gluon, gluon_dkdv_signature

    sig = list(gluon_dkdv_signature(dtype, d, block_m).items())
    at = [name for name, _ in sig].index("sm_scale")
    short = {"float16": "fp16", "bfloat16": "bf16"}[dtype]
    rows, cols = dq_share.fn(d, block_m) if hasattr(dq_share, "fn") else dq_share(d, block_m)
    extra = [("DQacc", "*fp32"), ("DQ", f"*{short}"), ("Sem", "*i32"),
             ("DQdesc", f"tensordesc<fp32[1, {rows}, {cols}],{dq_stage_layout()!r}>")]
    return _compile_gluon(attn_bwd_fused_gluon_kernel, dict(sig[:at] + extra + sig[at:]),
                          dict(GROUP=group, HEAD_D=d, BLOCK_M=block_m, BLOCK_N=128, STAGES=stages, BAND=band,
                               WRITER=writer, DQ_MODE=dq_mode))


# dK/dV tiles of kernel_config (d = 128: 64 query rows, 3-deep ring; d = 64: 128 rows, 2-deep), GQA 1 / 2, banded or not
COMPILE_CASES = [(d, band, group) for d in (128, 64) for band in (False, True) for group in (1, 2)]
TILES = {128: (64, 3), 64: (128, 2)}


def compiled_table(dtype: str = "bfloat16") -> list[dict]:
    from bench.compile_forward import compile_gluon_dkdv, sass_counts

    out = []
    for d, band, group in COMPILE_CASES:
        block_m, stages = TILES[d]
        row = {"d": d, "band": band, "group": group}
        for name, fn in (("dkdv", compile_gluon_dkdv), ("fused", compile_fused),
                         ("fused_writer", lambda *a: compile_fused(*a, writer=True)),
                         ("fused_tma", lambda *a: compile_fused(*a, writer=True, dq_mode=6)),
                         ("fused_tma2", lambda *a: compile_fused(*a, writer=True, dq_mode=7))):
            if name == "fused_tma2" and d not in TMA2_HEAD_DIMS:
                continue
            try:
                row[name] = sass_counts(fn(dtype, d, band, group, block_m, stages), c7512=True)
            except Exception as e:  # noqa: BLE001 (a compile failure is a result here)
                row[name] = {"error": f"{type(e).__name__}: {str(e).splitlines()[-1][:300] if str(e) else ''}"}
        print(json.dumps(row), flush=True)
        out.append(row)
    return out


# ------------------------------------------------------------------------------------------------- GPU: checked, timed

def _inputs(B, H, n, d, group, seed=0):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v, do = (torch.randn(B, H // (group if i in (1, 2) else 1), n, d, device="cuda", dtype=torch.bfloat16,
                               generator=g) for i in range(4))
    return q, k, v, do


def dq_launcher(q, k, v, do, dq, lse, delta, launch, t):
    """A closure launching the product's Gluon dQ kernel (kernels/gluon_bwd.py) into dq with `launch`
    (attention._gluon_dq_launch) and tile t: its five TMA descriptors (Q, dO, dQ of half a query tile's rows; K, V of
    t.block_n), LSE and Delta as the launcher passes them."""
    from flashcheck.kernels import gluon_bwd, gluon_fwd

    half = t.block_m // 2
    args = (gluon_fwd.descriptor(q, half), gluon_fwd.descriptor(k, t.block_n), gluon_fwd.descriptor(v, t.block_n),
            gluon_fwd.descriptor(do, half), gluon_fwd.descriptor(dq, half), lse, delta, q.shape[-1] ** -0.5,
            *launch.ints)

    def go():
        gluon_bwd.attn_bwd_dq_gluon_kernel[launch.grid](*args, **dict(launch.constexprs), num_warps=4)
        return dq
    return go


def launchers(q, k, v, do, causal=False, window=None):
    """(fused, product, (o, lse, delta)): closures returning (dq, dk, dv) of this kernel (`fused(writer=)`, its
    counters zeroed in the closure) and of the product's two Gluon kernels (kernels/gluon_bwd.py) on the same LSE and
    Δ; `causal`, `window` as `attention()` takes them."""
    import importlib

    import torch

    from flashcheck.kernels import gluon_bwd, gluon_fwd
    ka = importlib.import_module("flashcheck.kernels.attention")
    B, Hq, n, d = q.shape
    nk = k.shape[2]
    with torch.no_grad():
        o, lse = ka.attention(q, k, v, causal=causal, window=window, return_lse=True)
    delta = (do.float() * o.float()).sum(-1)
    cfg = ka.kernel_config(d, torch.bfloat16, engine="gluon")
    t, tq = cfg.dkdv, cfg.dq
    band, off_lo, off_hi = ka._band(causal, window, n, nk)
    lq, lk = ka.Layout.of(q), ka.Layout.of(k)
    lau = ka._gluon_dkdv_launch(lq, lk, band, off_lo, off_hi, t)
    lau_q = ka._gluon_dq_launch(lq, lk, band, off_lo, off_hi, tq)
    half = t.block_n // 2
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    rows = (gluon_bwd.rows_descriptor(ka._per_row(lse), t.block_m),
            gluon_bwd.rows_descriptor(ka._per_row(delta), t.block_m))
    descs = (gluon_fwd.descriptor(q, t.block_m), gluon_fwd.descriptor(k, half), gluon_fwd.descriptor(v, half),
             gluon_fwd.descriptor(do, t.block_m), gluon_fwd.descriptor(dk, half), gluon_fwd.descriptor(dv, half))
    acc = torch.empty(q.shape, device="cuda", dtype=torch.float32)
    n_qt = -(-n // t.block_m)
    ints = lau.ints
    constexprs = dict(lau.constexprs)

    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    share = dq_share.fn(d, t.block_m)
    acc3 = acc.view(B * Hq, n, d)
    dq_desc = TensorDescriptor(acc3, list(acc3.shape), list(acc3.stride()), [1, *share], dq_stage_layout())

    def fused(writer=False, dq_mode=0):
        sem = torch.zeros(B * Hq * n_qt, device="cuda", dtype=torch.int32)
        if dq_mode >= 5:  # the TMA adds into zeros; dQ = scale · the sum, in the input format, after (FA3's)
            acc.zero_()
        elif band:  # query tiles no key tile visits (fully masked rows) are never written
            dq.zero_()
        attn_bwd_fused_gluon_kernel[lau.grid](*descs, *rows, acc, dq, sem, dq_desc, d ** -0.5, *ints, **constexprs,
                                              WRITER=writer, DQ_MODE=dq_mode, num_warps=4)
        if dq_mode >= 5:
            torch.mul(acc, d ** -0.5, out=acc)
            dq.copy_(acc)
        return dq, dk, dv

    dq_kernel = dq_launcher(q, k, v, do, dq, lse, delta, lau_q, tq)

    def product(dkdv_only=False):
        gluon_bwd.attn_bwd_dkdv_gluon_kernel[lau.grid](*descs, *rows, d ** -0.5, *ints, **constexprs, num_warps=4)
        if dkdv_only:
            return dq, dk, dv
        dq_kernel()
        return dq, dk, dv
    return fused, product, (o, lse, delta)


def _exact_dq(q, k, v, do, causal=False, window=None):
    """dQ in float64 of the same (rounded) inputs; rows that see no key get 0."""
    import importlib

    import torch
    ka = importlib.import_module("flashcheck.kernels.attention")
    q64, k64, v64, do64 = (x.double() for x in (q, k, v, do))
    group = q.shape[1] // k.shape[1]
    k64, v64 = (x.repeat_interleave(group, dim=1) for x in (k64, v64))
    nq, nk = q.shape[2], k.shape[2]
    s = q64 @ k64.transpose(-1, -2) * q.shape[-1] ** -0.5
    band, off_lo, off_hi = ka._band(causal, window, nq, nk)
    if band:
        i = torch.arange(nq, device=q.device)[:, None]
        j = torch.arange(nk, device=q.device)[None, :]
        s = s.masked_fill(~((j >= i + off_lo) & (j <= i + off_hi)), float("-inf"))
    p = torch.nan_to_num(torch.softmax(s, -1), nan=0.0)
    o = p @ v64
    dp = do64 @ v64.transpose(-1, -2)
    ds = p * (dp - (do64 * o).sum(-1, keepdim=True))
    return ds @ k64 * q.shape[-1] ** -0.5


# (d, Nq, Nk, causal, window, GQA): unmasked and causal, square and ragged, Nq != Nk both ways, a sliding window
CHECK_CELLS = [(d, n, n, causal, None, group) for d in (128, 64) for n in (128, 1024, 4096)
               for causal in (False, True) for group in (1, 2)] + [
    (d, nq, nk, causal, window, 1) for d in (128, 64) for nq, nk, causal, window in (
        (1000, 1300, "bottom_right", None), (1300, 1000, "bottom_right", None), (1300, 1000, "top_left", None),
        (777, 777, False, None), (2048, 2048, False, (256, 0)), (1, 300, False, None))]


VARIANTS = ("fused", "fused_writer", "fused_tma", "fused_tma2")  # fused_tma2: TMA2_HEAD_DIMS only
_VARIANT_ARGS = {"fused": {}, "fused_writer": {"writer": True}, "fused_tma": {"writer": True, "dq_mode": 6},
                 "fused_tma2": {"writer": True, "dq_mode": 7}}


def check(start: int = 0, variants=VARIANTS) -> list[dict]:
    """From CHECK_CELLS[start] on, each variant: dK, dV bit for bit the product's; dQ the same run to run (bit for
    bit), finite, and as far from float64 as the product's dQ kernel (the ratio of max errors). One JSON line a
    (cell, variant) as it completes (`check_guarded` reads them)."""
    import torch

    out = []
    for cell in range(start, len(CHECK_CELLS)):
        d, nq, nk, causal, window, group = CHECK_CELLS[cell]
        g = torch.Generator(device="cuda").manual_seed(0)
        H = 4 if max(nq, nk) <= 1300 else 2
        q, do = (torch.randn(1, H, nq, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
        k, v = (torch.randn(1, H // group, nk, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
        fused, product, _ = launchers(q, k, v, do, causal, window)
        want = tuple(x.clone() for x in product())
        exact = _exact_dq(q, k, v, do, causal, window)
        err_product = float((want[0].double() - exact).abs().max())
        first = None
        for variant in variants:
            if variant == "fused_tma2" and d not in TMA2_HEAD_DIMS:  # a row all the same: the guard counts them
                out.append(dict(cell=cell, variant=variant, skipped=f"head dims {TMA2_HEAD_DIMS} only"))
                print(json.dumps(out[-1]), flush=True)
                continue
            got = tuple(x.clone() for x in fused(**_VARIANT_ARGS[variant]))
            again = tuple(x.clone() for x in fused(**_VARIANT_ARGS[variant]))
            torch.cuda.synchronize()
            err = float((got[0].double() - exact).abs().max())
            row = dict(cell=cell, variant=variant, d=d, Nq=nq, Nk=nk, causal=causal, window=window, group=group,
                       dk_dv_bitwise=all(bool(torch.equal(a, b)) for a, b in zip(got[1:], want[1:])),
                       dq_deterministic=bool(torch.equal(got[0], again[0])),
                       dq_same_as_first_variant=None if first is None else bool(torch.equal(got[0], first)),
                       dq_finite=bool(got[0].isfinite().all()), dq_err=err, dq_err_product=err_product,
                       ratio=err / err_product if err_product else float("nan"))
            first = got[0] if first is None else first
            print(json.dumps(row), flush=True)
            out.append(row)
    return out


def _child(argv: list):
    """This script run again with argv in a child process: (the process, a queue of its stdout's lines, then "" at its
    end), so that the parent can wait for a line with a time limit."""
    import queue
    import threading

    child = subprocess.Popen([sys.executable, __file__, *argv], stdout=subprocess.PIPE, text=True, cwd=_ROOT)
    lines: queue.Queue = queue.Queue()

    def pump():
        for line in iter(child.stdout.readline, ""):
            lines.put(line)
        lines.put("")
    threading.Thread(target=pump, daemon=True).start()
    return child, lines


def _next_line(child, lines, stall_s: float):
    """The child's next line from `_child`'s queue: "" at its end (the child waited for), None when it printed
    nothing for stall_s (the child killed: a wait that never ends)."""
    import queue

    try:
        line = lines.get(timeout=stall_s)
    except queue.Empty:
        child.kill()
        child.wait()
        return None
    if not line:
        child.wait()
    return line


def check_guarded(stall_s: float = 180.0, variants=VARIANTS) -> list[dict]:
    """`check` in child processes, so that a wrong wait (a kernel that never ends) costs stall_s, not the device
    call: a (cell, variant) that prints nothing for stall_s is recorded as a hang, its child killed (the GPU context
    goes with it), and the check goes on from the next cell without that variant."""
    rows, start, variants = [], 0, list(variants)
    while start < len(CHECK_CELLS) and variants:
        child, lines = _child(["--check-child", str(start), ",".join(variants)])
        expected = (start, variants[0])
        while True:
            line = _next_line(child, lines, stall_s)
            if line is None:  # stalled
                rows.append(dict(cell=expected[0], variant=expected[1], hang=True, stall_s=stall_s))
                print(json.dumps(rows[-1]), flush=True)
                variants.remove(expected[1])
                start = expected[0] + 1  # the cell's other variants after it are skipped with it
                break
            if not line:  # the child ended
                start = len(CHECK_CELLS) if child.returncode == 0 else expected[0] + 1
                if child.returncode != 0:
                    rows.append(dict(cell=expected[0], variant=expected[1], error=f"exit {child.returncode}"))
                    print(json.dumps(rows[-1]), flush=True)
                break
            if line.startswith("{"):
                row = json.loads(line)
                rows.append(row)
                print(line, end="", flush=True)
                i = variants.index(row["variant"])
                expected = (row["cell"], variants[i + 1]) if i + 1 < len(variants) else (row["cell"] + 1, variants[0])
    return rows


TIME_CELLS = [(128, 16384, False), (128, 16384, True), (128, 4096, False), (128, 1024, False), (64, 16384, False),
              (64, 16384, True), (64, 4096, False), (64, 4096, True), (64, 1024, False), (64, 1024, True)]


def _tflops(d, n, causal, ms):  # the backward counted as 2.5 forwards (issue 10's table)
    B, H = 16384 // n, 2048 // d
    return 2.5 * 4 * B * H * n * n * d / (2 if causal else 1) / (ms * 1e-3) / 1e12


def timed(rounds: int, variants=("fused", "fused_writer"), cells=None) -> list[dict]:
    """Each cell of TIME_CELLS (or `cells`): the product's two kernels and each variant, timed in one process."""
    import torch

    from bench.fwd_variants import timed_row

    rows = []
    for d, n, causal in (TIME_CELLS if cells is None else cells):
        q, k, v, do = _inputs(16384 // n, 2048 // d, n, d, 1)
        fused, product, _ = launchers(q, k, v, do, "bottom_right" if causal else False)
        ref = tuple(x.clone() for x in product())
        names = [name for name in variants if name != "fused_tma2" or d in TMA2_HEAD_DIMS]
        fns = {"kernel": product, **{name: (lambda a: lambda: fused(**a))(_VARIANT_ARGS[name]) for name in names}}
        diff = {name: max(float((a.float() - b.float()).abs().max()) for a, b in zip(fns[name](), ref))
                for name in names}
        rows.append(timed_row(d, n, causal, fns, rounds, diff, _tflops, "dQ,dK,dV"))
        del q, k, v, do
        torch.cuda.empty_cache()
    return rows


DQ_MODES = {0: "ordered", 1: "unordered", 2: "store_only", 3: "wait_only", 4: "no_add",
            5: "tma_unordered"}  # `_dq_add`'s DQ_MODE; 5: the TMA reduce-add (`_tile`); 6 with WRITER: `tma_ordered`
DIAG_CELLS = [(128, 16384, False), (128, 16384, True), (64, 16384, False)]


def diagnosed(rounds: int, cells=None, without=()) -> list[dict]:
    """Where the fused kernel's time goes: its dQ add taken apart (DQ_MODE: the ordered read-add-write; without the
    wait; a plain store; the wait and release alone; the product alone, its add never done; the TMA unit's reduce-add
    from shared memory, unordered, with the zeroing before and the scaling pass after; the same in the fixed order,
    issued by a writer warp) beside the product's two kernels and its dK/dV kernel alone. `ordered` and
    `tma_ordered` are right and meant deterministic (checked: dQ bit for bit over 3 runs), `tma_unordered` right up
    to the order of its fp32 adds; the others are timings. cells: indices into DIAG_CELLS; without: variants left
    out. Before each variant's first run a `# run NAME` line, so that `diagnosed_guarded` knows which one hung."""
    import torch

    from bench.fwd_variants import timed_row

    rows = []
    for i in (range(len(DIAG_CELLS)) if cells is None else cells):
        d, n, causal = DIAG_CELLS[i]
        q, k, v, do = _inputs(16384 // n, 2048 // d, n, d, 1)
        fused, product, _ = launchers(q, k, v, do, "bottom_right" if causal else False)
        ref = tuple(x.clone() for x in product())
        fns = {"kernel": product, "dkdv_only": lambda: product(dkdv_only=True)}
        for mode, name in DQ_MODES.items():
            fns[name] = (lambda m: lambda: fused(dq_mode=m))(mode)
        fns["tma_ordered"] = lambda: fused(writer=True, dq_mode=6)
        if d in TMA2_HEAD_DIMS:
            fns["tma_ordered2"] = lambda: fused(writer=True, dq_mode=7)
        fns = {name: fn for name, fn in fns.items() if name not in without}
        for name, fn in fns.items():  # each variant once, synchronized: a hang is named
            print(f"# run {name}", flush=True)
            fn()
            torch.cuda.synchronize()
        checked = [name for name in ("ordered", "tma_unordered", "tma_ordered", "tma_ordered2") if name in fns]
        diff = {name: max(float((a.float() - b.float()).abs().max()) for a, b in zip(fns[name](), ref))
                for name in checked}
        same = {}
        for name in checked:  # dQ bit for bit over 3 runs
            first = fns[name]()[0].clone()
            same[name] = all(bool(torch.equal(fns[name]()[0], first)) for _ in range(2))
        rows.append(timed_row(d, n, causal, fns, rounds, diff, _tflops, "dQ,dK,dV"))
        rows[-1]["dq_bitwise_run_to_run"] = same
        rows[-1]["without"] = list(without)
        print(f"  dQ bit for bit run to run: {same}", flush=True)
        print(json.dumps(rows[-1]), flush=True)
        del q, k, v, do
        torch.cuda.empty_cache()
    return rows


def diagnosed_guarded(rounds: int, stall_s: float = 90.0) -> list[dict]:
    """`diagnosed`, a cell a child process: a variant that runs for stall_s without a line (a wait that never ends)
    is recorded as hung, its child killed, and the cell run again without it (and every later cell too)."""
    rows, without = [], []
    for i in range(len(DIAG_CELLS)):
        while True:
            child, lines = _child(["--diag-child", str(i), ",".join(without), "--rounds", str(rounds)])
            running, hung = None, None
            while True:
                line = _next_line(child, lines, stall_s)
                if line is None:
                    hung = running
                    break
                if not line:
                    if child.returncode != 0:
                        rows.append(dict(cell=DIAG_CELLS[i], error=f"exit {child.returncode}", during=running))
                        print(json.dumps(rows[-1]), flush=True)
                    break
                if line.startswith("# run "):
                    running = line[len("# run "):].strip()
                elif line.startswith("{"):
                    rows.append(json.loads(line))
                else:
                    print(line, end="", flush=True)
            if hung is None:
                break
            rows.append(dict(cell=DIAG_CELLS[i], variant=hung, hang=True, stall_s=stall_s))
            print(json.dumps(rows[-1]), flush=True)
            if hung in ("kernel", "dkdv_only"):  # the product itself: nothing to time beside it
                break
            without.append(hung)
    return rows


def _sm90() -> bool:
    import torch
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--compile", action="store_true", help="CPU: compile for sm_90, print spills beside gluon_bwd's")
    p.add_argument("--check", action="store_true", help="GPU: outputs against the product's and float64")
    p.add_argument("--time", action="store_true", help="GPU: timed against the product's two kernels")
    p.add_argument("--diag", action="store_true", help="GPU: the fused kernel's dQ add taken apart (DQ_MODE)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--variants", default=",".join(VARIANTS), help="--check's and --time's variants, comma-separated")
    p.add_argument("--head-dims", default="64,128", help="--time's cells of these head dims")
    p.add_argument("--out", default=None)
    p.add_argument("--check-child", nargs=2, metavar=("START", "VARIANTS"), help=argparse.SUPPRESS)
    p.add_argument("--diag-child", nargs=2, metavar=("CELL", "WITHOUT"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    from bench.fwd_variants import save_rows

    if args.check_child:
        check(int(args.check_child[0]), tuple(args.check_child[1].split(",")))
        return 0
    if args.diag_child:
        diagnosed(args.rounds, [int(args.diag_child[0])], tuple(filter(None, args.diag_child[1].split(","))))
        return 0

    if (args.check or args.time or args.diag) and not _sm90():
        print("fused_bwd: --check and --time need an sm_90 GPU; --compile runs on the CPU")
        return 0
    if args.compile:
        rows = compiled_table()
        if args.out:
            import triton
            Path(args.out).mkdir(parents=True, exist_ok=True)
            (Path(args.out) / f"compiled_{triton.__version__}.json").write_text(json.dumps(rows, indent=1))
    if args.check:
        rows = check_guarded(variants=tuple(args.variants.split(",")))
        save_rows(args.out, "check.json", rows)
        if args.time and any(row.get("hang") or row.get("error") for row in rows):
            print("fused_bwd: not timed (a variant hung or failed in the check)")
            return 1
    if args.time:
        dims = {int(x) for x in args.head_dims.split(",")}
        save_rows(args.out, "timed.json", timed(args.rounds, tuple(args.variants.split(",")),
                                                [c for c in TIME_CELLS if c[0] in dims]))
    if args.diag:
        save_rows(args.out, "diag.json", diagnosed_guarded(args.rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())

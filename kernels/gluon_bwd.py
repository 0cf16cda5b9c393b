"""FlashAttention-2 backward's dK/dV kernel in Gluon for Hopper (sm_90): `triton_bwd.attn_bwd_dkdv_kernel`'s
arithmetic, another schedule (the default at head dim 128: kernel_config's "auto" engine).

Why (bench/NOTES.md, "Profile 2026-11-26e"): at d = 128 the Triton dK/dV kernel needs more than 255 registers per
thread (the dK and dV fp32 accumulators of 128 keys, plus Sᵀ, dPᵀ and dSᵀ) and spills (8.6 M local requests per
launch), with the tensor pipe 57 % busy. Here
- a 1-warp producer partition loads the program's K and V once and streams the (Q, dO) tiles of every query head of
  the GQA group with TMA into a STAGES-slot ring (one mbarrier per slot and direction), each with its rows' slice of
  LSE (beside Q) and of Δ (beside dO): read per tile from global memory, those two loads sat on every tile's critical
  path (not loading them at all ran the kernel 1.22-1.38x faster; through the ring, 1.02-1.17x: bench/NOTES.md,
  "Session 2026-11-28");
- two consumer warpgroups own 64 of the program's BLOCK_N = 128 keys each (their dK, dV accumulators: 64 x d fp32,
  64 registers a thread each) with their registers raised to CONSUMER_REGS (setmaxnreg), no barrier between them but
  the ring's;
- per tile, Sᵀ = K Qᵀ and dPᵀ = V dOᵀ are issued together as asynchronous wgmma; Pᵀ's exponentials run while dPᵀ
  is computed, and dV += Pᵀ dO runs while dSᵀ is formed.

What each key computes is triton_bwd's, step for step: the query tiles of each head of the group in the same order
(kernels/tiles.py's `_band_range`, `partial_start`, `full_start` with the band transposed: partial tiles first,
ascending, then the full ones), S2ᵀ = K Qᵀ · (scale · log2 e), Pᵀ = exp2(min(S2ᵀ − LSE · log2 e, 0)) zeroed where
invisible (partial tiles only), dV += Pᵀ dO (Pᵀ rounded into the input format), dPᵀ = V dOᵀ, dSᵀ = Pᵀ ∘ (dPᵀ − Δ),
dK += dSᵀ Q (dSᵀ rounded into the input format), dK scaled once at the end; each accumulation one wgmma chain per
tile into the running accumulator.

Domain: that of gluon_fwd (fp16 / bf16, d = dv in {64, 128}, no dense or block-sparse mask, TMA-readable strides).
"""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                             warpgroup_mma_wait)

# the forward's TMA copies (named per Triton version), barrier arrays, base-2 constant and register split
from flashcheck.kernels.gluon_fwd import (CONSUMER_REGS, LOG2E, _tma_load, _tma_store, barriers, cached_descriptor,
                                          inner_start, keys_visible, query_block_tiles)
from flashcheck.kernels.tiles import _band_range, full_start, grouped_block, partial_start

HALF_N: gl.constexpr = gl.constexpr(64)  # keys (dK/dV) or query rows (dQ) per consumer warpgroup: wgmma's M


@gluon.jit
def _query_tiles(off_hkv, g, GROUP: gl.constexpr, start_n, Nq, Nk, off_lo, off_hi, BAND: gl.constexpr,
                 BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr):
    """(off_h, n_partial, n_tiles, lo, f_lo, f_hi) of query head g of the group: triton_bwd's inner_tiles with the
    forward's band transposed (query i sees key j iff j − off_hi <= i <= j − off_lo)."""
    off_h = off_hkv * GROUP + g
    lo, f_lo, f_hi, hi = _band_range(start_n, gl.minimum(start_n + BLOCK_N, Nk), Nq, -off_hi, -off_lo, BAND, BLOCK_M)
    n_partial = (f_lo - lo + hi - f_hi) // BLOCK_M
    return off_h, n_partial, n_partial + (f_hi - f_lo) // BLOCK_M, lo, f_lo, f_hi


@gluon.jit
def rotated_start(t, n_partial, n_tiles, lo, f_lo, f_hi, rot, BLOCK_M: gl.constexpr):
    """inner_start with the full tiles taken cyclically from the rot-th on: gluon_bwd_fused's order, where key tile
    program r takes them from r mod n_full on, so that no two programs add into one query tile's dQ at one step."""
    n_full = gl.maximum(n_tiles - n_partial, 1)
    u = gl.where(t < n_partial, t, n_partial + (t - n_partial + rot) % n_full)
    return inner_start(u, n_partial, lo, f_lo, f_hi, BLOCK_M)


@gluon.jit
def _producer(q_desc, k_desc, v_desc, do_desc, lse_desc, delta_desc, k_halves, v_halves, q_ring, do_ring, lse_ring,
              delta_ring, kv_ready, q_ready, do_ready, tile_free, off_b, off_hkv, Hq, start_n, Nq, Nk, off_lo, off_hi,
              rot, GROUP: gl.constexpr, BAND: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr,
              STAGES: gl.constexpr, ROTATE: gl.constexpr):
    # one warp: K and V's two halves once, then (Q, dO) of every query tile of every head of the group in the
    # consumers' order (ROTATE: rotated_start's, by rot) into slot it % STAGES, once both consumers let go of it
    mbarrier.expect(kv_ready, 2 * k_desc.block_type.nbytes + 2 * v_desc.block_type.nbytes)
    for w in gl.static_range(2):
        _tma_load(k_desc, [off_b, off_hkv, start_n + w * HALF_N, 0], kv_ready, k_halves.index(w))
        _tma_load(v_desc, [off_b, off_hkv, start_n + w * HALF_N, 0], kv_ready, v_halves.index(w))
    it = 0
    for g in range(GROUP):
        off_h, n_partial, n_tiles, lo, f_lo, f_hi = _query_tiles(off_hkv, g, GROUP, start_n, Nq, Nk, off_lo, off_hi,
                                                                 BAND, BLOCK_N, BLOCK_M)
        bh = off_b * Hq + off_h  # the head's row of LSE and Δ viewed as (B·Hq, Nq)
        for t in range(n_tiles):
            if ROTATE:
                start_m = rotated_start(t, n_partial, n_tiles, lo, f_lo, f_hi, rot, BLOCK_M)
            else:
                start_m = inner_start(t, n_partial, lo, f_lo, f_hi, BLOCK_M)
            slot = it % STAGES
            phase = (it // STAGES) & 1
            mbarrier.wait(tile_free.index(slot), phase ^ 1)  # fresh barrier: the first round never waits
            # Q with its rows' LSE, dO with their Δ (TMA fills rows past Nq, or before 0, with zeros: the masked
            # loads' other=0 of triton_bwd)
            mbarrier.expect(q_ready.index(slot), q_desc.block_type.nbytes + lse_desc.block_type.nbytes)
            _tma_load(q_desc, [off_b, off_h, start_m, 0], q_ready.index(slot), q_ring.index(slot))
            _tma_load(lse_desc, [bh, start_m], q_ready.index(slot), lse_ring.index(slot))
            mbarrier.expect(do_ready.index(slot), do_desc.block_type.nbytes + delta_desc.block_type.nbytes)
            _tma_load(do_desc, [off_b, off_h, start_m, 0], do_ready.index(slot), do_ring.index(slot))
            _tma_load(delta_desc, [bh, start_m], do_ready.index(slot), delta_ring.index(slot))
            it += 1


@gluon.jit
def _probabilities_t(k_smem, v_smem, q_smem, do_smem, lse_smem, qk_scale2, LSE_FIRST: gl.constexpr,
                     BLOCK_M: gl.constexpr, s_layout: gl.constexpr):
    """Sᵀ = K Qᵀ and dPᵀ = V dOᵀ issued together (both operands in shared memory), then Pᵀ from Sᵀ and the ring's LSE
    slice, for one warpgroup's 64 keys and a query tile: (Pᵀ, dPᵀ still in flight).

    LSE_FIRST: the LSE slice read before the two products are issued, else after them. Read after, the load waits
    until the tensor core has taken all sixteen wgmma steps: the d = 128 dK/dV kernel stalled on it for a fifth of its
    tile loops' samples (ncu, 16k) and ran 6.02 -> 5.14 ms with it first (bench/NOTES.md "Session 2026-11-30"); its
    registers (BLOCK_M / 4 a thread) decide where it fits."""
    s_zero = gl.zeros([HALF_N, BLOCK_M], gl.float32, s_layout)
    if LSE_FIRST:
        lse = lse_smem.reshape([BLOCK_M]).load(gl.SliceLayout(0, s_layout))
    sT = warpgroup_mma(k_smem, q_smem.permute((1, 0)), s_zero, use_acc=False, is_async=True)
    dpT = warpgroup_mma(v_smem, do_smem.permute((1, 0)), s_zero, use_acc=False, is_async=True)
    if not LSE_FIRST:
        lse = lse_smem.reshape([BLOCK_M]).load(gl.SliceLayout(0, s_layout))
    sT = warpgroup_mma_wait(1, deps=(sT, ))
    # S2ᵀ = K Qᵀ · scale · log2(e)   /   s2[j,i] = scale · log2(e) · k_j · q_i
    s2T = sT * qk_scale2
    # Pᵀ = exp2(min(S2ᵀ − LSE2, 0))   /   p[i,j] = 2^min(s2[i,j] − lse[i]·log2 e, 0)  (P <= 1: triton_bwd's clamp)
    pT = gl.exp2(gl.minimum(s2T - (lse * LOG2E)[None, :], 0.0))
    return pT, dpT


@gluon.jit
def _masked_t(pT, keys, queries, start_m, Nq, Nk, off_lo, off_hi, BAND: gl.constexpr, BLOCK_M: gl.constexpr,
              s_layout: gl.constexpr):
    """Pᵀ of a partial tile with its invisible entries 0: tiles.py `visible`, transposed (rows keys, columns queries
    start_m + [0, BLOCK_M), `queries`: unbanded only, where the caller computes them): i < Nq, j < Nk,
    i + off_lo <= j <= i + off_hi."""
    if BAND:
        # per key j an interval of queries, [j − off_hi, min(j − off_lo + 1, Nq)), empty for j >= Nk, taken relative
        # to start_m (two comparisons an entry instead of four, and no register a column for the query index)
        cols = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, s_layout))
        first = keys - off_hi - start_m
        end = gl.where(keys < Nk, gl.minimum(keys - off_lo + 1, Nq) - start_m, first)
        vis = (cols[None, :] >= first[:, None]) & (cols[None, :] < end[:, None])
    else:
        vis = (queries[None, :] < Nq) & (keys[:, None] < Nk)
    return gl.where(vis, pT, 0.0)


@gluon.jit
def _tile(dk, dv, k_smem, v_smem, q_smem, do_smem, lse_smem, delta_smem, keys, start_m, qk_scale2, Nq, Nk, off_lo,
          off_hi, MASKED: gl.constexpr, BAND: gl.constexpr, BLOCK_M: gl.constexpr, HEAD_D: gl.constexpr,
          s_layout: gl.constexpr, a_layout: gl.constexpr):
    """triton_bwd `_dkdv_tile` for one warpgroup's 64 keys and one query tile: (dK, dV) updated."""
    dtype: gl.constexpr = q_smem.dtype
    queries = start_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, s_layout))
    # LSE first where its registers allow (BLOCK_M = 64, d = 128: 16 a thread); at BLOCK_M = 128 (d = 64) its 32
    # spill (Triton 3.6: 14 -> 22 local instructions in the tile loops; not timed: the 0.96x of 2026-11-30's call 2
    # at d = 64 16k ran the fused kernel, the same code both sides)
    pT, dpT = _probabilities_t(k_smem, v_smem, q_smem, do_smem, lse_smem, qk_scale2, BLOCK_M <= 64, BLOCK_M,
                               s_layout)
    if MASKED:
        pT = _masked_t(pT, keys, queries, start_m, Nq, Nk, off_lo, off_hi, BAND, BLOCK_M, s_layout)
    # dV = Pᵀ dO   /   dv[j,c] += Σ_i p[i,j] dO[i,c]
    p_op = gl.convert_layout(pT.to(dtype), a_layout)
    dv = warpgroup_mma(p_op, do_smem, dv, is_async=True)
    dpT = warpgroup_mma_wait(1, deps=(dpT, ))  # Sᵀ, dPᵀ done; dV may run on
    delta = delta_smem.reshape([BLOCK_M]).load(gl.SliceLayout(0, s_layout))  # loaded late: 16 registers fewer
    # dS = P ∘ (dP − Δ)   /   dS[i,j] = P[i,j] * (dP[i,j] − Δ[i])
    dsT = pT * (dpT - delta[None, :])
    # dK = dSᵀ Q (scale applied once at the end)   /   dk[j,c] += Σ_i dS[i,j] q[i,c]
    ds_op = gl.convert_layout(dsT.to(dtype), a_layout)
    dk = warpgroup_mma(ds_op, q_smem, dk, is_async=True)
    dv, dk, p_op, ds_op = warpgroup_mma_wait(0, deps=(dv, dk, p_op, ds_op))
    return dk, dv


@gluon.jit
def _ring_tile(dk, dv, it, k_smem, v_smem, q_ring, do_ring, lse_ring, delta_ring, q_ready, do_ready, tile_free, keys,
               start_m, qk_scale2, Nq, Nk, off_lo, off_hi, MASKED: gl.constexpr, BAND: gl.constexpr,
               BLOCK_M: gl.constexpr, HEAD_D: gl.constexpr, STAGES: gl.constexpr, s_layout: gl.constexpr,
               a_layout: gl.constexpr):
    """The it-th (Q, dO) tile of the ring: wait for it, `_tile`, let go of its slot."""
    # the slot through a select never taken (Nq >= 0): with `it % STAGES` itself LLVM kept an address a thread for
    # each of the LSE and Δ loads as an induction variable of the full-tile loop, spilled and reloaded every tile.
    # Local-memory instructions inside the tile loops, Triton 3.6 (the GPU's): d = 128 unbanded 28 -> 0, banded 0 ->
    # 0, d = 64 unbanded 14 -> 14, banded 181 -> 54 (bench/NOTES.md "Session 2026-11-29j"; gluon_bwd_fused's copy of
    # the line kept: 34 -> 37 there, 35 -> 130 on Triton 3.9)
    slot = gl.where(Nq < 0, 0, it % STAGES)
    phase = (it // STAGES) & 1
    mbarrier.wait(q_ready.index(slot), phase)
    mbarrier.wait(do_ready.index(slot), phase)
    dk, dv = _tile(dk, dv, k_smem, v_smem, q_ring.index(slot).reshape([BLOCK_M, HEAD_D]),
                   do_ring.index(slot).reshape([BLOCK_M, HEAD_D]), lse_ring.index(slot), delta_ring.index(slot), keys,
                   start_m, qk_scale2, Nq, Nk, off_lo, off_hi, MASKED, BAND, BLOCK_M, HEAD_D, s_layout, a_layout)
    mbarrier.arrive(tile_free.index(slot))
    return dk, dv


@gluon.jit
def _write_dkdv(WG: gl.constexpr, dk, dv, sm_scale, dk_desc, dv_desc, k_halves, v_halves, off_b, off_hkv, start_n,
                HEAD_D: gl.constexpr):
    """The consumer warpgroup WG's epilogue (this kernel's and gluon_bwd_fused's): its keys' dK and dV rounded into
    the input format and stored. The caller has seen the last read of WG's K / V halves (they are overwritten)."""
    # dK = scale · dSᵀ Q: the logit scale, applied once
    # dK[key, c] = scale · Σ_i dS[i, key] Q[i, c]
    dk = dk * sm_scale
    dtype: gl.constexpr = k_halves.dtype
    # through this warpgroup's K / V halves and TMA, which writes no row past Nk
    k_halves.index(WG).reshape([HALF_N, HEAD_D]).store(dk.to(dtype))
    v_halves.index(WG).reshape([HALF_N, HEAD_D]).store(dv.to(dtype))
    fence_async_shared()
    _tma_store(dk_desc, [off_b, off_hkv, start_n + WG * HALF_N, 0], k_halves.index(WG))
    _tma_store(dv_desc, [off_b, off_hkv, start_n + WG * HALF_N, 0], v_halves.index(WG))
    tma.store_wait(0)


@gluon.jit
def _consumer(WG: gl.constexpr, dk_desc, dv_desc, k_halves, v_halves, q_ring, do_ring, lse_ring, delta_ring,
              kv_ready, q_ready, do_ready, tile_free, sm_scale, off_b, off_hkv, Hq, start_n, Nq, Nk, off_lo, off_hi,
              GROUP: gl.constexpr, HEAD_D: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr,
              STAGES: gl.constexpr, BAND: gl.constexpr):
    # warpgroup WG: keys start_n + WG * HALF_N + [0, HALF_N); Sᵀ / dPᵀ (keys x queries) and dK / dV (keys x d) in
    # wgmma's register layouts
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_M, 16])
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, HEAD_D, 16])
    # Pᵀ and dSᵀ as the register A operands of Pᵀ dO and dSᵀ Q
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    k_smem = k_halves.index(WG).reshape([HALF_N, HEAD_D])
    v_smem = v_halves.index(WG).reshape([HALF_N, HEAD_D])
    keys = start_n + WG * HALF_N + gl.arange(0, HALF_N, layout=gl.SliceLayout(1, s_layout))
    dk = gl.zeros([HALF_N, HEAD_D], gl.float32, acc_layout)
    dv = gl.zeros([HALF_N, HEAD_D], gl.float32, acc_layout)
    qk_scale2 = sm_scale * LOG2E
    mbarrier.wait(kv_ready, 0)
    it = 0
    # GQA: dK, dV of kv head h sum over the query heads h·GROUP … h·GROUP + GROUP − 1
    for g in range(GROUP):
        off_h, n_partial, n_tiles, lo, f_lo, f_hi = _query_tiles(off_hkv, g, GROUP, start_n, Nq, Nk, off_lo, off_hi,
                                                                 BAND, BLOCK_N, BLOCK_M)
        # the partial tiles (masked), then the full ones: two loops, as triton_bwd's (one loop holding both code
        # paths spilled at d = 128)
        for t in range(0, n_partial):
            dk, dv = _ring_tile(dk, dv, it, k_smem, v_smem, q_ring, do_ring, lse_ring, delta_ring, q_ready,
                                do_ready, tile_free, keys, partial_start(t, None, lo, f_lo, f_hi, False, BLOCK_M),
                                qk_scale2, Nq, Nk, off_lo, off_hi, True, BAND, BLOCK_M, HEAD_D, STAGES, s_layout,
                                a_layout)
            it += 1
        for t in range(0, n_tiles - n_partial):
            dk, dv = _ring_tile(dk, dv, it, k_smem, v_smem, q_ring, do_ring, lse_ring, delta_ring, q_ready,
                                do_ready, tile_free, keys, full_start(t, None, f_lo, False, BLOCK_M), qk_scale2, Nq,
                                Nk, off_lo, off_hi, False, BAND, BLOCK_M, HEAD_D, STAGES, s_layout, a_layout)
            it += 1
    _write_dkdv(WG, dk, dv, sm_scale, dk_desc, dv_desc, k_halves, v_halves, off_b, off_hkv, start_n, HEAD_D)


@gluon.jit
def attn_bwd_dkdv_gluon_kernel(
    q_desc, k_desc, v_desc, do_desc, dk_desc, dv_desc, lse_desc, delta_desc,
    sm_scale, Nq, Nk, Hkv, off_lo, off_hi,
    GROUP: gl.constexpr, HEAD_D: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
    STAGES: gl.constexpr, BAND: gl.constexpr,
):
    gl.static_assert(BLOCK_N == 2 * HALF_N, "two consumer warpgroups of HALF_N keys each")
    gl.static_assert(HEAD_D == 64 or HEAD_D == 128, "head dims 64 and 128")
    pid_n, pid_bh = grouped_block(BAND, False)  # under a band longest first across heads: the first key blocks
    off_b = pid_bh // Hkv
    off_hkv = pid_bh % Hkv
    start_n = pid_n * BLOCK_N
    Hq = Hkv * GROUP

    dtype: gl.constexpr = q_desc.dtype
    # TMA's boxes are one head's rows (4-D: [1, 1, rows, d]), the wgmma operands their 2-D views
    k_halves = gl.allocate_shared_memory(dtype, [2, 1, 1, HALF_N, HEAD_D], k_desc.layout)
    v_halves = gl.allocate_shared_memory(dtype, [2, 1, 1, HALF_N, HEAD_D], v_desc.layout)
    q_ring = gl.allocate_shared_memory(dtype, [STAGES, 1, 1, BLOCK_M, HEAD_D], q_desc.layout)
    do_ring = gl.allocate_shared_memory(dtype, [STAGES, 1, 1, BLOCK_M, HEAD_D], do_desc.layout)
    lse_ring = gl.allocate_shared_memory(gl.float32, [STAGES, 1, BLOCK_M], lse_desc.layout)
    delta_ring = gl.allocate_shared_memory(gl.float32, [STAGES, 1, BLOCK_M], delta_desc.layout)
    kv_ready = barriers(1, 1).index(0)
    q_ready = barriers(STAGES, 1)
    do_ready = barriers(STAGES, 1)
    tile_free = barriers(STAGES, 2)  # both consumer warpgroups let go of a slot before its refill
    fence_async_shared()

    gl.warp_specialize([
        (_consumer, (0, dk_desc, dv_desc, k_halves, v_halves, q_ring, do_ring, lse_ring, delta_ring, kv_ready,
                     q_ready, do_ready, tile_free, sm_scale, off_b, off_hkv, Hq, start_n, Nq, Nk, off_lo, off_hi, GROUP,
                     HEAD_D, BLOCK_N, BLOCK_M, STAGES, BAND)),
        (_consumer, (1, dk_desc, dv_desc, k_halves, v_halves, q_ring, do_ring, lse_ring, delta_ring, kv_ready,
                     q_ready, do_ready, tile_free, sm_scale, off_b, off_hkv, Hq, start_n, Nq, Nk, off_lo, off_hi, GROUP,
                     HEAD_D, BLOCK_N, BLOCK_M, STAGES, BAND)),
        (_producer, (q_desc, k_desc, v_desc, do_desc, lse_desc, delta_desc, k_halves, v_halves, q_ring, do_ring,
                     lse_ring, delta_ring, kv_ready, q_ready, do_ready, tile_free, off_b, off_hkv, Hq, start_n, Nq, Nk,
                     off_lo, off_hi, 0, GROUP, BAND, BLOCK_N, BLOCK_M, STAGES, False)),
    ], [4, 1], [CONSUMER_REGS, 24])


# --------------------------------------------------------------------------------------------------- the dQ kernel


@gluon.jit
def _dq_producer(q_desc, do_desc, k_desc, v_desc, q_halves, do_halves, k_ring, v_ring, qdo_ready, k_ready, v_ready,
                 tile_free, off_b, off_h, off_hkv, start_m, n_partial, n_tiles, lo, f_lo, f_hi,
                 BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    # one warp: Q's and dO's two halves once, then K_t and V_t into slot t % STAGES once both consumers let go
    if n_tiles > 0:
        mbarrier.expect(qdo_ready, 2 * q_desc.block_type.nbytes + 2 * do_desc.block_type.nbytes)
        for w in gl.static_range(2):
            _tma_load(q_desc, [off_b, off_h, start_m + w * HALF_N, 0], qdo_ready, q_halves.index(w))
            _tma_load(do_desc, [off_b, off_h, start_m + w * HALF_N, 0], qdo_ready, do_halves.index(w))
    for t in range(n_tiles):
        start_n = inner_start(t, n_partial, lo, f_lo, f_hi, BLOCK_N)  # the forward's key-tile order
        slot = t % STAGES
        phase = (t // STAGES) & 1
        mbarrier.wait(tile_free.index(slot), phase ^ 1)
        mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
        _tma_load(k_desc, [off_b, off_hkv, start_n, 0], k_ready.index(slot), k_ring.index(slot))
        mbarrier.expect(v_ready.index(slot), v_desc.block_type.nbytes)
        _tma_load(v_desc, [off_b, off_hkv, start_n, 0], v_ready.index(slot), v_ring.index(slot))


@gluon.jit
def _dq_tile(dq, t, q_smem, do_smem, k_ring, v_ring, k_ready, v_ready, tile_free, lse2, delta, rows, start_n,
             qk_scale2, Nq, Nk, off_lo, off_hi, MASKED: gl.constexpr, BAND: gl.constexpr, BLOCK_N: gl.constexpr,
             HEAD_D: gl.constexpr, STAGES: gl.constexpr, s_layout: gl.constexpr, a_layout: gl.constexpr):
    """triton_bwd `_dq_tile` for one warpgroup's 64 query rows and the t-th key tile of the ring: dQ updated."""
    dtype: gl.constexpr = q_smem.dtype
    slot = t % STAGES
    phase = (t // STAGES) & 1
    k_smem = k_ring.index(slot).reshape([BLOCK_N, HEAD_D])
    v_smem = v_ring.index(slot).reshape([BLOCK_N, HEAD_D])
    s_zero = gl.zeros([HALF_N, BLOCK_N], gl.float32, s_layout)
    mbarrier.wait(k_ready.index(slot), phase)
    s = warpgroup_mma(q_smem, k_smem.permute((1, 0)), s_zero, use_acc=False, is_async=True)
    mbarrier.wait(v_ready.index(slot), phase)
    dp = warpgroup_mma(do_smem, v_smem.permute((1, 0)), s_zero, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(1, deps=(s, ))
    # P = exp2(min(S2 − LSE2, 0))   /   p[i,j] = 2^min(s2[i,j] − lse2[i], 0)  (P <= 1: triton_bwd's clamp)
    p = gl.exp2(gl.minimum(s * qk_scale2 - lse2[:, None], 0.0))
    if MASKED:
        p = gl.where(keys_visible(rows, start_n, Nq, Nk, off_lo, off_hi, BAND, BLOCK_N, s_layout), p, 0.0)
    # dP = dO Vᵀ   /   dp[i,j] = Σ_c dO[i,c] v[j,c]
    dp = warpgroup_mma_wait(0, deps=(dp, ))
    # dS = P ∘ (dP − Δ)   /   dS[i,j] = P[i,j] * (dP[i,j] − Δ[i])
    ds_op = gl.convert_layout((p * (dp - delta[:, None])).to(dtype), a_layout)
    # dQ = dS K (scale applied once at the end)   /   dq[i,c] += Σ_j dS[i,j] k[j,c]
    dq = warpgroup_mma(ds_op, k_smem, dq, is_async=True)
    dq, ds_op = warpgroup_mma_wait(0, deps=(dq, ds_op))
    mbarrier.arrive(tile_free.index(slot))
    return dq


@gluon.jit
def _dq_consumer(WG: gl.constexpr, dq_desc, LSE, Delta, q_halves, do_halves, k_ring, v_ring, qdo_ready, k_ready,
                 v_ready, tile_free, sm_scale, pid_bh, off_b, off_h, start_m, n_partial, n_tiles, lo, f_lo, f_hi, Nq,
                 Nk, off_lo, off_hi, HEAD_D: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                 BAND: gl.constexpr):
    # warpgroup WG: query rows start_m + WG * HALF_N + [0, HALF_N)
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, HEAD_D, 16])
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    q_smem = q_halves.index(WG).reshape([HALF_N, HEAD_D])
    do_smem = do_halves.index(WG).reshape([HALF_N, HEAD_D])
    rows = start_m + WG * HALF_N + gl.arange(0, HALF_N, layout=gl.SliceLayout(1, s_layout))
    in_rows = rows < Nq
    lse = gl.load(LSE + pid_bh.to(gl.int64) * Nq + rows, mask=in_rows, other=0.0)
    # LSE2 = LSE · log2(e); a fully masked row (LSE = −inf) gets shift 0: its P entries are all selected to 0
    lse2 = gl.where(lse == -float("inf"), 0.0, lse * LOG2E)
    delta = gl.load(Delta + pid_bh.to(gl.int64) * Nq + rows, mask=in_rows, other=0.0)
    qk_scale2 = sm_scale * LOG2E
    dq = gl.zeros([HALF_N, HEAD_D], gl.float32, acc_layout)
    if n_tiles > 0:
        mbarrier.wait(qdo_ready, 0)
    # the partial key tiles (masked), then the full ones: two loops, as triton_bwd's
    for t in range(0, n_partial):
        dq = _dq_tile(dq, t, q_smem, do_smem, k_ring, v_ring, k_ready, v_ready, tile_free, lse2, delta, rows,
                      partial_start(t, None, lo, f_lo, f_hi, False, BLOCK_N), qk_scale2, Nq, Nk, off_lo, off_hi,
                      True, BAND, BLOCK_N, HEAD_D, STAGES, s_layout, a_layout)
    for t in range(n_partial, n_tiles):
        dq = _dq_tile(dq, t, q_smem, do_smem, k_ring, v_ring, k_ready, v_ready, tile_free, lse2, delta, rows,
                      full_start(t - n_partial, None, f_lo, False, BLOCK_N), qk_scale2, Nq, Nk, off_lo, off_hi,
                      False, BAND, BLOCK_N, HEAD_D, STAGES, s_layout, a_layout)
    # dQ = scale · dS K: the logit scale, applied once; out through this warpgroup's Q half and TMA (no row past Nq)
    dq = dq * sm_scale
    q_smem.store(dq.to(q_halves.dtype))
    fence_async_shared()
    _tma_store(dq_desc, [off_b, off_h, start_m + WG * HALF_N, 0], q_halves.index(WG))
    tma.store_wait(0)


@gluon.jit
def attn_bwd_dq_gluon_kernel(
    q_desc, k_desc, v_desc, do_desc, dq_desc, LSE, Delta,
    sm_scale, Nq, Nk, Hq, off_lo, off_hi,
    GROUP: gl.constexpr, HEAD_D: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
    STAGES: gl.constexpr, BAND: gl.constexpr, HEAVY_FIRST: gl.constexpr,
):
    gl.static_assert(BLOCK_M == 2 * HALF_N, "two consumer warpgroups of 64 query rows each")
    gl.static_assert(HEAD_D == 64 or HEAD_D == 128, "head dims 64 and 128")
    pid_bh, off_b, off_h, off_hkv, start_m, lo, f_lo, f_hi, n_partial, n_tiles = query_block_tiles(
        Nq, Nk, Hq, off_lo, off_hi, GROUP, BAND, BLOCK_M, BLOCK_N, HEAVY_FIRST)

    dtype: gl.constexpr = q_desc.dtype
    q_halves = gl.allocate_shared_memory(dtype, [2, 1, 1, HALF_N, HEAD_D], q_desc.layout)
    do_halves = gl.allocate_shared_memory(dtype, [2, 1, 1, HALF_N, HEAD_D], do_desc.layout)
    k_ring = gl.allocate_shared_memory(dtype, [STAGES, 1, 1, BLOCK_N, HEAD_D], k_desc.layout)
    v_ring = gl.allocate_shared_memory(dtype, [STAGES, 1, 1, BLOCK_N, HEAD_D], v_desc.layout)
    qdo_ready = barriers(1, 1).index(0)
    k_ready = barriers(STAGES, 1)
    v_ready = barriers(STAGES, 1)
    tile_free = barriers(STAGES, 2)  # both consumer warpgroups let go of a slot before its refill
    fence_async_shared()

    gl.warp_specialize([
        (_dq_consumer, (0, dq_desc, LSE, Delta, q_halves, do_halves, k_ring, v_ring, qdo_ready, k_ready, v_ready,
                        tile_free, sm_scale, pid_bh, off_b, off_h, start_m, n_partial, n_tiles, lo, f_lo, f_hi, Nq,
                        Nk, off_lo, off_hi, HEAD_D, BLOCK_N, STAGES, BAND)),
        (_dq_consumer, (1, dq_desc, LSE, Delta, q_halves, do_halves, k_ring, v_ring, qdo_ready, k_ready, v_ready,
                        tile_free, sm_scale, pid_bh, off_b, off_h, start_m, n_partial, n_tiles, lo, f_lo, f_hi, Nq,
                        Nk, off_lo, off_hi, HEAD_D, BLOCK_N, STAGES, BAND)),
        (_dq_producer, (q_desc, do_desc, k_desc, v_desc, q_halves, do_halves, k_ring, v_ring, qdo_ready, k_ready,
                        v_ready, tile_free, off_b, off_h, off_hkv, start_m, n_partial, n_tiles, lo, f_lo, f_hi,
                        BLOCK_N, STAGES)),
    ], [4, 1], [CONSUMER_REGS, 24])


# ------------------------------------------------------------------------------------------------- host side

ROWS_LAYOUT = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2)  # LSE / Delta slices, unswizzled


def rows_descriptor(t, cols: int):
    """The host-side TMA descriptor of a (B·H, N) fp32 tensor of per-row values (LSE, Delta), boxes of one head's
    `cols` consecutive rows; its row stride must be a multiple of 4 elements (TMA's 16-byte rule: the launcher pads)."""
    return cached_descriptor(t, [1, cols], ROWS_LAYOUT)

"""bench/NOTES.md "Session 2026-11-29b": gluon_fwd_loop.py at f530f96 with the pair of blocks run by a loop
(one copy of the block code) instead of two inlined copies. Wrong on the H200 (Triton 3.6): paired != unpaired
at B=2 H=4 N=256 d=128 unmasked (bf16 and fp16); an illegal address in bench/fwd_variants.py. Kept as the
reproduction."""

import functools

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                             warpgroup_mma_wait)

from flashcheck.kernels.tiles import _band_range, full_start, partial_start, visible

# TMA copies: Triton 3.9 names them async_load / async_store (their 3.6 names raise there); 3.6 has only the old ones
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
_tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global

LOG2E: gl.constexpr = gl.constexpr(1.4426950408889634)  # log2(e): logits straight into the base-2 domain
LN2: gl.constexpr = gl.constexpr(0.6931471805599453)  # ln(2): the stored LSE in natural log
HALF_M: gl.constexpr = gl.constexpr(64)  # query rows per consumer warpgroup: wgmma's M
CONSUMER_REGS: gl.constexpr = gl.constexpr(240)  # 2 consumers x 128 threads x 240 + 128 x 24 (producer) <= 64K


@gluon.jit
def barriers(N: gl.constexpr, COUNT: gl.constexpr):
    """N mbarriers in shared memory, each completing a phase at COUNT arrivals (1: a TMA load's, whose bytes the
    producer announces with mbarrier.expect; 2: both consumer warpgroups letting go of a ring slot)."""
    bars = gl.allocate_shared_memory(gl.int64, [N, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(N):
        mbarrier.init(bars.index(i), count=COUNT)
    return bars


@gluon.jit
def inner_start(t, n_partial, lo, f_lo, f_hi, BLOCK_IN: gl.constexpr):
    """The t-th inner tile an outer block visits (a query block's key tiles, or a key block's query tiles in
    gluon_bwd): the partial ones ([lo, f_lo) then [f_hi, hi)) first, then the full ones from f_lo (kernels/tiles.py
    partial_start, full_start; no block-sparse lists here)."""
    return gl.where(t < n_partial, partial_start(t, None, lo, f_lo, f_hi, False, BLOCK_IN),
                    full_start(t - n_partial, None, f_lo, False, BLOCK_IN))


@gluon.jit
def query_block_tiles(Nq, Nk, Hq, off_lo, off_hi, GROUP: gl.constexpr, BAND: gl.constexpr, BLOCK_M: gl.constexpr,
                      BLOCK_N: gl.constexpr, HEAVY_FIRST: gl.constexpr):
    """This program's query block (program_id(0), from the last one under HEAVY_FIRST: under a band the last query
    blocks see the most keys) of head program_id(1), and its key tiles: (pid_bh, off_b, off_h, off_hkv, start_m, lo,
    f_lo, f_hi, n_partial, n_tiles), kernels/tiles.py's `_band_range` (the forward's and the dQ kernel's programs)."""
    pid_m = gl.program_id(0)
    if HEAVY_FIRST:
        pid_m = gl.num_programs(0) - 1 - pid_m
    pid_bh, off_b, off_h, off_hkv = head_of(Hq, GROUP)
    start_m, n_partial, n_tiles, lo, f_lo, f_hi = block_tiles(pid_m, Nq, Nk, off_lo, off_hi, BAND, BLOCK_M, BLOCK_N)
    return pid_bh, off_b, off_h, off_hkv, start_m, lo, f_lo, f_hi, n_partial, n_tiles


@gluon.jit
def head_of(Hq, GROUP: gl.constexpr):
    """This program's (batch, head) pair, program_id(1): (pid_bh, off_b, off_h, off_hkv)."""
    pid_bh = gl.program_id(1)
    off_b = pid_bh // Hq
    off_h = pid_bh % Hq
    off_hkv = off_h // GROUP  # GQA: query head h reads kv head h // (Hq // Hkv)
    return pid_bh, off_b, off_h, off_hkv


@gluon.jit
def block_tiles(pid_m, Nq, Nk, off_lo, off_hi, BAND: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
    """Query block pid_m's key tiles: (start_m, n_partial, n_tiles, lo, f_lo, f_hi), kernels/tiles.py's
    `_band_range`: n_partial masked tiles ([lo, f_lo) then [f_hi, hi)), then the full ones [f_lo, f_hi)."""
    start_m = pid_m * BLOCK_M
    lo, f_lo, f_hi, hi = _band_range(start_m, gl.minimum(start_m + BLOCK_M, Nq), Nk, off_lo, off_hi, BAND, BLOCK_N)
    n_partial = (f_lo - lo + hi - f_hi) // BLOCK_N
    return start_m, n_partial, n_partial + (f_hi - f_lo) // BLOCK_N, lo, f_lo, f_hi


@gluon.jit
def _producer(q_desc, k_desc, v_desc, q_halves, k_ring, v_ring, q_ready, k_ready, v_ready, k_free, v_free,
              off_b, off_h, off_hkv, block_a, block_b, has_b,
              BLOCK_N: gl.constexpr, STAGES: gl.constexpr, PAIRED: gl.constexpr):
    # one warp: block A's loads, then (PAIRED) block B's, which land while the consumers finish A's last tiles
    if PAIRED:
        for j in range(1 + has_b.to(gl.int32)):
            _producer_block(q_desc, k_desc, v_desc, q_halves, k_ring, v_ring, q_ready.index(j), k_ready, v_ready,
                            k_free, v_free, off_b, off_h, off_hkv, _pick(j, block_a, block_b), j * block_a[2], j,
                            BLOCK_N, STAGES)
    else:
        _producer_block(q_desc, k_desc, v_desc, q_halves, k_ring, v_ring, q_ready, k_ready, v_ready, k_free, v_free,
                        off_b, off_h, off_hkv, block_a, 0, 0, BLOCK_N, STAGES)


@gluon.jit
def _pick(j, block_a, block_b):
    return (gl.where(j == 0, block_a[0], block_b[0]), gl.where(j == 0, block_a[1], block_b[1]),
            gl.where(j == 0, block_a[2], block_b[2]), gl.where(j == 0, block_a[3], block_b[3]),
            gl.where(j == 0, block_a[4], block_b[4]), gl.where(j == 0, block_a[5], block_b[5]))


@gluon.jit
def _producer_block(q_desc, k_desc, v_desc, q_halves, k_ring, v_ring, q_ready, k_ready, v_ready, k_free, v_free,
                    off_b, off_h, off_hkv, block, t_base, QB,
                    BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    # Q's two halves (into Q buffer QB) on one barrier, then K_t and V_t into ring position t_base + t once both
    # consumers let go of it (a query block that sees no key loads nothing: no copy may still be landing when the
    # program ends)
    start_m, n_partial, n_tiles, lo, f_lo, f_hi = block
    if n_tiles > 0:
        mbarrier.expect(q_ready, 2 * q_desc.block_type.nbytes)
        _tma_load(q_desc, [off_b, off_h, start_m, 0], q_ready, q_halves.index(2 * QB))
        _tma_load(q_desc, [off_b, off_h, start_m + HALF_M, 0], q_ready, q_halves.index(2 * QB + 1))
    for t in range(n_tiles):
        start_n = inner_start(t, n_partial, lo, f_lo, f_hi, BLOCK_N)
        slot = (t_base + t) % STAGES
        phase = ((t_base + t) // STAGES) & 1
        # a fresh barrier counts its parity-1 phase complete: the first round through the ring never waits
        mbarrier.wait(k_free.index(slot), phase ^ 1)
        mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
        _tma_load(k_desc, [off_b, off_hkv, start_n, 0], k_ready.index(slot), k_ring.index(slot))
        mbarrier.wait(v_free.index(slot), phase ^ 1)
        mbarrier.expect(v_ready.index(slot), v_desc.block_type.nbytes)
        _tma_load(v_desc, [off_b, off_hkv, start_n, 0], v_ready.index(slot), v_ring.index(slot))


@gluon.jit
def _softmax_step(qk, m2_i, qk_scale2, rows, start_n, Nq, Nk, off_lo, off_hi, MASKED: gl.constexpr,
                  BAND: gl.constexpr, BLOCK_N: gl.constexpr, s_layout: gl.constexpr):
    """triton_fwd `_fwd_shift` then `_fwd_exp` (without P_SPLIT) for a partial (MASKED) or a full tile, as triton_fwd
    compiles the two apart: (m2_new, alpha, P̃ in fp32, rowsum(P̃) in fp32); the caller adds the rowsum into l
    (`_l_update`). start_n: the tile's first key (read if MASKED). The launcher runs it for scale > 0 only."""
    if MASKED:
        # S2 = Q Kᵀ · scale · log2(e)   /   s2[i,j] = scale · log2(e) · s[i,j]
        s2 = qk * qk_scale2
        # a partial tile's elementwise visibility (kernels/tiles.py visible): i < Nq, j < Nk, i + off_lo <= j <= i +
        # off_hi (no dense mask here)
        cols = start_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        vis = visible(rows, cols, None, Nq, Nk, off_lo, off_hi, 0, 0, BAND, False)
        s2 = gl.where(vis, s2, -float("inf"))
        # m2_new = max(m2_old, rowmax(S2))
        m2_new = gl.maximum(m2_i, gl.max(s2, 1))
        # safe max: a row with nothing visible yet shifts by 0 (never (−inf) − (−inf)); a full tile's rows are finite
        m2_shift = gl.where(m2_new == -float("inf"), 0.0, m2_new)
        # P̃ = exp2(S2 − m2_new)   /   p[i,j] = 2^(s2[i,j] − m2_new[i]): the product rounded, then the subtraction
        p = gl.exp2(s2 - m2_shift[:, None])
    else:
        # m2_new = max(m2_old, rowmax(S) · c): rowmax(fl(S · c)) bit for bit, rounding being monotone and c > 0, with
        # one multiply a row instead of one an entry (FlashAttention-3's form)
        m2_shift = gl.maximum(m2_i, gl.max(qk, 1) * qk_scale2)
        m2_new = m2_shift
        # P̃ = exp2(S · c − m2_new)   /   p[i,j] = 2^(s[i,j] · c − m2_new[i]): the argument in one fma.rn.f32, as
        # triton_fwd's full tiles compile it (Precision.exp_argument "unknown" for 16-bit inputs covers both forms)
        p = gl.exp2(qk * qk_scale2 - m2_shift[:, None])
    # alpha = exp2(m2_old − m2_new): rescales what was accumulated under the old maximum
    alpha = gl.exp2(m2_i - m2_shift)
    return m2_new, alpha, p, gl.sum(p, 1)


@gluon.jit
def _l_update(l_i, alpha, rowsum):
    """l_new = alpha · l_old + rowsum(P̃), in fp64 (triton_fwd _fwd_exp: Arithmetic.l_accumulate); the rowsum fp32."""
    return l_i * alpha.to(gl.float64) + rowsum.to(gl.float64)


@gluon.jit
def _consumer(WG: gl.constexpr, o_desc, ores_desc, LSE, q_halves, k_ring, v_ring, q_ready, k_ready, v_ready, k_free,
              v_free, pid_bh, off_b, off_h, block_a, block_b, has_b, qk_scale2, Nq, Nk, off_lo, off_hi,
              HEAD_D: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, BAND: gl.constexpr,
              WRITE_RES: gl.constexpr, PAIRED: gl.constexpr):
    # warpgroup WG: its half of block A, then (PAIRED) of block B, whose first tiles the producer loads under A's
    # last ones and A's epilogue; A's O store is waited for only at the end (B writes through its own Q buffer)
    if PAIRED:
        for j in range(1 + has_b.to(gl.int32)):
            _consumer_block(WG, o_desc, ores_desc, LSE, q_halves, k_ring, v_ring, q_ready.index(j), k_ready, v_ready,
                            k_free, v_free, pid_bh, off_b, off_h, _pick(j, block_a, block_b), j * block_a[2], j,
                            qk_scale2, Nq, Nk, off_lo, off_hi, HEAD_D, BLOCK_N, STAGES, BAND, WRITE_RES)
    else:
        _consumer_block(WG, o_desc, ores_desc, LSE, q_halves, k_ring, v_ring, q_ready, k_ready, v_ready, k_free,
                        v_free, pid_bh, off_b, off_h, block_a, 0, 0, qk_scale2, Nq, Nk, off_lo, off_hi, HEAD_D,
                        BLOCK_N, STAGES, BAND, WRITE_RES)
    tma.store_wait(0)


@gluon.jit
def _consumer_block(WG: gl.constexpr, o_desc, ores_desc, LSE, q_halves, k_ring, v_ring, q_ready, k_ready, v_ready,
                    k_free, v_free, pid_bh, off_b, off_h, block, t_base, QB, qk_scale2, Nq, Nk, off_lo,
                    off_hi, HEAD_D: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, BAND: gl.constexpr,
                    WRITE_RES: gl.constexpr):
    # warpgroup WG: query rows start_m + WG * HALF_M + [0, HALF_M) of `block` (Q in buffer QB, its key tiles at ring
    # positions t_base + t); its accumulators in wgmma's register layout
    start_m, n_partial, n_tiles, lo, f_lo, f_hi = block
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_D, 16])
    # P̃ as the register A operand of P̃ V (16-bit: two elements per 32-bit register)
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    o_rows: gl.constexpr = gl.SliceLayout(1, o_layout)
    dtype: gl.constexpr = q_halves.dtype
    q_smem = q_halves.index(2 * QB + WG).reshape([HALF_M, HEAD_D])
    rows = start_m + WG * HALF_M + gl.arange(0, HALF_M, layout=gl.SliceLayout(1, s_layout))

    m2_i = gl.full([HALF_M], -float("inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([HALF_M], gl.float64, gl.SliceLayout(1, s_layout))
    acc = gl.zeros([HALF_M, HEAD_D], gl.float32, o_layout)
    s_zero = gl.zeros([HALF_M, BLOCK_N], gl.float32, s_layout)
    if n_tiles > 0:
        mbarrier.wait(q_ready, 0)
    # the partial tiles (at most a few per query block), masked, one after the other: S, softmax step, P̃ V
    for t in range(0, n_partial):
        slot = (t_base + t) % STAGES
        phase = ((t_base + t) // STAGES) & 1
        mbarrier.wait(k_ready.index(slot), phase)
        qk = warpgroup_mma(q_smem, k_ring.index(slot).reshape([BLOCK_N, HEAD_D]).permute((1, 0)), s_zero,
                           use_acc=False, is_async=True)
        qk = warpgroup_mma_wait(0, deps=(qk, ))
        mbarrier.arrive(k_free.index(slot))
        start_n = partial_start(t, None, lo, f_lo, f_hi, False, BLOCK_N)
        m2_i, alpha, p, rowsum = _softmax_step(qk, m2_i, qk_scale2, rows, start_n, Nq, Nk, off_lo, off_hi, True,
                                               BAND, BLOCK_N, s_layout)
        l_i = _l_update(l_i, alpha, rowsum)
        # acc = diag(alpha) acc + P̃ V   (triton_fwd _fwd_pv: the rescale, then the product into it)
        acc = acc * gl.convert_layout(alpha, o_rows)[:, None]
        p_op = gl.convert_layout(p.to(dtype), p_layout)
        mbarrier.wait(v_ready.index(slot), phase)
        acc = warpgroup_mma(p_op, v_ring.index(slot).reshape([BLOCK_N, HEAD_D]), acc, is_async=True)
        acc, p_op = warpgroup_mma_wait(0, deps=(acc, p_op))
        mbarrier.arrive(v_free.index(slot))
    # the full tiles, unmasked, pipelined: S_t issued with P̃_{t-1} V_{t-1}, tile t's softmax under the latter
    if n_tiles > n_partial:
        t0 = t_base + n_partial  # ring positions from here on
        mbarrier.wait(k_ready.index(t0 % STAGES), (t0 // STAGES) & 1)
        qk = warpgroup_mma(q_smem, k_ring.index(t0 % STAGES).reshape([BLOCK_N, HEAD_D]).permute((1, 0)), s_zero,
                           use_acc=False, is_async=True)
        qk = warpgroup_mma_wait(0, deps=(qk, ))
        mbarrier.arrive(k_free.index(t0 % STAGES))
        m2_i, alpha, p, rowsum = _softmax_step(qk, m2_i, qk_scale2, rows, f_lo, Nq, Nk, off_lo, off_hi, False,
                                               BAND, BLOCK_N, s_layout)
        acc = acc * gl.convert_layout(alpha, o_rows)[:, None]  # what the partial tiles left, to the new maximum
        p_op = gl.convert_layout(p.to(dtype), p_layout)
        for t in range(t0 + 1, t_base + n_tiles):
            slot = t % STAGES
            prev = (t - 1) % STAGES
            mbarrier.wait(k_ready.index(slot), (t // STAGES) & 1)
            mbarrier.wait(v_ready.index(prev), ((t - 1) // STAGES) & 1)
            # S_t = Q K_tᵀ, then acc = acc + P̃_{t-1} V_{t-1} (acc already rescaled by alpha_{t-1}): issued back
            # to back, run in issue order
            qk = warpgroup_mma(q_smem, k_ring.index(slot).reshape([BLOCK_N, HEAD_D]).permute((1, 0)), s_zero,
                               use_acc=False, is_async=True)
            acc = warpgroup_mma(p_op, v_ring.index(prev).reshape([BLOCK_N, HEAD_D]), acc, is_async=True)
            # l for tile t − 1, here: its fp64 conversions and multiply-add wait for their operands under the
            # products, not in the softmax's path (where they cost 5-7 %: bench/NOTES.md, "Session 2026-11-27g")
            l_i = _l_update(l_i, alpha, rowsum)
            # S_t done (at most the P̃ V group outstanding): K_t's slot is this warpgroup's no longer
            qk = warpgroup_mma_wait(1, deps=(qk, ))
            mbarrier.arrive(k_free.index(slot))
            # tile t's softmax step while the tensor cores compute P̃_{t-1} V_{t-1}
            m2_i, alpha, p, rowsum = _softmax_step(qk, m2_i, qk_scale2, rows, f_lo, Nq, Nk, off_lo, off_hi, False,
                                                   BAND, BLOCK_N, s_layout)
            acc, p_op = warpgroup_mma_wait(0, deps=(acc, p_op))
            mbarrier.arrive(v_free.index(prev))
            # acc = diag(alpha) acc, before P̃_t V_t adds into it (triton_fwd _fwd_pv's order)
            acc = acc * gl.convert_layout(alpha, o_rows)[:, None]
            p_op = gl.convert_layout(p.to(dtype), p_layout)
        last = (t_base + n_tiles - 1) % STAGES
        mbarrier.wait(v_ready.index(last), ((t_base + n_tiles - 1) // STAGES) & 1)
        acc = warpgroup_mma(p_op, v_ring.index(last).reshape([BLOCK_N, HEAD_D]), acc, is_async=True)
        l_i = _l_update(l_i, alpha, rowsum)  # the last tile's
        acc, p_op = warpgroup_mma_wait(0, deps=(acc, p_op))
        mbarrier.arrive(v_free.index(last))

    # O = diag(l)^−1 acc, the one division; a row with nothing visible has l = 0 and acc = 0 → O = 0
    empty = l_i == 0.0
    l_safe = gl.where(empty, 1.0, l_i.to(gl.float32))  # one rounding of l into fp32
    acc = acc / gl.convert_layout(l_safe, o_rows)[:, None]
    # LSE = ln 2 · (m2 + log2 l)  (natural log; −inf for a fully masked row)
    lse = gl.where(empty, -float("inf"), (m2_i + gl.log2(l_safe)) * LN2)
    # O (and O_res) through this warpgroup's Q half (its last read, S's last product, is done) and TMA, which writes
    # no row past Nq (the descriptors' bounds are the head's)
    o = acc.to(dtype)
    q_smem.store(o)
    fence_async_shared()
    _tma_store(o_desc, [off_b, off_h, start_m + WG * HALF_M, 0], q_halves.index(2 * QB + WG))
    if WRITE_RES:
        # O_res = round(O_fp32 − round(O_fp32)): exact difference in fp32 (triton_fwd WRITE_RES)
        tma.store_wait(0)  # O has left the buffer
        q_smem.store((acc - o.to(gl.float32)).to(dtype))
        fence_async_shared()
        _tma_store(ores_desc, [off_b, off_h, start_m + WG * HALF_M, 0], q_halves.index(2 * QB + WG))
    gl.store(LSE + pid_bh.to(gl.int64) * Nq + rows, lse, mask=rows < Nq)


@gluon.jit
def attn_fwd_gluon_kernel(
    q_desc, k_desc, v_desc, o_desc, ores_desc, LSE,
    sm_scale, Nq, Nk, Hq, off_lo, off_hi,
    GROUP: gl.constexpr, HEAD_D: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
    STAGES: gl.constexpr, BAND: gl.constexpr, WRITE_RES: gl.constexpr, HEAVY_FIRST: gl.constexpr,
    PAIRED: gl.constexpr,
):
    gl.static_assert(BLOCK_M == 2 * HALF_M, "two consumer warpgroups of HALF_M rows each")
    gl.static_assert(HEAD_D == 64 or HEAD_D == 128, "head dims 64 and 128 (one wgmma N per tile)")
    if PAIRED:
        # program p runs query blocks A = n_blocks − 1 − p, then B = p (none if A = B): under a band the heaviest
        # block with the lightest, every program's keys about the same
        pid_bh, off_b, off_h, off_hkv = head_of(Hq, GROUP)
        pid_a = gl.cdiv(Nq, BLOCK_M) - 1 - gl.program_id(0)
        has_b = gl.program_id(0) < pid_a
        block_a = block_tiles(pid_a, Nq, Nk, off_lo, off_hi, BAND, BLOCK_M, BLOCK_N)
        block_b = block_tiles(gl.program_id(0), Nq, Nk, off_lo, off_hi, BAND, BLOCK_M, BLOCK_N)
    else:
        pid_bh, off_b, off_h, off_hkv, start_m, lo, f_lo, f_hi, n_partial, n_tiles = query_block_tiles(
            Nq, Nk, Hq, off_lo, off_hi, GROUP, BAND, BLOCK_M, BLOCK_N, HEAVY_FIRST)
        block_a = (start_m, n_partial, n_tiles, lo, f_lo, f_hi)
        block_b = ()  # unused (PAIRED is a constexpr): nothing captured for it
        has_b = False
    qk_scale2 = sm_scale * LOG2E

    dtype: gl.constexpr = q_desc.dtype
    # TMA's boxes are one head's rows (4-D: [1, 1, rows, d]), the wgmma operands their 2-D views
    q_halves = gl.allocate_shared_memory(dtype, [4 if PAIRED else 2, 1, 1, HALF_M, HEAD_D], q_desc.layout)
    k_ring = gl.allocate_shared_memory(dtype, [STAGES, 1, 1, BLOCK_N, HEAD_D], k_desc.layout)
    v_ring = gl.allocate_shared_memory(dtype, [STAGES, 1, 1, BLOCK_N, HEAD_D], v_desc.layout)
    q_ready = barriers(2, 1) if PAIRED else barriers(1, 1).index(0)  # one a block: Q landed
    k_ready = barriers(STAGES, 1)
    v_ready = barriers(STAGES, 1)
    k_free = barriers(STAGES, 2)  # both consumer warpgroups let go of a slot before its refill
    v_free = barriers(STAGES, 2)
    fence_async_shared()

    gl.warp_specialize([
        (_consumer, (0, o_desc, ores_desc, LSE, q_halves, k_ring, v_ring, q_ready, k_ready, v_ready, k_free, v_free,
                     pid_bh, off_b, off_h, block_a, block_b, has_b, qk_scale2, Nq, Nk, off_lo, off_hi,
                     HEAD_D, BLOCK_N, STAGES, BAND, WRITE_RES, PAIRED)),
        (_consumer, (1, o_desc, ores_desc, LSE, q_halves, k_ring, v_ring, q_ready, k_ready, v_ready, k_free, v_free,
                     pid_bh, off_b, off_h, block_a, block_b, has_b, qk_scale2, Nq, Nk, off_lo, off_hi,
                     HEAD_D, BLOCK_N, STAGES, BAND, WRITE_RES, PAIRED)),
        (_producer, (q_desc, k_desc, v_desc, q_halves, k_ring, v_ring, q_ready, k_ready, v_ready, k_free, v_free,
                     off_b, off_h, off_hkv, block_a, block_b, has_b, BLOCK_N, STAGES, PAIRED)),
    ], [4, 1], [CONSUMER_REGS, 24])


def descriptor_block(rows: int, d: int) -> list[int]:
    """The TMA box of a (B, H, N, d) tensor's tile: one head, `rows` rows, the whole head dim."""
    return [1, 1, rows, d]


@functools.lru_cache(maxsize=None)
def shared_layout(rows: int, d: int, dtype):
    """The NVMMA shared-memory layout of a tile (TMA's destination, wgmma's operand): `dtype` a gl dtype."""
    return gl.NVMMASharedLayout.get_default_for(descriptor_block(rows, d), dtype)


_TEMPLATES: dict = {}  # (shape, strides, box, dtype) -> a validated descriptor without its tensor
_MAX_TEMPLATES = 1024


def descriptor(t, rows: int):
    """The host-side TMA descriptor of a (B, H, N, d) fp16 / bf16 torch tensor, boxes of `rows` rows of one head."""
    d = t.shape[3]
    return cached_descriptor(t, descriptor_block(rows, d),
                             shared_layout(rows, d, gl.bfloat16 if str(t.dtype) == "torch.bfloat16" else gl.float16))


def cached_descriptor(t, block: list[int], layout):
    """The host-side TMA descriptor of torch tensor t, boxes `block` in shared-memory `layout`. Its fields other than
    the tensor come from a template per (shape, strides, box, dtype), validated once, with the first tensor of that
    layout (the launcher's domain check, attention._gluon_tensors, covers each call's alignment): ~1 us a call
    instead of ~5 (bench/NOTES.md, "Gluon forward": the host path)."""
    key = (tuple(t.shape), tuple(t.stride()), tuple(block), t.dtype)
    tpl = _TEMPLATES.get(key)
    if tpl is None:
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

        tpl = TensorDescriptor(t, list(key[0]), list(key[1]), list(block), layout)
        tpl.base = None  # the cache keeps no tensor alive
        if len(_TEMPLATES) >= _MAX_TEMPLATES:
            _TEMPLATES.clear()
        _TEMPLATES[key] = tpl
    desc = object.__new__(type(tpl))
    desc.__dict__.update(tpl.__dict__)
    desc.base = t
    return desc

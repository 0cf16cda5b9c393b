"""A Hopper FlashAttention forward in Gluon (issue 10 prototype, bench only: not the product's kernel).

What the Triton `tl` kernel cannot express and this one does (bench/NOTES.md, "What limits each cell now"): the
forward at N >= 4k runs one 8-warp CTA per SM with the MMA and the softmax serialized in every warp (tensor pipe
~55 %). Here
- a 1-warp producer partition streams K and V tiles with TMA into a STAGES-slot ring (one mbarrier per slot and
  direction), so no consumer warp issues a load;
- the consumer warpgroups (the default partition, NUM_WARPS warps, BLOCK_M rows) pipeline inside each warpgroup
  as FA3 does: S_t = Q K_t^T is issued asynchronously together with O += P_{t-1} V_{t-1}; the softmax of S_t
  runs on the CUDA cores while the tensor cores do P_{t-1} V_{t-1}.

Arithmetic kept from the Triton kernel where it is cheap to keep: base-2 exponent (`exp2(s * qk_scale - m)`,
qk_scale = sm_scale * log2 e), fp32 accumulators, P rounded into the input format before P V, l the fp32 rowsum
of the unrounded P, O = acc / l at the end, LSE = (m + log2 l) * ln 2. Not kept: the reduction trees of the row
max / rowsum are whatever this layout gives (the bounds' model would have to read them before this kernel could
be claimed).

Scope of the prototype: q, k, v of shape (B, H, N, d), contiguous, fp16 / bf16, d in {64, 128}, N a multiple of
BLOCK_M = BLOCK_N = 128, same N for queries and keys; causal = top-left (= bottom-right here). No backward.

    PYTHONPATH=$PWD python3 bench/gluon/fa_fwd.py            # compile for sm_90 on the CPU, ptxas registers
"""
from __future__ import annotations

import math

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                             warpgroup_mma_wait)

LOG2E = 1.4426950408889634  # 1 / ln 2: exp(x) = exp2(x * LOG2E)
LN2 = 0.6931471805599453
# TMA copies: Triton 3.9 names them async_load / async_store (the 3.6 names raise there); 3.6 has only the old ones
tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global


@gluon.jit
def _producer(q_desc, k_desc, v_desc, q_smem, k_ring, v_ring, q_ready, k_ready, v_ready, k_free, v_free,
              q_row, kv_row, n_tiles, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    # one warp: Q once, then K_t and V_t into slot t % STAGES as soon as the consumer has let go of that slot
    mbarrier.expect(q_ready, q_desc.block_type.nbytes)
    tma_load(q_desc, [q_row, 0], q_ready, q_smem)
    for t in range(n_tiles):
        slot = t % STAGES
        phase = (t // STAGES) & 1
        # a fresh barrier counts its "previous" phase (parity 1) as complete: the first round never waits
        mbarrier.wait(k_free.index(slot), phase ^ 1)
        mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
        tma_load(k_desc, [kv_row + t * BLOCK_N, 0], k_ready.index(slot), k_ring.index(slot))
        mbarrier.wait(v_free.index(slot), phase ^ 1)
        mbarrier.expect(v_ready.index(slot), v_desc.block_type.nbytes)
        tma_load(v_desc, [kv_row + t * BLOCK_N, 0], v_ready.index(slot), v_ring.index(slot))


@gluon.jit
def _softmax_step(s, m_i, l_i, qk_scale, t, n_tiles, start_m, CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr,
                  BLOCK_N: gl.constexpr, s_layout: gl.constexpr):
    # the diagonal tile (the last one) is the only one a causal mask touches when BLOCK_M == BLOCK_N
    if CAUSAL:
        if t == n_tiles - 1:
            rows = start_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
            cols = t * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
            s = gl.where(cols[None, :] <= rows[:, None], s, -float("inf"))
    # m_new = max(m, rowmax(S) * qk_scale)      (base 2)
    m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
    # P[i, j] = 2^(S[i, j] * qk_scale - m_new[i])
    p = gl.exp2(s * qk_scale - m_new[:, None])
    # alpha[i] = 2^(m[i] - m_new[i]): the old row's rescale
    alpha = gl.exp2(m_i - m_new)
    l_new = l_i * alpha + gl.sum(p, 1)
    return p, m_new, l_new, alpha


@gluon.jit
def _consumer(o_desc, Lse, q_smem, k_ring, v_ring, o_smem, q_ready, k_ready, v_ready, k_free, v_free, q_row,
              start_m, n_tiles, qk_scale, CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
              HEAD_D: gl.constexpr, STAGES: gl.constexpr, NUM_WARPS: gl.constexpr):
    dtype: gl.constexpr = q_smem.dtype
    # S's accumulator: NUM_WARPS warps stacked along the rows, wgmma n = BLOCK_N; O's: n = HEAD_D
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NUM_WARPS, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NUM_WARPS, 1],
                                                       instr_shape=[16, HEAD_D, 16])
    # P as the register A operand of P V (16-bit: two elements per 32-bit register)
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    o_rows: gl.constexpr = gl.SliceLayout(1, o_layout)

    m_i = gl.full([BLOCK_M], -float("inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([BLOCK_M], gl.float32, gl.SliceLayout(1, s_layout))
    acc = gl.zeros([BLOCK_M, HEAD_D], gl.float32, o_layout)
    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)

    mbarrier.wait(q_ready, 0)
    # tile 0: S_0 = Q K_0^T, then its softmax (nothing to overlap yet)
    mbarrier.wait(k_ready.index(0), 0)
    s = warpgroup_mma(q_smem, k_ring.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(0, deps=(s, ))
    mbarrier.arrive(k_free.index(0))
    p, m_i, l_i, alpha = _softmax_step(s, m_i, l_i, qk_scale, 0, n_tiles, start_m, CAUSAL, BLOCK_M, BLOCK_N,
                                       s_layout)
    p_op = gl.convert_layout(p.to(dtype), p_layout)
    for t in range(1, n_tiles):
        slot = t % STAGES
        prev = (t - 1) % STAGES
        # issue S_t = Q K_t^T, then O += P_{t-1} V_{t-1}; both run on the tensor cores in issue order
        mbarrier.wait(k_ready.index(slot), (t // STAGES) & 1)
        s = warpgroup_mma(q_smem, k_ring.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        mbarrier.wait(v_ready.index(prev), ((t - 1) // STAGES) & 1)
        acc = warpgroup_mma(p_op, v_ring.index(prev), acc, is_async=True)
        # S_t done (at most the P V group outstanding): K_t's slot is free
        s = warpgroup_mma_wait(1, deps=(s, ))
        mbarrier.arrive(k_free.index(slot))
        # the softmax of S_t while the tensor cores do P_{t-1} V_{t-1}
        p, m_i, l_i, alpha = _softmax_step(s, m_i, l_i, qk_scale, t, n_tiles, start_m, CAUSAL, BLOCK_M, BLOCK_N,
                                           s_layout)
        acc, p_op = warpgroup_mma_wait(0, deps=(acc, p_op))
        mbarrier.arrive(v_free.index(prev))
        # O = alpha ∘ O   (O[i, :] *= alpha[i]) before P_t V_t is added
        acc = acc * gl.convert_layout(alpha, o_rows)[:, None]
        p_op = gl.convert_layout(p.to(dtype), p_layout)
    last = (n_tiles - 1) % STAGES
    mbarrier.wait(v_ready.index(last), ((n_tiles - 1) // STAGES) & 1)
    acc = warpgroup_mma(p_op, v_ring.index(last), acc, is_async=True)
    acc, p_op = warpgroup_mma_wait(0, deps=(acc, p_op))
    mbarrier.arrive(v_free.index(last))

    # O = acc / l; LSE = (m + log2 l) ln 2
    l_o = gl.convert_layout(l_i, o_rows)
    o_smem.store((acc / l_o[:, None]).to(dtype))
    fence_async_shared()
    tma_store(o_desc, [q_row, 0], o_smem)
    rows = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
    gl.store(Lse + q_row + rows, (m_i + gl.log2(l_i)) * 0.6931471805599453)
    tma.store_wait(0)


@gluon.jit
def attention_fwd(q_desc, k_desc, v_desc, o_desc, Lse, N_CTX, qk_scale, CAUSAL: gl.constexpr,
                  BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr, STAGES: gl.constexpr,
                  NUM_WARPS: gl.constexpr):
    gl.static_assert(BLOCK_M == BLOCK_N, "the causal mask touches only the last tile when BLOCK_M == BLOCK_N")
    gl.static_assert(BLOCK_M == 16 * NUM_WARPS, "one 16-row wgmma slab per warp")
    n_m = gl.num_programs(0)
    pid_m = gl.program_id(0)
    if CAUSAL:
        pid_m = n_m - 1 - pid_m  # the longest rows first: the last wave is short programs
    bh = gl.program_id(1)
    start_m = pid_m * BLOCK_M
    q_row = bh * N_CTX + start_m
    kv_row = bh * N_CTX
    if CAUSAL:
        n_tiles = pid_m + 1
    else:
        n_tiles = N_CTX // BLOCK_N

    dtype: gl.constexpr = q_desc.dtype
    q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_D], q_desc.layout)
    k_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_D], k_desc.layout)
    v_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_D], v_desc.layout)
    o_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_D], o_desc.layout)
    q_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_free = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_free = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_ready, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_free.index(i), count=1)
        mbarrier.init(v_free.index(i), count=1)
    fence_async_shared()

    gl.warp_specialize([
        (_consumer, (o_desc, Lse, q_smem, k_ring, v_ring, o_smem, q_ready, k_ready, v_ready, k_free, v_free, q_row,
                     start_m, n_tiles, qk_scale, CAUSAL, BLOCK_M, BLOCK_N, HEAD_D, STAGES, NUM_WARPS)),
        (_producer, (q_desc, k_desc, v_desc, q_smem, k_ring, v_ring, q_ready, k_ready, v_ready, k_free, v_free,
                     q_row, kv_row, n_tiles, BLOCK_N, STAGES)),
    ], [1], [24])


@gluon.jit
def _producer2(q_desc, k_desc, v_desc, q_halves, k_ring, v_ring, q_ready, k_ready, v_ready, k_free, v_free,
               q_row, kv_row, n_tiles, BLOCK_N: gl.constexpr, HALF_M: gl.constexpr, STAGES: gl.constexpr):
    # one warp: the two 64-row halves of Q on one barrier, then K_t, V_t as in _producer
    mbarrier.expect(q_ready, 2 * q_desc.block_type.nbytes)
    tma_load(q_desc, [q_row, 0], q_ready, q_halves.index(0))
    tma_load(q_desc, [q_row + HALF_M, 0], q_ready, q_halves.index(1))
    for t in range(n_tiles):
        slot = t % STAGES
        phase = (t // STAGES) & 1
        mbarrier.wait(k_free.index(slot), phase ^ 1)
        mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
        tma_load(k_desc, [kv_row + t * BLOCK_N, 0], k_ready.index(slot), k_ring.index(slot))
        mbarrier.wait(v_free.index(slot), phase ^ 1)
        mbarrier.expect(v_ready.index(slot), v_desc.block_type.nbytes)
        tma_load(v_desc, [kv_row + t * BLOCK_N, 0], v_ready.index(slot), v_ring.index(slot))


@gluon.jit
def _my_turn(turn, e, WG: gl.constexpr, PINGPONG: gl.constexpr):
    # warpgroup 0's GEMM issue e waits for warpgroup 1's issue e - 1, warpgroup 1's issue e for warpgroup 0's
    # issue e: the two alternate on the tensor cores, each one's softmax under the other's GEMMs (a fresh barrier
    # counts its parity-1 phase complete, so warpgroup 0's first issue never waits)
    if PINGPONG:
        if WG == 0:
            mbarrier.wait(turn.index(0), (e & 1) ^ 1)
        else:
            mbarrier.wait(turn.index(1), e & 1)


@gluon.jit
def _pass_turn(turn, WG: gl.constexpr, PINGPONG: gl.constexpr):
    if PINGPONG:
        mbarrier.arrive(turn.index(1 - WG))


@gluon.jit
def _consumer2(WG: gl.constexpr, o_desc, Lse, q_halves, k_ring, v_ring, q_ready, k_ready, v_ready, k_free, v_free,
               turn, q_row, start_m, n_tiles, qk_scale, CAUSAL: gl.constexpr, HALF_M: gl.constexpr,
               BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr, STAGES: gl.constexpr, PINGPONG: gl.constexpr):
    # one warpgroup (4 warps), rows WG * HALF_M .. + HALF_M of the CTA's Q tile; the same K / V ring as the other
    dtype: gl.constexpr = q_halves.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_D, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    o_rows: gl.constexpr = gl.SliceLayout(1, o_layout)
    q_smem = q_halves.index(WG)
    my_start = start_m + WG * HALF_M

    m_i = gl.full([HALF_M], -float("inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([HALF_M], gl.float32, gl.SliceLayout(1, s_layout))
    acc = gl.zeros([HALF_M, HEAD_D], gl.float32, o_layout)
    s_zero = gl.zeros([HALF_M, BLOCK_N], gl.float32, s_layout)

    mbarrier.wait(q_ready, 0)
    mbarrier.wait(k_ready.index(0), 0)
    _my_turn(turn, 0, WG, PINGPONG)
    s = warpgroup_mma(q_smem, k_ring.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    _pass_turn(turn, WG, PINGPONG)
    s = warpgroup_mma_wait(0, deps=(s, ))
    mbarrier.arrive(k_free.index(0))
    p, m_i, l_i, alpha = _softmax_step(s, m_i, l_i, qk_scale, 0, n_tiles, my_start, CAUSAL, HALF_M, BLOCK_N,
                                       s_layout)
    p_op = gl.convert_layout(p.to(dtype), p_layout)
    for t in range(1, n_tiles):
        slot = t % STAGES
        prev = (t - 1) % STAGES
        mbarrier.wait(k_ready.index(slot), (t // STAGES) & 1)
        mbarrier.wait(v_ready.index(prev), ((t - 1) // STAGES) & 1)
        _my_turn(turn, t, WG, PINGPONG)
        # S_t = Q K_t^T, then O += P_{t-1} V_{t-1}, issued back to back, then the other warpgroup's turn
        s = warpgroup_mma(q_smem, k_ring.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        acc = warpgroup_mma(p_op, v_ring.index(prev), acc, is_async=True)
        _pass_turn(turn, WG, PINGPONG)
        s = warpgroup_mma_wait(1, deps=(s, ))
        mbarrier.arrive(k_free.index(slot))
        p, m_i, l_i, alpha = _softmax_step(s, m_i, l_i, qk_scale, t, n_tiles, my_start, CAUSAL, HALF_M, BLOCK_N,
                                           s_layout)
        acc, p_op = warpgroup_mma_wait(0, deps=(acc, p_op))
        mbarrier.arrive(v_free.index(prev))
        acc = acc * gl.convert_layout(alpha, o_rows)[:, None]
        p_op = gl.convert_layout(p.to(dtype), p_layout)
    last = (n_tiles - 1) % STAGES
    mbarrier.wait(v_ready.index(last), ((n_tiles - 1) // STAGES) & 1)
    _my_turn(turn, n_tiles, WG, PINGPONG)
    acc = warpgroup_mma(p_op, v_ring.index(last), acc, is_async=True)
    _pass_turn(turn, WG, PINGPONG)
    acc, p_op = warpgroup_mma_wait(0, deps=(acc, p_op))
    mbarrier.arrive(v_free.index(last))

    # O = acc / l into this warpgroup's Q half (its last S GEMM is done), then TMA to global
    l_o = gl.convert_layout(l_i, o_rows)
    q_smem.store((acc / l_o[:, None]).to(dtype))
    fence_async_shared()
    tma_store(o_desc, [q_row + WG * HALF_M, 0], q_smem)
    rows = gl.arange(0, HALF_M, layout=gl.SliceLayout(1, s_layout))
    gl.store(Lse + q_row + WG * HALF_M + rows, (m_i + gl.log2(l_i)) * 0.6931471805599453)
    tma.store_wait(0)


@gluon.jit
def attention_fwd_pingpong(q_desc, k_desc, v_desc, o_desc, Lse, N_CTX, qk_scale, CAUSAL: gl.constexpr,
                           BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr,
                           STAGES: gl.constexpr, PINGPONG: gl.constexpr, CONSUMER_REGS: gl.constexpr):
    # CTA: warpgroup 0 (default partition) and warpgroup 1 (worker) each own 64 of the BLOCK_M rows, a 1-warp
    # producer (worker) loads; no barrier couples the two consumers except the K / V slots (freed by both) and,
    # with PINGPONG, the turn barriers that alternate their GEMM issues (FA3's ping-pong schedule)
    gl.static_assert(BLOCK_M == BLOCK_N, "the causal mask touches only the last tile when BLOCK_M == BLOCK_N")
    HALF_M: gl.constexpr = BLOCK_M // 2
    n_m = gl.num_programs(0)
    pid_m = gl.program_id(0)
    if CAUSAL:
        pid_m = n_m - 1 - pid_m
    bh = gl.program_id(1)
    start_m = pid_m * BLOCK_M
    q_row = bh * N_CTX + start_m
    kv_row = bh * N_CTX
    if CAUSAL:
        n_tiles = pid_m + 1
    else:
        n_tiles = N_CTX // BLOCK_N

    dtype: gl.constexpr = q_desc.dtype
    q_halves = gl.allocate_shared_memory(dtype, [2, HALF_M, HEAD_D], q_desc.layout)
    k_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_D], k_desc.layout)
    v_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_D], v_desc.layout)
    q_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_free = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_free = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_ready, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_free.index(i), count=2)  # both warpgroups let go of a slot before it is refilled
        mbarrier.init(v_free.index(i), count=2)
    mbarrier.init(turn.index(0), count=1)
    mbarrier.init(turn.index(1), count=1)
    fence_async_shared()

    gl.warp_specialize([
        (_consumer2, (0, o_desc, Lse, q_halves, k_ring, v_ring, q_ready, k_ready, v_ready, k_free, v_free, turn,
                      q_row, start_m, n_tiles, qk_scale, CAUSAL, HALF_M, BLOCK_N, HEAD_D, STAGES, PINGPONG)),
        (_consumer2, (1, o_desc, Lse, q_halves, k_ring, v_ring, q_ready, k_ready, v_ready, k_free, v_free, turn,
                      q_row, start_m, n_tiles, qk_scale, CAUSAL, HALF_M, BLOCK_N, HEAD_D, STAGES, PINGPONG)),
        (_producer2, (q_desc, k_desc, v_desc, q_halves, k_ring, v_ring, q_ready, k_ready, v_ready, k_free, v_free,
                      q_row, kv_row, n_tiles, BLOCK_N, HALF_M, STAGES)),
    ], [4, 1], [CONSUMER_REGS, 24])


BLOCK = 128  # BLOCK_M = BLOCK_N: 8 warps x 16 rows
NUM_WARPS = 8


def stages_for(d: int) -> int:
    # shared memory: Q + O + STAGES x (K + V) tiles of 128 x d x 2 bytes <= 227 KB
    return 2 if d == 128 else 3


VARIANTS = ("ws", "pingpong", "twowg")  # ws: one 8-warp consumer; pingpong / twowg: two 4-warp consumers, with / without
# the turn barriers that alternate their GEMMs
CONSUMER_REGS = 240  # registers of each consumer warpgroup: 2 x 128 x 240 + 128 x 24 (producer) <= 64K


def _launch_args(variant: str, d: int, causal: bool):
    """(kernel, q/o block rows, constexprs, warps) of one variant: "ws", "pingpong", "twowg", optionally with
    ":STAGES" (the K / V ring's depth; default stages_for(d))."""
    variant, _, stages = variant.partition(":")
    stages = int(stages) if stages else stages_for(d)
    if variant == "ws":
        return attention_fwd, BLOCK, dict(CAUSAL=causal, BLOCK_M=BLOCK, BLOCK_N=BLOCK, HEAD_D=d,
                                          STAGES=stages, NUM_WARPS=NUM_WARPS), NUM_WARPS
    if variant in ("pingpong", "twowg"):
        return attention_fwd_pingpong, BLOCK // 2, dict(CAUSAL=causal, BLOCK_M=BLOCK, BLOCK_N=BLOCK, HEAD_D=d,
                                                        STAGES=stages, PINGPONG=variant == "pingpong",
                                                        CONSUMER_REGS=CONSUMER_REGS), 4
    raise ValueError(f"variant: expected one of {VARIANTS}, got {variant!r}")


def forward(q, k, v, causal: bool = False, sm_scale: float | None = None, variant: str = "ws"):
    """(O, LSE) for q, k, v of shape (B, H, N, d) on CUDA (the prototype's scope, module docstring)."""
    import torch

    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    B, H, N, d = q.shape
    if k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"q, k, v: the prototype takes one shape, got {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    if N % BLOCK or d not in (64, 128) or q.dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"q: the prototype takes N % {BLOCK} == 0, d in (64, 128), fp16 / bf16; got N {N}, "
                         f"d {d}, {q.dtype}")
    kernel, q_rows, consts, warps = _launch_args(variant, d, causal)
    sm_scale = 1.0 / math.sqrt(d) if sm_scale is None else sm_scale
    q2, k2, v2 = (x.contiguous().view(B * H * N, d) for x in (q, k, v))
    o = torch.empty_like(q2)
    lse = torch.empty(B * H * N, device=q.device, dtype=torch.float32)
    gdt = gl.bfloat16 if q.dtype == torch.bfloat16 else gl.float16

    def desc(x, rows):
        return TensorDescriptor(x, list(x.shape), list(x.stride()), [rows, d],
                                gl.NVMMASharedLayout.get_default_for([rows, d], gdt))
    kernel[(N // BLOCK, B * H)](desc(q2, q_rows), desc(k2, BLOCK), desc(v2, BLOCK), desc(o, q_rows), lse, N,
                                sm_scale * LOG2E, *consts.values(), num_warps=warps)
    return o.view(B, H, N, d), lse.view(B, H, N)


def compile_sm90(d: int = 128, causal: bool = True, dtype: str = "bf16", variant: str = "ws"):
    """Compile for sm_90a without a GPU (the signature the launcher would build); returns the CompiledKernel."""
    from triton.backends.compiler import GPUTarget

    kernel, q_rows, consts, warps = _launch_args(variant, d, causal)
    gdt = gl.bfloat16 if dtype == "bf16" else gl.float16

    def desc(rows):
        return f"tensordesc<{dtype}[{rows}, {d}],{gl.NVMMASharedLayout.get_default_for([rows, d], gdt)!r}>"
    sig = {"q_desc": desc(q_rows), "k_desc": desc(BLOCK), "v_desc": desc(BLOCK), "o_desc": desc(q_rows),
           "Lse": "*fp32", "N_CTX": "i32", "qk_scale": "fp32", **{name: "constexpr" for name in consts}}
    src = gluon._runtime.GluonASTSource(fn=kernel, signature=sig, constexprs=consts)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})


def main():
    import itertools
    import os
    import re
    import subprocess
    import tempfile

    tools = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    for variant, d, causal in itertools.product(VARIANTS, (64, 128), (False, True)):
        ck = compile_sm90(d, causal, variant=variant)
        ptx = ck.asm["ptx"]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "k.cubin")
            open(path, "wb").write(ck.asm["cubin"])
            sass = subprocess.run([os.path.join(tools, "cuobjdump"), "-sass", path], capture_output=True,
                                  text=True).stdout
        regs = sorted(set(re.findall(r"setmaxnreg.[a-z]+.sync.aligned.u32[ \t]+[0-9]+", ptx)))
        print(f"triton {triton.__version__} {variant} d {d} causal {causal}: HGMMA {sass.count('HGMMA')}, "
              f"wait_group {ptx.count('wgmma.wait_group')}, local loads / stores {sass.count('LDL')} / "
              f"{sass.count('STL')}, shared {ck.metadata.shared} B, "
              f"{[' '.join(r.split()[1:]) for r in regs]}", flush=True)


if __name__ == "__main__":
    main()

"""The FlashAttention-2 backward in one Gluon kernel for Hopper (sm_90), head dim 64: gluon_bwd's dK/dV kernel with dQ's
products inside it, five tensor-core products a tile pair where the two kernels do seven (the default for unbanded
d = 64 calls with GQA groups up to 8 from 1k x 1k, and causal ones without GQA from 2k x 2k, N_k <= N_q:
kernel_config's "auto" engine, `FUSED_QUERIES`, `FUSED_KEYS`, `FUSED_BAND_KEYS`).

Why (bench/NOTES.md, "Session 2026-11-28d" and after): at d = 64 the backward is limited by its elementwise work, and
the dQ kernel recomputes S, P, dP and dS for every tile pair. Here the dK/dV kernel's dSᵀ (already rounded into the
input format as dK's operand) is also the A operand of dQ's partial over the program's 128 keys. Measured on an H200
side by side with the two kernels, forward + backward (bench/fused_order.py, "Session 2026-11-30b"): N = 1k 1.045x,
2k 1.089x, 4k 1.106x, 8k 1.06x, 16k 1.07x, GQA 2-8 1.005-1.09x; but N_q / N_k = 1k / 4k 0.59x and 1k / 8k 0.35x (below).
With dS computed before dV's product is issued ("Session 2026-11-30c": its tile loops then spill 12 local instructions
on Triton 3.6, were 34; 0 on 3.9): 1k 1.08x, 4k 1.17x, 16k 1.12-1.15x; causal 2k 1.01-1.03x, 4k 1.04-1.06x, 8k 1.06x,
16k 1.05x (1k 0.98x; GQA 2 causal 0.83-0.95x: its banded loops spill).

What it computes. dK and dV: gluon_bwd's dK/dV kernel's arithmetic (bit for bit its outputs in the descending order
below; rotated, the same chains over the query tiles in another order: Precision.dkdv_rotated). dQ, for each query row
i and column c:
- per key tile j of the program's 128 keys, T_j[i, c] = Σ_{key in tile j} dS[i, key] K[key, c]: ONE wgmma chain from
  zero over the 128 keys (eight k16 steps; keys past N_k are TMA's zeros, so exact zeros);
- the T_j summed in an fp32 accumulator in global memory in a fixed order, the first one stored (a TMA store: the
  accumulator is not zeroed), each later one added by one fp32 addition, the TMA unit's reduce-add
  (`cp.reduce.async.bulk.tensor .add`, done in L2);
- dQ = fl32(acc · scale), rounded into the input format (the launcher: kernels/attention.py).
The order is fixed whatever the timing (deterministic, run to run bit for bit): a counter per (head, query tile) in
global memory says how many key tiles have added; the writer warp of a key tile waits (acquire) until its turn, issues
its two adds (or stores), waits until they are performed and releases the counter. Programs take the key tiles from
the highest one (rank r: program r runs key tile n_kt − 1 − r). Two orders:
- descending (rank order at every query tile): a program waits only on programs launched before it, so no deadlock
  on a grid larger than the GPU; but every query tile's adds form one chain of n_kt waits, and program r starts its
  adds r links behind program 0;
- rotated (the launcher's `rotate` = 1: a head's key tiles at most FUSED_ROTATE_KEY_TILES and the SM count): program
  r visits the n_full full query tiles from r mod n_full on, cyclically, and query tile q takes the adds by (step,
  rank) (full_tile_turn): no two programs add into one query tile at one step, so none waits in the steady state
  (1.03-1.12x the descending order at N = 8k-1k); a program may then wait on a later one, so all of a head's key
  tiles must run at once. The ragged query tile (partial: masked) comes first, by rank.
With fewer query tiles than key tiles each query tile's chain of adds outlasts the work beside it (the 0.35x above),
hence the launcher's N_k <= N_q. Under a band (BAND: causal, or a window without a left side whose right side reaches
the last key: attention._fused_band) the order is the descending one, which needs no rotation there: key tile j
visits its partial (diagonal) query tiles first, then the full ones ascending, so query tile q takes its adds from key
tiles q, q − 1, ... at steps 0, 1, ..., each after the earlier program's (band_tile_turn: the key tiles that see a
query tile are contiguous); the accumulator is zeroed (a query tile no key tile sees gets no add), and dK, dV are the
dK/dV kernel's bit for bit. The Precision states this sum (flashcheck.proofs.bounds.FusedDq: 128-key partials,
blocked, order-free; the rotated dK/dV chains; band_keys).

Partitions (gl.warp_specialize):
- two consumer warpgroups (gluon_bwd's), 64 keys each: Sᵀ, dPᵀ, Pᵀ, dV += Pᵀ dO, dSᵀ, dK += dSᵀ Q; each writes its 64
  rows of dSᵀ into a shared two-slot buffer [128 keys, 128 queries] and, once both halves are there (mbarrier
  `ds_full`), computes its half of the query tile's rows of the partial (A = dSᵀ's column half from shared memory,
  B = the program's K: 64 x 64 fp32, 32 registers a thread) and stages it (fp32) in one of two stage slots;
- gluon_bwd's producer warp (K, V once; then the (Q, dO) ring with LSE's and Δ's slices);
- the writer warp: the fixed order's waits and the TMA reduce-adds (no data in its registers).

Domain: fp16 / bf16, d = dv = 64, unbanded or a band the launcher gives it, no dense or block-sparse mask,
TMA-readable strides (gluon_bwd's).
"""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                             warpgroup_mma_wait)

from flashcheck.kernels.gluon_bwd import (HALF_N, _masked_t, _probabilities_t, _producer, _query_tiles,
                                          _write_dkdv, rotated_start)
from flashcheck.kernels.gluon_fwd import CONSUMER_REGS, LOG2E, _tma_store, barriers, cached_descriptor
from flashcheck.kernels.tiles import partial_start

_thread_barrier = getattr(gl, "barrier", None) or gl.thread_barrier  # renamed between Triton 3.6 and 3.9

if hasattr(tma, "async_atomic_add"):  # Triton 3.9's Gluon
    _tma_reduce_add = tma.async_atomic_add
else:  # Triton 3.6: the op and its builder exist (nvidia_gpu AsyncTMAReduceOp), the Gluon wrapper does not
    from triton._C.libtriton import ir as _ir
    from triton.experimental.gluon.language._core import builtin as _builtin

    @_builtin
    def _tma_reduce_add(tensor_desc, coord, src, _semantic=None):
        """cp.reduce.async.bulk.tensor .add: shared memory `src` added into the global tile at `coord` by the TMA
        unit (the add done in L2, fp32 here)."""
        coord = _semantic._convert_to_ir_values(coord, require_i64=False)
        _semantic.builder.create_async_tma_reduce(_ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord,
                                                  src.handle)

# shared_memory_descriptor's `_reinterpret` (Triton 3.6) is `reinterpret` in 3.9
NEW_REINTERPRET: gl.constexpr = gl.constexpr(hasattr(gl.shared_memory_descriptor, "reinterpret"))
DS_SLOTS: gl.constexpr = gl.constexpr(2)  # dSᵀ buffers: tile it writes slot it % 2 while tile it − 1's dQ reads
STAGE_SLOTS: gl.constexpr = gl.constexpr(2)  # fp32 partial stages: the consumers run a tile ahead of the writer
BLOCK_M_FUSED = 128  # query rows a tile (gluon_bwd's d = 64 dK/dV tile): the counters count tiles of this height
BLOCK_N_FUSED = 128  # keys a program: the partials' key tile (FusedDq.block_k)


def dq_stage_layout():
    """The fp32 partial's shared layout, unswizzled (a 64-column fp32 row is 256 bytes, over the 128-byte swizzle's
    span): the TMA reduce-add's source, and the accumulator descriptor's layout."""
    return gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=3)


def dq_acc_descriptor(acc):
    """The host-side TMA descriptor of the fp32 dQ accumulator viewed as (B·H, N_q, 64): boxes of one head's 64 rows
    (one consumer warpgroup's half of a query tile)."""
    return cached_descriptor(acc, [1, BLOCK_M_FUSED // 2, acc.shape[-1]], dq_stage_layout())


@gluon.jit
def _wait_turn(counter, target):
    """Until `counter` reaches `target` (acquire): one thread's ld.acquire.gpu, shared with the others through shared
    memory and a partition-local bar.sync (Triton's lowering of a scalar atomic)."""
    seen = gl.atomic_add(counter, 0, sem="acquire")
    while seen < target:
        seen = gl.atomic_add(counter, 0, sem="acquire")


@gluon.jit
def _release(counter):
    _thread_barrier()  # every thread's part done before the release
    gl.atomic_add(counter, 1, sem="release")


@gluon.jit
def full_tile_turn(q, rank, n_full, n_kt):
    """How many key tiles add into full query tile q before key tile `rank` (0 the highest) does, in the rotated
    order: rank r visits the n_full full query tiles from r mod n_full on, cyclically (its step at q is
    t = (q − r) mod n_full), and q takes the adds by (step, rank). The ranks at steps s < t are those r' = q − s
    (mod n_full): a = n_kt // n_full of each residue, one more for the b = n_kt % n_full residues below b; the ranks
    at step t before r are r − n_full, r − 2 n_full, ... (r // n_full of them). Plain integer arithmetic on
    non-negative values (Python's ints or the kernel's: tests/test_gluon_fused_bwd.py checks it against the sort)."""
    t = (q + n_full - rank % n_full) % n_full
    a = n_kt // n_full
    b = n_kt % n_full
    lo = q - t + 1  # the residues q − s, s < t: the cyclic interval [lo, q] mod n_full (lo may be negative)
    below_b = max(0, min(q, b - 1) - max(lo, 0) + 1) + max(0, b - lo - n_full)
    return a * t + below_b + rank // n_full


@gluon.jit
def band_tile_turn(start_m, start_n, Nq, n_kt, off_hi, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
    """How many key tiles add into the query tile at row start_m before the key tile at start_n does, under a band
    (descending order: the highest first). The key tiles that see a query tile are contiguous (each row's visible
    keys are an interval and consecutive rows' intervals touch), up to the one holding the tile's last row's last
    visible key (clipped to the last key tile); so the turn is that tile's index minus this one's. Plain integer
    arithmetic on non-negative values for a tile the key tile visits (tests/test_gluon_fused_bwd.py checks it against
    the emulation's band ranges)."""
    above = min(n_kt - 1, (min(start_m + BLOCK_M, Nq) - 1 + off_hi) // BLOCK_N)
    return above - start_n // BLOCK_N


@gluon.jit
def _bulk_complete(x):
    """Until this thread's bulk copies have completed, their writes performed (`cp.async.bulk.wait_group 0`, not the
    `.read` form `tma.store_wait` lowers to), then a proxy fence between them (async proxy) and the generic proxy's
    release that follows. `x`: any scalar (inline asm wants an argument); returns 0."""
    return gl.inline_asm_elementwise("cp.async.bulk.wait_group 0;\n\tfence.proxy.async.global;\n\tmov.u32 $0, 0;",
                                     "=r,r", [x], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _proxy_fence(x):
    """fence.proxy.async.global: the acquire just made (generic proxy) ordered before the TMA's global accesses."""
    return gl.inline_asm_elementwise("fence.proxy.async.global;\n\tmov.u32 $0, 0;", "=r,r", [x], dtype=gl.int32,
                                     is_pure=False, pack=1)


@gluon.jit
def _writer(Sem, acc_desc, dq_stage, stage_full, stage_free, off_b, off_hkv, Hq, start_n, Nq, Nk, off_lo, off_hi,
            rot, rotate, GROUP: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, BAND: gl.constexpr):
    # one warp: each tile's two staged partials added by the TMA unit in the fixed order: its turn come (the partial
    # tile, or any without rotation: the higher key tiles that see it have added; a full tile rotated:
    # full_tile_turn's count), the reduce-adds issued, waited for until performed, then the counter released
    ROWS: gl.constexpr = BLOCK_M // 2
    n_kt = (Nk + BLOCK_N - 1) // BLOCK_N
    rank = n_kt - 1 - start_n // BLOCK_N
    n_qt = (Nq + BLOCK_M - 1) // BLOCK_M
    n_full = gl.maximum(Nq // BLOCK_M, 1)  # (unbanded: the full query tiles are [0, Nq // BLOCK_M) of every head)
    it = 0
    for g in range(GROUP):
        off_h, n_partial, n_tiles, lo, f_lo, f_hi = _query_tiles(off_hkv, g, GROUP, start_n, Nq, Nk, off_lo, off_hi,
                                                                 BAND, BLOCK_N, BLOCK_M)
        bh = off_b * Hq + off_h
        for t in range(n_tiles):
            start_m = rotated_start(t, n_partial, n_tiles, lo, f_lo, f_hi, rot, BLOCK_M)  # the consumers' order
            counter = Sem + bh * n_qt + start_m // BLOCK_M
            if BAND:  # the higher key tiles that see the query tile
                turn = band_tile_turn(start_m, start_n, Nq, n_kt, off_hi, BLOCK_M, BLOCK_N)
            else:
                turn = gl.where((t < n_partial) | (rotate == 0), rank,
                                full_tile_turn(start_m // BLOCK_M, rank, n_full, n_kt))
            s = it % STAGE_SLOTS
            mbarrier.wait(stage_full.index(s), (it // STAGE_SLOTS) & 1)
            _wait_turn(counter, turn)
            _proxy_fence(bh)
            for w in gl.static_range(2):
                if turn == 0:  # the tile's first add: a store (the accumulator is not zeroed: 0 + T = T)
                    _tma_store(acc_desc, [bh, start_m + w * ROWS, 0], dq_stage.index(2 * s + w))
                else:
                    _tma_reduce_add(acc_desc, [bh, start_m + w * ROWS, 0], dq_stage.index(2 * s + w))
            _bulk_complete(bh)
            mbarrier.arrive(stage_free.index(s))
            _release(counter)
            it += 1


@gluon.jit
def _tile(dk, dv, it, k_smem, v_smem, k_all, q_ring, do_ring, lse_ring, delta_ring, ds_smem, q_ready, do_ready,
          tile_free, ds_full, ds_free, dq_stage, stage_full, stage_free, keys, start_m, qk_scale2, Nq, Nk, off_lo,
          off_hi, WG: gl.constexpr, MASKED: gl.constexpr, BAND: gl.constexpr, BLOCK_M: gl.constexpr,
          HEAD_D: gl.constexpr, STAGES: gl.constexpr, s_layout: gl.constexpr, a_layout: gl.constexpr,
          dq_layout: gl.constexpr):
    """gluon_bwd `_ring_tile` (the same dK, dV arithmetic) plus this warpgroup's half of dQ's partial over the
    program's keys, staged for the writer."""
    dtype: gl.constexpr = q_ring.dtype
    slot = it % STAGES
    phase = (it // STAGES) & 1
    mbarrier.wait(q_ready.index(slot), phase)
    mbarrier.wait(do_ready.index(slot), phase)
    q_smem = q_ring.index(slot).reshape([BLOCK_M, HEAD_D])
    do_smem = do_ring.index(slot).reshape([BLOCK_M, HEAD_D])
    # Sᵀ = K Qᵀ and dPᵀ = V dOᵀ issued together, the LSE slice read before them (its load not waiting behind the
    # sixteen wgmma steps), Pᵀ = exp2(min(S2ᵀ − LSE2, 0))
    pT, dpT = _probabilities_t(k_smem, v_smem, q_smem, do_smem, lse_ring.index(slot), qk_scale2, True, BLOCK_M,
                               s_layout)
    if MASKED:  # unbanded: only the ragged tiles' rows past Nq and keys past Nk are invisible; banded: the band too
        queries = start_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, s_layout))
        pT = _masked_t(pT, keys, queries, start_m, Nq, Nk, off_lo, off_hi, BAND, BLOCK_M, s_layout)
    # dS before dV's product is issued (gluon_bwd's order the other way round): Pᵀ's operand copy (32 registers a
    # thread) is then made after dPᵀ's fp32 values are spent, below the 240-register edge: Triton 3.6's tile loops
    # spill 12 local instructions (34 issuing dV first; banded 85, was 260), and against the two kernels the fused one
    # went 1.05-1.11x -> 1.08-1.17x unbanded, 0.83-0.85x -> 0.98-1.06x banded (bench/NOTES.md "Session 2026-11-30c";
    # the same arithmetic). gluon_bwd's d = 128 kernel, without that pressure, lost 2-3 % so.
    dpT = warpgroup_mma_wait(0, deps=(dpT, ))
    delta = delta_ring.index(slot).reshape([BLOCK_M]).load(gl.SliceLayout(0, s_layout))
    # dS = P ∘ (dP − Δ)   /   dS[i,j] = P[i,j] * (dP[i,j] − Δ[i]), rounded into the input format (dK's and dQ's
    # operand)
    ds16 = (pT * (dpT - delta[None, :])).to(dtype)
    # dV = Pᵀ dO   /   dv[j,c] += Σ_i p[i,j] dO[i,c]
    p_op = gl.convert_layout(pT.to(dtype), a_layout)
    dv = warpgroup_mma(p_op, do_smem, dv, is_async=True)
    # dSᵀ's 64 rows of this warpgroup into the shared slot (its previous use's dQ products done with it)
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
    # dQ's partial over the program's 128 keys, this warpgroup's half of the rows: one chain from zero
    #   T = dS K   /   T[i,c] = Σ_{j in the program's keys} dS[i,j] k[j,c]
    mbarrier.wait(ds_full.index(b), b_phase)
    ROWS: gl.constexpr = BLOCK_M // 2
    dq_zero = gl.zeros([ROWS, HEAD_D], gl.float32, dq_layout)
    dq = warpgroup_mma(ds_buf.slice(WG * ROWS, ROWS, dim=1).permute((1, 0)), k_all, dq_zero, use_acc=False,
                       is_async=True)
    dv, dk, dq, p_op, ds_op = warpgroup_mma_wait(0, deps=(dv, dk, dq, p_op, ds_op))
    mbarrier.arrive(ds_free.index(b))
    mbarrier.arrive(tile_free.index(slot))
    # the TMA's source: this warpgroup's own [ROWS, d] stage in slot it % STAGE_SLOTS, once the writer's adds from
    # that slot have completed
    s = it % STAGE_SLOTS
    mbarrier.wait(stage_free.index(s), ((it // STAGE_SLOTS) & 1) ^ 1)
    dq_stage.index(2 * s + WG).reshape([ROWS, HEAD_D]).store(dq)
    fence_async_shared()
    mbarrier.arrive(stage_full.index(s))
    return dk, dv


@gluon.jit
def _consumer(WG: gl.constexpr, dk_desc, dv_desc, k_halves, v_halves, q_ring, do_ring, lse_ring, delta_ring, ds_smem,
              kv_ready, q_ready, do_ready, tile_free, ds_full, ds_free, dq_stage, stage_full, stage_free, sm_scale,
              off_b, off_hkv, start_n, Nq, Nk, off_lo, off_hi, rot, GROUP: gl.constexpr, HEAD_D: gl.constexpr,
              BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, STAGES: gl.constexpr, BAND: gl.constexpr):
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_M, 16])
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, HEAD_D, 16])
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    k_smem = k_halves.index(WG).reshape([HALF_N, HEAD_D])
    v_smem = v_halves.index(WG).reshape([HALF_N, HEAD_D])
    # dQ's B operand over the program's 128 keys: at d = 64 both halves are one [BLOCK_N, d] tile (a row is one
    # 128-byte swizzle atom, which repeats every 8 rows: the same bytes)
    k_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, HEAD_D], k_halves.dtype)
    if NEW_REINTERPRET:
        k_all = k_halves.reinterpret(k_halves.dtype, [BLOCK_N, HEAD_D], k_layout)
    else:
        k_all = k_halves._reinterpret(k_halves.dtype, [BLOCK_N, HEAD_D], k_layout)
    keys = start_n + WG * HALF_N + gl.arange(0, HALF_N, layout=gl.SliceLayout(1, s_layout))
    dk = gl.zeros([HALF_N, HEAD_D], gl.float32, acc_layout)
    dv = gl.zeros([HALF_N, HEAD_D], gl.float32, acc_layout)
    qk_scale2 = sm_scale * LOG2E
    mbarrier.wait(kv_ready, 0)
    it = 0
    # GQA: dK, dV of kv head h sum over its query heads, in turn; unrolled (static_range): as a loop around the tile
    # loops its scalars spilled, 129 local instructions in the tile loops at GQA 2 (Triton 3.6; 88 unrolled, 34 at
    # GQA 1), and it ran 0.83x the two kernels (1.05-1.07x unrolled: bench/NOTES.md "Session 2026-11-30b")
    for g in gl.static_range(GROUP):
        off_h, n_partial, n_tiles, lo, f_lo, f_hi = _query_tiles(off_hkv, g, GROUP, start_n, Nq, Nk, off_lo, off_hi,
                                                                 BAND, BLOCK_N, BLOCK_M)
        # the partial tiles (masked), then the full ones: gluon_bwd's two loops
        for t in range(0, n_partial):
            dk, dv = _tile(dk, dv, it, k_smem, v_smem, k_all, q_ring, do_ring, lse_ring, delta_ring, ds_smem, q_ready,
                           do_ready, tile_free, ds_full, ds_free, dq_stage, stage_full, stage_free, keys,
                           partial_start(t, None, lo, f_lo, f_hi, False, BLOCK_M), qk_scale2, Nq, Nk, off_lo, off_hi,
                           WG, True, BAND, BLOCK_M, HEAD_D, STAGES, s_layout, a_layout, acc_layout)
            it += 1
        # the full tiles from the rot-th on, cyclically (gluon_bwd.rotated_start): f_lo = 0 unbanded
        start_m = f_lo + rot * BLOCK_M
        end_m = f_lo + (n_tiles - n_partial) * BLOCK_M  # f_hi
        for t in range(0, n_tiles - n_partial):
            dk, dv = _tile(dk, dv, it, k_smem, v_smem, k_all, q_ring, do_ring, lse_ring, delta_ring, ds_smem, q_ready,
                           do_ready, tile_free, ds_full, ds_free, dq_stage, stage_full, stage_free, keys, start_m,
                           qk_scale2, Nq, Nk, off_lo, off_hi, WG, False, BAND, BLOCK_M, HEAD_D, STAGES, s_layout,
                           a_layout, acc_layout)
            start_m = gl.where(start_m + BLOCK_M == end_m, f_lo, start_m + BLOCK_M)
            it += 1
    # the other warpgroup's dQ products read both K halves until its last tile: wait for its last ds_free arrival
    # before this half is overwritten with dK
    if it > 0:
        last = it - 1
        mbarrier.wait(ds_free.index(last % DS_SLOTS), (last // DS_SLOTS) & 1)
    _write_dkdv(WG, dk, dv, sm_scale, dk_desc, dv_desc, k_halves, v_halves, off_b, off_hkv, start_n, HEAD_D)


@gluon.jit
def attn_bwd_fused_gluon_kernel(
    q_desc, k_desc, v_desc, do_desc, dk_desc, dv_desc, lse_desc, delta_desc, acc_desc, Sem,
    sm_scale, Nq, Nk, Hkv, rotate, off_lo, off_hi,
    GROUP: gl.constexpr, HEAD_D: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
    STAGES: gl.constexpr, BAND: gl.constexpr,
):
    gl.static_assert(BLOCK_N == 2 * HALF_N, "two consumer warpgroups of HALF_N keys each")
    gl.static_assert(HEAD_D == 64, "head dim 64: two stage slots of fp32 partials fit in shared memory there only")
    gl.static_assert(BLOCK_M == 2 * HALF_N, "each warpgroup's dQ share is half of a 128-row query tile")
    n_kt = (Nk + BLOCK_N - 1) // BLOCK_N
    rank = gl.program_id(0)
    start_n = (n_kt - 1 - rank) * BLOCK_N  # the highest key tile first (rank 0)
    # rotate (0 or 1, the launcher's): rank r takes the full query tiles from r mod n_full on (waits may then go to
    # later programs: the launcher rotates only where all of a head's key-tile programs fit on the GPU at once)
    rot = (rank % gl.maximum(Nq // BLOCK_M, 1)) * rotate
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
    # each warpgroup's fp32 partial [64, d] in each stage slot (index 2 · slot + warpgroup): 64 KB
    dq_stage = gl.allocate_shared_memory(gl.float32, [2 * STAGE_SLOTS, 1, BLOCK_M // 2, HEAD_D], acc_desc.layout)
    kv_ready = barriers(1, 1).index(0)
    q_ready = barriers(STAGES, 1)
    do_ready = barriers(STAGES, 1)
    tile_free = barriers(STAGES, 2)
    ds_full = barriers(DS_SLOTS, 2)  # both warpgroups' dSᵀ rows written
    ds_free = barriers(DS_SLOTS, 2)  # both warpgroups' dQ products done reading the slot
    stage_full = barriers(STAGE_SLOTS, 2)  # both warpgroups' partials staged in the slot
    stage_free = barriers(STAGE_SLOTS, 1)  # the writer's adds from the slot have completed
    fence_async_shared()

    gl.warp_specialize([
        (_consumer, (0, dk_desc, dv_desc, k_halves, v_halves, q_ring, do_ring, lse_ring, delta_ring, ds_smem,
                     kv_ready, q_ready, do_ready, tile_free, ds_full, ds_free, dq_stage, stage_full, stage_free,
                     sm_scale, off_b, off_hkv, start_n, Nq, Nk, off_lo, off_hi, rot, GROUP, HEAD_D, BLOCK_N, BLOCK_M,
                     STAGES, BAND)),
        (_consumer, (1, dk_desc, dv_desc, k_halves, v_halves, q_ring, do_ring, lse_ring, delta_ring, ds_smem,
                     kv_ready, q_ready, do_ready, tile_free, ds_full, ds_free, dq_stage, stage_full, stage_free,
                     sm_scale, off_b, off_hkv, start_n, Nq, Nk, off_lo, off_hi, rot, GROUP, HEAD_D, BLOCK_N, BLOCK_M,
                     STAGES, BAND)),
        (_producer, (q_desc, k_desc, v_desc, do_desc, lse_desc, delta_desc, k_halves, v_halves, q_ring, do_ring,
                     lse_ring, delta_ring, kv_ready, q_ready, do_ready, tile_free, off_b, off_hkv, Hq, start_n, Nq, Nk,
                     off_lo, off_hi, rot, GROUP, BAND, BLOCK_N, BLOCK_M, STAGES, True)),
        (_writer, (Sem, acc_desc, dq_stage, stage_full, stage_free, off_b, off_hkv, Hq, start_n, Nq, Nk, off_lo,
                   off_hi, rot, rotate, GROUP, BLOCK_N, BLOCK_M, BAND)),
    ], [4, 1, 1], [CONSUMER_REGS, 24, 24])

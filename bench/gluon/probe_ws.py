"""Compile-only probe (issue 10): a warp-specialized Hopper Gluon kernel in the API subset common to Triton 3.6 and
3.9. A 1-warp producer partition loads K tiles into a two-slot shared-memory ring and signals an mbarrier per slot; the
default partition (one warpgroup) waits on it, multiplies its Q tile by each K tile with warpgroup_mma and signals the
slot free; worker registers reallocated (worker_num_regs, setmaxnreg). The skeleton FA3's producer / consumer split
needs. No GPU needed: GluonASTSource + triton.compile with a target.

    PYTHONPATH=$PWD python3 bench/gluon/probe_ws.py
"""
from __future__ import annotations

import triton
from triton.backends.compiler import GPUTarget
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mbarrier
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma

SLOTS = 2


@gluon.jit
def _producer(K, k_ring, ready, free, n_tiles, BLOCK: gl.constexpr, D: gl.constexpr):
    # one warp: K tile t -> slot t % 2 (transposed, as the MMA's B operand), then ready[slot]
    blocked: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [1, 1], [1, 0])
    rows = gl.arange(0, BLOCK, layout=gl.SliceLayout(1, blocked))
    cols = gl.arange(0, D, layout=gl.SliceLayout(0, blocked))
    for t in range(n_tiles):
        slot = t % 2
        mbarrier.wait(free.index(slot), ((t // 2) & 1) ^ 1)  # the consumer let go of this slot (first round: free)
        k = gl.load(K + (t * BLOCK + rows)[:, None] * D + cols[None, :])
        k_ring.index(slot).store(gl.permute(k, [1, 0]))
        fence_async_shared()
        mbarrier.arrive(ready.index(slot))


@gluon.jit
def _consumer(Q, S, k_ring, ready, free, n_tiles, BLOCK: gl.constexpr, D: gl.constexpr):
    blocked: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    smem: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    rows = gl.arange(0, BLOCK, layout=gl.SliceLayout(1, blocked))
    cols = gl.arange(0, D, layout=gl.SliceLayout(0, blocked))
    q_s = gl.allocate_shared_memory(gl.float16, [BLOCK, D], smem, gl.load(Q + rows[:, None] * D + cols[None, :]))
    fence_async_shared()
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK, 16])
    srows = gl.arange(0, BLOCK, layout=gl.SliceLayout(1, blocked))
    scols = gl.arange(0, BLOCK, layout=gl.SliceLayout(0, blocked))
    for t in range(n_tiles):
        slot = t % 2
        mbarrier.wait(ready.index(slot), (t // 2) & 1)
        acc = warpgroup_mma(q_s, k_ring.index(slot), gl.zeros([BLOCK, BLOCK], gl.float32, layout=mma))
        mbarrier.arrive(free.index(slot))
        gl.store(S + (t * BLOCK + srows)[:, None] * BLOCK + scols[None, :], gl.convert_layout(acc, blocked))


@gluon.jit
def qk_tiles_ws(Q, K, S, n_tiles, BLOCK: gl.constexpr, D: gl.constexpr):
    smem_t: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2, transposed=True)
    k_ring = gl.allocate_shared_memory(gl.float16, [2, D, BLOCK], smem_t)
    ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    free = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(free.index(i), count=1)
    gl.warp_specialize([(_consumer, (Q, S, k_ring, ready, free, n_tiles, BLOCK, D)),
                        (_producer, (K, k_ring, ready, free, n_tiles, BLOCK, D))], [1], [24])


def main():
    src = gluon._runtime.GluonASTSource(fn=qk_tiles_ws, signature={"Q": "*fp16", "K": "*fp16", "S": "*fp32",
                                                                   "n_tiles": "i32", "BLOCK": "constexpr",
                                                                   "D": "constexpr"},
                                        constexprs={"BLOCK": 64, "D": 64})
    ck = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    ptx = ck.asm["ptx"]
    print(f"triton {triton.__version__}: compiled; wgmma {ptx.count('wgmma.mma_async')}, setmaxnreg "
          f"{ptx.count('setmaxnreg')}, mbarrier waits {ptx.count('mbarrier.try_wait')}")


if __name__ == "__main__":
    main()

"""Compile-only probe (issue 10): does a minimal Hopper Gluon kernel (global -> shared memory, one warpgroup_mma of a
64 x 64 Q tile by a 64 x 64 K^T tile, fp32 accumulator, store) compile for sm_90a with the installed Triton? The
route to FA3's schedule (ping-pong warpgroups, producer warps, register reallocation) goes through Gluon; Triton 3.6
(the GPU host) and 3.9 (CI) must both build it. No GPU needed: GluonASTSource + triton.compile with a target.

    PYTHONPATH=$PWD python3 bench/gluon/probe_wgmma.py
"""
from __future__ import annotations

import triton
from triton.backends.compiler import GPUTarget
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma


@gluon.jit
def qk_tile(Q, K, S, BLOCK: gl.constexpr, D: gl.constexpr):
    # S[i, j] = sum_c Q[i, c] K[j, c]: one warpgroup (4 warps), one 64 x 64 tile, fp32 accumulation
    blocked: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    rows = gl.arange(0, BLOCK, layout=gl.SliceLayout(1, blocked))
    cols = gl.arange(0, D, layout=gl.SliceLayout(0, blocked))
    offs = rows[:, None] * D + cols[None, :]
    q = gl.load(Q + offs)
    k = gl.load(K + offs)
    smem: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    smem_t: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2, transposed=True)
    q_s = gl.allocate_shared_memory(gl.float16, [BLOCK, D], smem, q)
    kt_s = gl.allocate_shared_memory(gl.float16, [D, BLOCK], smem_t, gl.permute(k, [1, 0]))
    fence_async_shared()
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK, 16])
    acc = gl.zeros([BLOCK, BLOCK], gl.float32, layout=mma)
    acc = warpgroup_mma(q_s, kt_s, acc)
    out = gl.convert_layout(acc, blocked)
    srows = gl.arange(0, BLOCK, layout=gl.SliceLayout(1, blocked))
    scols = gl.arange(0, BLOCK, layout=gl.SliceLayout(0, blocked))
    gl.store(S + srows[:, None] * BLOCK + scols[None, :], out)


def main():
    src = gluon._runtime.GluonASTSource(fn=qk_tile, signature={"Q": "*fp16", "K": "*fp16", "S": "*fp32",
                                                               "BLOCK": "constexpr", "D": "constexpr"},
                                        constexprs={"BLOCK": 64, "D": 64})
    ck = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    ptx = ck.asm["ptx"]
    print(f"triton {triton.__version__}: compiled, wgmma instructions in the PTX: {ptx.count('wgmma.mma_async')}")


if __name__ == "__main__":
    main()

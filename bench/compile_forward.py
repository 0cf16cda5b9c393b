"""Compile our forward kernel ahead of time for sm_90 (no GPU needed: Triton builds PTX and the cubin
from its own toolchain) and print what the bounds assume about its arithmetic: how the exponent
argument S2 - m is formed (one fma, or a rounded product then a subtraction), the exp2 instruction, and
the layout of the tile's rowsum (tt.reduce in the TTGIR) with its adds and shuffles in the PTX.

    PYTHONPATH=. python3 bench/compile_forward.py --dtype bfloat16 --d 64 [--dump DIR]

Runs on the device too (the compiled form on the device's Triton is the one that counts)."""
from __future__ import annotations

import argparse
import os
import re

import torch
import triton
from triton.backends.compiler import GPUTarget

from flashcheck.kernels.attention import Layout, forward_launch
from flashcheck.kernels.triton_fwd import attn_fwd_kernel

_DOT = {"float32:ieee": "ieee", "float32:tf32": "tf32", "float16": "fp16", "bfloat16": "bf16"}


def _signature(launch):
    names = attn_fwd_kernel.arg_names
    ptr = {"float32": "*fp32", "float16": "*fp16", "bfloat16": "*bf16", "int8": "*i8", "int32": "*i32"}
    sig, cx = {}, dict(launch.constexprs)
    leading = list(launch.pointers) + [None]  # + sm_scale
    i = 0
    for n in names:
        if n in cx:
            sig[n] = "constexpr"
        elif i < len(launch.pointers):
            sig[n] = ptr[launch.pointers[i][0]]
            i += 1
        elif n == "sm_scale":
            sig[n] = "fp32"
        else:
            sig[n] = "i32"
    return sig, cx


def compile_forward(dtype: str, d: int, nq: int, nk: int, dot: str, p_split: bool = False):
    q = Layout.dense(dtype, (1, 1, nq, d))
    k = Layout.dense(dtype, (1, 1, nk, d))
    launch = forward_launch(q, k, k, q, None, None, band=False, off_lo=0, off_hi=0, block_q=0, block_k=0,
                            dot=dot, p_split=p_split, save_res=False, tiles=[], interpret=False)
    sig, cx = _signature(launch)
    src = triton.compiler.ASTSource(fn=attn_fwd_kernel, signature=sig, constexprs=cx)
    opts = {"num_warps": launch.num_warps, "num_stages": launch.num_stages}
    return launch, triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--dot", default=None, help="ieee / tf32 for float32")
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--dump", default=None)
    a = ap.parse_args()
    dot = a.dot or ("ieee" if a.dtype == "float32" else "tf32")  # fp16/bf16 operands: the launcher's spelling
    launch, ck = compile_forward(a.dtype, a.d, 4096, 4096, dot)
    print(f"triton {triton.__version__} dtype {a.dtype} dot {dot} d {a.d} constexprs {dict(launch.constexprs)} "
          f"warps {launch.num_warps} stages {launch.num_stages}")
    ttgir, ptx = ck.asm["ttgir"], ck.asm["ptx"]
    for line in ttgir.splitlines():
        if "tt.reduce\"" in line or re.match(r"#(blocked|mma|linear)\w* =", line.strip()):
            print("TTGIR", line.strip()[:220])
    counts = {op: len(re.findall(rf"\b{re.escape(op)}\b", ptx))
              for op in ("ex2.approx.f32", "ex2.approx.ftz.f32", "fma.rn.f32", "mul.f32", "sub.f32", "add.f32",
                         "shfl.sync.bfly.b32", "wgmma.mma_async.sync.aligned", "mma.sync.aligned")}
    print("PTX counts", counts)
    if a.dump:
        os.makedirs(a.dump, exist_ok=True)
        tag = f"{a.dtype}_{dot}_d{a.d}_triton{triton.__version__}"
        for kind in ("ttgir", "llir", "ptx"):
            with open(os.path.join(a.dump, f"fwd_{tag}.{kind}"), "w") as f:
                f.write(ck.asm[kind])


if __name__ == "__main__":
    main()

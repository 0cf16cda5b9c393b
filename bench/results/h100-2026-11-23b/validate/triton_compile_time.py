"""Triton compile time of our forward kernel for sm_90 (H100) on this CPU: one specialization."""
import time, sys
import triton
from triton.compiler import ASTSource
from triton.backends.compiler import GPUTarget
from flashcheck.kernels.triton_fwd import attn_fwd_kernel
from flashcheck.kernels.attention import kernel_config
import torch
fn = attn_fwd_kernel
names = fn.arg_names
ptrs = {"Q": "*bf16", "K": "*bf16", "V": "*bf16", "O": "*bf16", "ORes": "*bf16", "LSE": "*fp32", "Mask": "*bf16",
        "KvNum": "*fp32", "KvIdx": "*fp32", "FullNum": "*fp32", "FullIdx": "*fp32"}
def compile_one(d, group, band, mask):
    cfg = kernel_config(d, torch.bfloat16).fwd
    bd = max(16, triton.next_power_of_2(d))
    const = dict(GROUP=group, HEAD_D=d, HEAD_DV=d, BLOCK_D=bd, BLOCK_DV=bd, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                 BAND=band, HAS_MASK=mask, SPARSE=False, DOT_PRECISION="tf32", P_SPLIT=False, WRITE_RES=False)
    sig = {}
    for n in names:
        if n in const: sig[n] = "constexpr"
        elif n in ptrs: sig[n] = ptrs[n]
        elif n == "sm_scale": sig[n] = "fp32"
        else: sig[n] = "i32"
    src = ASTSource(fn, sig, constexprs={(names.index(k),): v for k, v in const.items()})
    t = time.time()
    triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": cfg.num_warps, "num_stages": cfg.num_stages})
    return time.time() - t
for args in [(64, 1, False, False), (128, 2, True, False), (80, 1, True, True), (256, 4, False, True)]:
    print(args, f"{compile_one(*args):.2f} s", flush=True)

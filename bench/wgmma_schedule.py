"""What the compilers make of the forward kernel's loops on Hopper, without a GPU: compiles
`attn_fwd_kernel` ahead of time for sm_90a (Triton's bundled ptxas) with and without
TileConfig.pipeline_qk and reports, per tile configuration:

- smem: shared memory the binary asks for (the H100 gives a block at most 227 KiB; more and the launch
  falls back to fewer stages, `attention._launch_fitting`);
- in flight: the wgmma products Triton leaves running past the next instructions (`ttng.warp_group_dot`
  not followed at once by its `warp_group_dot_wait`), by name: `acc` a P̃·V product, `qk` a Q Kᵀ one
  (the pipelined loop's: Q K_{t+1}ᵀ running during tile t's exponentials; its P̃·V are waited for);
- regs / spill: ptxas -v; C7514: ptxas's "wgmma serialized" warning (then nothing overlaps at all).

    PYTHONPATH=. python3 bench/wgmma_schedule.py [--configs d,bm,bn,warps,stages;...] [--out DIR]

Contiguous bf16 (B, H, N, d) tensors as the benchmark's (pointers 16-byte aligned, strides and N
divisible by 16), no mask, GROUP 1. Runs on the CPU (no CUDA needed) and on the GPU machine alike;
the binaries are those of the installed Triton, so run it with the Triton that will run the kernel.
"""
import argparse
import dataclasses
import inspect
import os
import re
import subprocess
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from flashcheck.kernels.triton_fwd import attn_fwd_kernel

H100_SMEM = 232448  # bytes: the largest dynamic shared memory a block may opt into on sm_90
DEFAULT_CONFIGS = "128,128,128,8,3;128,128,128,8,2;128,128,64,8,3;128,64,64,4,2;64,64,64,4,3;64,128,64,8,3"


@dataclasses.dataclass(frozen=True)
class Schedule:
    """One compiled variant: the tile (d, block_m × block_n, warps, stages), causal, pipeline_qk, and
    what came out (module docstring)."""
    d: int
    tile: str
    causal: bool
    pipeline_qk: bool
    smem: int
    in_flight: tuple
    regs: int
    spill_bytes: int
    serialized: bool


def _compile(d, bm, bn, warps, stages, causal, pipe):
    params = list(inspect.signature(attn_fwd_kernel.fn).parameters)
    pointers = {"Q": "*bf16", "K": "*bf16", "V": "*bf16", "O": "*bf16", "ORes": "*bf16", "LSE": "*fp32",
                "Mask": "*bf16", "KvNum": "*i32", "KvIdx": "*i32", "FullNum": "*i32", "FullIdx": "*i32"}
    consts = dict(GROUP=1, HEAD_D=d, HEAD_DV=d, BLOCK_D=d, BLOCK_DV=d, BLOCK_M=bm, BLOCK_N=bn, BAND=causal,
                  HAS_MASK=False, SPARSE=False, DOT_PRECISION="tf32", P_SPLIT=False, WRITE_RES=False,
                  KV_DESC=False, WARP_SPEC=False, PIPE_QK=pipe)
    sig = {p: "constexpr" if p in consts else pointers.get(p, "fp32" if p == "sm_scale" else "i32")
           for p in params}
    # As a launch on contiguous tensors specializes: aligned pointers, strides and N divisible by 16.
    div = set(pointers) | {p for p in params if p.startswith("stride_")} | {"Nq", "Nk"}
    attrs = {(params.index(p),): [["tt.divisibility", 16]] for p in div}
    src = ASTSource(attn_fwd_kernel, sig, constexprs=consts, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options=dict(num_warps=warps, num_stages=stages))


def _in_flight(ttgir: str) -> tuple:
    """Names of the asynchronous wgmma results not waited for by the next operation (a wgmma without
    isAsync, outside the pipelined loops, is waited for where it stands)."""
    lines = [ln.strip() for ln in ttgir.splitlines() if ln.strip() and not ln.strip().startswith("ttng.fence")]
    out = []
    for i, ln in enumerate(lines):
        m = re.match(r"(%[\w.]+) = ttng\.warp_group_dot ", ln)
        if m and "isAsync = true" in ln and not (i + 1 < len(lines) and "warp_group_dot_wait " + m.group(1) in lines[i + 1]):
            out.append(re.sub(r"_\d+$", "", m.group(1)[1:]))
    return tuple(out)


def _ptxas(ptx: str) -> tuple:
    """(registers, spill-store bytes, serialized) from ptxas -v of the bundled ptxas that accepts this PTX."""
    bindir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as fh:
        fh.write(ptx)
    try:
        for exe in ("ptxas", "ptxas-blackwell"):
            path = os.path.join(bindir, exe)
            if not os.path.exists(path):
                continue
            r = subprocess.run([path, "-arch=sm_90a", "-v", fh.name, "-o", os.devnull], capture_output=True,
                               text=True)
            if r.returncode == 0:
                regs = re.search(r"Used (\d+) registers", r.stderr)
                spill = re.search(r"(\d+) bytes spill stores", r.stderr)
                return (int(regs.group(1)) if regs else -1, int(spill.group(1)) if spill else -1,
                        "C7514" in r.stderr)
        return -1, -1, False
    finally:
        os.unlink(fh.name)


def schedules(configs: str = DEFAULT_CONFIGS) -> list:
    out = []
    for cfg in configs.split(";"):
        d, bm, bn, warps, stages = (int(x) for x in cfg.split(","))
        for causal in (False, True):
            for pipe in (False, True):
                tile = f"{bm}x{bn}/{warps}w/{stages}s"
                try:
                    k = _compile(d, bm, bn, warps, stages, causal, pipe)
                except Exception as e:  # noqa: BLE001 - a variant that does not compile is reported
                    print(f"d={d} {tile} causal={causal} pipeline_qk={pipe}: {type(e).__name__}: "
                          f"{str(e).splitlines()[0] if str(e) else ''}"[:300], flush=True)
                    continue
                regs, spill, serialized = _ptxas(k.asm["ptx"])
                s = Schedule(d, tile, causal, pipe, k.metadata.shared, _in_flight(k.asm["ttgir"]), regs, spill,
                             serialized)
                out.append(s)
                print(f"d={d:3} {tile:15} causal={causal!s:5} pipeline_qk={pipe!s:5} smem {s.smem:6d}"
                      f"{'' if s.smem <= H100_SMEM else ' (> H100)':9} regs {regs:3} spill {spill:4} "
                      f"{'C7514 serialized' if serialized else '':16} in flight: {', '.join(s.in_flight)}",
                      flush=True)
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default=DEFAULT_CONFIGS, help="d,block_m,block_n,warps,stages;...")
    ap.add_argument("--out", default=None, help="write wgmma_schedule.json here")
    a = ap.parse_args()
    print(f"triton {triton.__version__}, sm_90a, ahead of time (no GPU used)")
    res = schedules(a.configs)
    if a.out:
        import json
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "wgmma_schedule.json"), "w") as fh:
            json.dump(dict(triton=triton.__version__, rows=[dataclasses.asdict(r) for r in res]), fh, indent=1)

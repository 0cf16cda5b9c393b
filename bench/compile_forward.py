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

def _signature(launch):
    """(signature, constexprs, attrs) of the launch as Triton's JIT specializes it (flashcheck.warmup.triton_binary):
    16-byte aligned pointers and ints divisible by 16 get tt.divisibility 16, ints equal to 1 become constants
    (the form triton/tools/compile.py passes to ASTSource)."""
    names = attn_fwd_kernel.arg_names
    ptr = {"float32": "*fp32", "float16": "*fp16", "bfloat16": "*bf16", "int8": "*i8", "int32": "*i32"}
    sig, cx, attrs = {}, dict(launch.constexprs), {}
    ints = iter(launch.ints)
    i_ptr = 0
    for i, n in enumerate(names):
        if n in cx:
            sig[n] = "constexpr"
        elif i_ptr < len(launch.pointers):
            dtype, aligned = launch.pointers[i_ptr]
            sig[n] = ptr[dtype]
            if aligned:
                attrs[(i,)] = [["tt.divisibility", 16]]
            i_ptr += 1
        elif n == "sm_scale":
            sig[n] = "fp32"
        else:
            x = next(ints)
            if x == 1:
                sig[n], cx[n] = "constexpr", 1
            else:
                sig[n] = "i32"
                if x % 16 == 0:
                    attrs[(i,)] = [["tt.divisibility", 16]]
    return sig, cx, attrs


def compile_forward(dtype: str, d: int, nq: int, nk: int, dot: str, p_split: bool = False, variant: str = "plain",
                    aligned: bool = True):
    """Compile the forward for one call's Layouts, specialized as Triton's JIT would (_signature). variant:
    "plain", "band" (causal / window), "mask" (a dense int8 mask); aligned False: K/V not 16-byte aligned (pointer
    loads instead of tensor descriptors where the tile config asks for them)."""
    q = Layout.dense(dtype, (1, 1, nq, d))
    k = Layout.dense(dtype, (1, 1, nk, d))
    if not aligned:
        k = Layout(k.dtype, k.shape, k.strides, aligned=False)
    dense = Layout.dense("int8", (1, 1, nq, nk)) if variant == "mask" else None
    # no block-sparse variant: its tiles are the mask's (BlockSparseMask), not kernel_config's; nothing is claimed there
    launch = forward_launch(q, k, k, q, dense, None, band=variant == "band", off_lo=0, off_hi=0,
                            block_q=0, block_k=0, dot=dot, p_split=p_split,
                            save_res=False, tiles=[], interpret=False)
    sig, cx, attrs = _signature(launch)
    src = triton.compiler.ASTSource(fn=attn_fwd_kernel, signature=sig, constexprs=cx, attrs=attrs)
    opts = {"num_warps": launch.num_warps, "num_stages": launch.num_stages}
    return launch, triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)


_INSTR = re.compile(r"^\s*(?:@!?%\w+\s+)?([a-z][\w.]*)\s+([^;]*);")


def _operands(text: str) -> list[str]:
    """PTX operands, a vector {%a, %b} as its registers, an address [..] as one operand."""
    out, cur, level = [], "", 0
    for ch in text:
        if ch in "{[":
            level += 1
        elif ch in "}]":
            level -= 1
        if ch == "," and level == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    return out


def _regs(operand: str) -> list[str]:
    return re.findall(r"%\w+", operand) if operand.startswith("{") else [operand]


def rowsum_depths(ptx: str) -> dict:
    """The tile rowsums' addition trees, read off the PTX by data flow: every ex2.approx result is a leaf
    (depth 0); add.f32 gives max(depth of its operands) + 1; a butterfly shuffle or a move keeps the depth (the
    other lane runs the same code); a value loaded from shared memory after tracked values were stored there
    gets the deepest of them (a cross-warp reduction through shared memory; conservative: an unrelated load only
    deepens what it feeds); a tracked value converted to f64 (`cvt.f64.f32`, l = l alpha + rowsum in fp64) is a
    rowsum: its depth and its leaf count (this lane's and the shuffled lanes') are recorded. Returns {"depths",
    "widths": the sorted sets over the rowsums, "sinks", "leaves": the ex2 count, "escaped": opcodes that
    consumed a tracked value otherwise}. max(depths) is Precision.rowsum_depth where every rowsum counts the
    tile's BLOCK_N keys (no partial sum left the tree unseen)."""
    depth: dict[str, int] = {}
    count: dict[str, int] = {}
    sinks: list[int] = []
    widths: list[int] = []
    escaped: dict[str, int] = {}
    smem = None  # (deepest, largest count) of the tracked values stored to shared memory so far
    leaves = 0
    for line in ptx.splitlines():
        m = _INSTR.match(line)
        if not m:
            continue
        op, args = m.group(1), _operands(m.group(2))
        if op.startswith("st.shared"):
            regs = [r for a in args[1:] for r in _regs(a) if r in depth]
            if regs:
                d, c = max(depth[r] for r in regs), max(count[r] for r in regs)
                smem = (d, c) if smem is None else (max(smem[0], d), max(smem[1], c))
            continue
        dsts, srcs = _regs(args[0]), args[1:]
        if op.startswith("ld.shared") and smem is not None and re.search(r"\.(f32|b32)$", op):
            for r in dsts:
                depth[r], count[r] = smem
            continue
        tracked = [a for a in srcs if a in depth]
        if op.startswith("ex2.approx"):
            depth[dsts[0]], count[dsts[0]] = 0, 1
            leaves += 1
            continue
        if not tracked:
            for r in dsts:
                depth.pop(r, None)  # a register reassigned (loop-carried moves) stops being tracked
            continue
        dst = dsts[0]
        if re.fullmatch(r"add(\.rn)?(\.ftz)?\.f32", op):
            depth[dst] = max(depth[a] for a in tracked) + 1
            count[dst] = sum(count[a] for a in tracked)
        elif op.startswith("shfl.sync.bfly") or op in ("mov.b32", "mov.f32"):
            depth[dst], count[dst] = depth[tracked[0]], count[tracked[0]]
        elif op == "cvt.f64.f32":
            sinks.append(depth[tracked[0]])
            widths.append(count[tracked[0]])
            depth.pop(dst, None)
        else:
            escaped[op] = escaped.get(op, 0) + 1
            for r in dsts:
                depth.pop(r, None)
    return {"depths": sorted(set(sinks)), "widths": sorted(set(widths)), "sinks": len(sinks), "leaves": leaves,
            "alpha_sinks": sum(1 for d, w in zip(sinks, widths) if (d, w) == (0, 1)), "escaped": escaped}


def exp_argument_forms(ptx: str) -> dict:
    """How each ex2.approx argument is formed: the opcode that last wrote it (fma.rn.f32: the fused
    qk * c - m; sub.f32: a subtraction of a rounded product), counted."""
    writer: dict[str, str] = {}
    forms: dict[str, int] = {}
    for line in ptx.splitlines():
        m = _INSTR.match(line)
        if not m:
            continue
        op, args = m.group(1), [a.strip() for a in m.group(2).split(",")]
        if op.startswith("ex2.approx"):
            w = writer.get(args[1], "?")
            forms[w] = forms.get(w, 0) + 1
        writer[args[0]] = op
    return forms


def fused_exp_argument(rowsum: dict, forms: dict) -> bool:
    """Whether an unmasked call's PTX has the forms of Precision.exp_argument "fma": full tiles run the fused
    fl32(qk c - m), the ragged tile fl32(fl32(qk c) - m), so every ex2 argument is written by fma.rn.f32 (a full
    tile's P~) or sub.f32 (the ragged tile's P~ and each row's alpha, the depth-0 rowsum sinks), and the full and the
    ragged tile hold equally many P~ per thread. rowsum: rowsum_depths(ptx); forms: exp_argument_forms(ptx)."""
    n_fma, n_sub = forms.get("fma.rn.f32", 0), forms.get("sub.f32", 0)
    return set(forms) <= {"fma.rn.f32", "sub.f32"} and n_fma > 0 and n_fma == n_sub - rowsum["alpha_sinks"]


def _record_one(job):
    dtype, dot, d, p_split = job
    depths, fused, variants = [], True, {}
    # Triton specializes on 16-byte alignment and divisibility by 16: N = 4096 with aligned tensors, and N = 4099
    # (strides and sizes not divisible) with unaligned K, V, each plain, causal and with a dense mask
    for variant in ("plain", "band", "mask"):
        for n, aligned in ((4096, True), (4099, False)):
            launch, ck = compile_forward(dtype, d, n, n, dot, p_split, variant, aligned)
            cx = dict(launch.constexprs)
            r = rowsum_depths(ck.asm["ptx"])
            forms = exp_argument_forms(ck.asm["ptx"])
            width = cx["BLOCK_N"]
            ok = set(r["widths"]) <= {1, width} and width in r["widths"]
            depths.append(max(r["depths"]) if ok else None)
            if variant == "plain":  # masked calls (band, dense mask) are not claimed
                fused = fused and fused_exp_argument(r, forms)
            variants[f"{variant}{'' if aligned else '/ragged_unaligned'}"] = {
                "kv_desc": cx["KV_DESC"], "rowsum": r, "ex2_argument_writers": forms}
    return {"dtype": dtype, "dot": dot, "block_d": cx["BLOCK_D"], "block_m": cx["BLOCK_M"], "block_n": cx["BLOCK_N"],
            "num_warps": launch.num_warps, "p_split": p_split,
            "rowsum_depth": None if None in depths else max(depths),
            "exp_argument": "fma" if fused else "unknown", "variants": variants}


def record(path: str, workers: int) -> None:
    """Compile the forward for every (dtype, dot, padded head dim, precision mode) kernel_config serves, each in
    its variants, and write the rowsum depths and the exp arguments' forms (the record `flashcheck.adapters.
    ours_precision` reads for this Triton version)."""
    import json
    from concurrent.futures import ProcessPoolExecutor

    jobs = []
    for dtype, dot in (("float16", "tf32"), ("bfloat16", "tf32"), ("float32", "ieee"), ("float32", "tf32")):
        for d in (16, 32, 64, 128, 256):
            for p_split in ((False, True) if dtype != "float32" else (False,)):
                jobs.append((dtype, dot, d, p_split))
    with ProcessPoolExecutor(workers) as ex:
        configs = list(ex.map(_record_one, jobs))
    rep = {"triton": triton.__version__, "torch": torch.__version__, "target": "cuda sm_90",
           "method": "bench/compile_forward.py --record: PTX data flow of every ex2.approx result through add.f32 / "
                     "butterfly shuffles into the fp64 l (rowsum_depths); rowsum_depth = the deepest leaf, None where "
                     "the tree does not cover the tile's BLOCK_N keys or a partial sum leaves by another path",
           "configs": configs}
    with open(path, "w") as f:
        json.dump(rep, f, indent=1)
    for c in configs:
        print(c["dtype"], c["dot"], c["block_d"], c["block_m"], c["block_n"], c["num_warps"], c["p_split"],
              "depth", c["rowsum_depth"], "exp_argument", c["exp_argument"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--dot", default=None, help="ieee / tf32 for float32")
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--dump", default=None)
    ap.add_argument("--record", default=None, help="write the record of every config to this JSON path")
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    if a.record:
        return record(a.record, a.workers)
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
    print("rowsum", rowsum_depths(ptx))
    print("ex2 arguments written by", exp_argument_forms(ptx))
    if a.dump:
        os.makedirs(a.dump, exist_ok=True)
        tag = f"{a.dtype}_{dot}_d{a.d}_triton{triton.__version__}"
        for kind in ("ttgir", "llir", "ptx"):
            with open(os.path.join(a.dump, f"fwd_{tag}.{kind}"), "w") as f:
                f.write(ck.asm[kind])


if __name__ == "__main__":
    main()

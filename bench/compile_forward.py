"""Compile our forward kernel ahead of time for sm_90 (no GPU needed: Triton builds PTX and the cubin
from its own toolchain) and print what the bounds assume about its arithmetic: how the exponent
argument S2 - m is formed (one fma, or a rounded product then a subtraction), the exp2 instruction, and
the layout of the tile's rowsum (tt.reduce in the TTGIR) with its adds and shuffles in the PTX.

    PYTHONPATH=. python3 bench/compile_forward.py --dtype bfloat16 --d 64 [--dump DIR]

With --backward: the backward's dK/dV and dQ kernels instead, the writer chain of each exp2 argument and its form
(backward_exp_argument: "fma_min" for P~ = ex2(min(fl32(c2 qk - fl32(LSE log2 e)), 0)), else "unknown"); --record
writes both, the backward's as bwd_exp_argument in every config.

Runs on the device too (the compiled form on the device's Triton is the one that counts)."""
from __future__ import annotations

import argparse
import os
import re

import torch
import triton
from triton.backends.compiler import GPUTarget

from flashcheck.kernels.attention import Layout, backward_launches, forward_launch
from flashcheck.kernels.triton_fwd import attn_fwd_kernel

def _signature(launch, kernel=attn_fwd_kernel):
    """(signature, constexprs, attrs) of the launch of `kernel` (a @triton.jit function: its arg_names; the
    forward's by default) as Triton's JIT specializes it (flashcheck.warmup.triton_binary): 16-byte aligned
    pointers and ints divisible by 16 get tt.divisibility 16, ints equal to 1 become constants (the form
    triton/tools/compile.py passes to ASTSource). The launch's pointers are the kernel's leading arguments, then
    the fp32 sm_scale, then its ints (Launch)."""
    names = kernel.arg_names
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
    return launch, _compile(launch, attn_fwd_kernel)[0]


def _compile(launch, kernel):
    """(the compiled kernel for sm_90, the index of sm_scale among its PTX parameters: the arguments that are not
    constexpr, in order)."""
    sig, cx, attrs = _signature(launch, kernel)
    src = triton.compiler.ASTSource(fn=kernel, signature=sig, constexprs=cx, attrs=attrs)
    opts = {"num_warps": launch.num_warps, "num_stages": launch.num_stages}
    names = kernel.arg_names
    scale = sum(1 for n in names[:names.index("sm_scale")] if sig[n] != "constexpr")
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts), scale


def compile_backward(dtype: str, d: int, nq: int, nk: int, dot: str, variant: str = "plain", aligned: bool = True):
    """Compile the backward's dK/dV and dQ kernels for one call's Layouts (q, k, v, o, dO and the gradients of one
    (1, 1, N, d) shape), specialized as Triton's JIT would (_signature); variant and aligned as in compile_forward
    (aligned False: K, V not 16-byte aligned). Returns {kernel name: (launch, compiled, the index of sm_scale among
    the PTX's parameters)}."""
    from flashcheck.kernels.triton_bwd import attn_bwd_dkdv_kernel, attn_bwd_dq_kernel

    q = Layout.dense(dtype, (1, 1, nq, d))
    k = Layout.dense(dtype, (1, 1, nk, d))
    if not aligned:
        k = Layout(k.dtype, k.shape, k.strides, aligned=False)
    dense = Layout.dense("int8", (1, 1, nq, nk)) if variant == "mask" else None
    grads = (q, Layout.dense(dtype, k.shape), Layout.dense(dtype, k.shape))  # dQ, dK, dV: fresh, aligned
    _, dkdv, dq = backward_launches(q, k, k, q, q, grads, False, dense, None, band=variant == "band", off_lo=0,
                                    off_hi=0, block_q=0, block_k=0, dot=dot, tiles=[], interpret=False)
    return {launch.kernel: (launch, *_compile(launch, kernel))
            for launch, kernel in ((dkdv, attn_bwd_dkdv_kernel), (dq, attn_bwd_dq_kernel))}


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


_LOG2E_F32 = "0f3FB8AA3B"  # fl32(log2 e): kernels/tiles.py LOG2E as the PTX writes it
_ZERO_F32 = "0f00000000"
_TREE_DEPTH = 5  # writer trees are followed this many instructions deep from the ex2 argument (deeper: the opcode)


def _writers(ptx: str) -> dict[str, list[tuple[str, list[str]]]]:
    """Every instruction (opcode, operands) that writes each register, in text order (a predicated write counts)."""
    writers: dict[str, list[tuple[str, list[str]]]] = {}
    for line in ptx.splitlines():
        m = _INSTR.match(line)
        if not m:
            continue
        op, args = m.group(1), _operands(m.group(2))
        for r in _regs(args[0]):
            if r.startswith("%"):
                writers.setdefault(r, []).append((op, args))
    return writers


def _writer_tree(x: str, writers: dict, scale_param: int | None, depth: int = 0):
    """The data flow into operand x as a tree of writers (op, *operand trees), free of register names: a constant
    stays itself, an address is "[addr]" (ld.param's: "[sm_scale]" where it is parameter scale_param, else
    "[param_<i>]"), a register with no writer or several is ("undefined",) / ("multi:<ops>",) (a phi, a predicated
    load: not followed); an fma.rn.f32 whose addend an fma.rn.f32 wrote is a chain, ("fma.rn.f32^<links>", the
    first link's addend) (tl.dot's FMA chain over the head dim); below _TREE_DEPTH the opcode only."""
    if not x.startswith("%"):
        return x
    ws = writers.get(x, [])
    if len(ws) != 1:
        return ("multi:" + "|".join(sorted({op for op, _ in ws})),) if ws else ("undefined",)
    op, args = ws[0]

    def unique_op(r):
        w = writers.get(r, [])
        return w[0][0] if len(w) == 1 else None

    if op == "fma.rn.f32" and unique_op(args[3]) == "fma.rn.f32":
        n, acc = 1, args[3]
        while unique_op(acc) == "fma.rn.f32":
            n, acc = n + 1, writers[acc][0][1][3]
        head = _writer_tree(acc, writers, scale_param, depth + 1) if depth < _TREE_DEPTH else "..."
        return (f"fma.rn.f32^{n}", head)
    if depth >= _TREE_DEPTH:
        return (op,)
    if op.startswith("ld.param"):
        m = re.search(r"_param_(\d+)\]$", args[1])
        i = int(m.group(1)) if m else None
        return (op, "[sm_scale]" if i is not None and i == scale_param else f"[param_{i}]")
    return (op, *("[addr]" if a.startswith("[") else _writer_tree(a, writers, scale_param, depth + 1)
                  for a in args[1:]))


def _render(tree) -> str:
    if isinstance(tree, str):
        return tree
    return tree[0] + (f"({', '.join(_render(t) for t in tree[1:])})" if len(tree) > 1 else "")


def _is_l2(t, scale_param: int | None) -> bool:
    """fl32(x * log2 e): a mul.f32 by the constant (LSE2 = LSE * LOG2E)."""
    return isinstance(t, tuple) and t[0] == "mul.f32" and len(t) == 3 and _LOG2E_F32 in t[1:]


def _is_c2(t, scale_param: int | None) -> bool:
    """qk_scale2 = fl32(sm_scale * log2 e): a mul.f32 of a kernel parameter (sm_scale's where scale_param is given)
    by the constant."""
    if not (isinstance(t, tuple) and t[0] == "mul.f32" and len(t) == 3 and _LOG2E_F32 in t[1:]):
        return False
    x = t[2] if t[1] == _LOG2E_F32 else t[1]
    return (isinstance(x, tuple) and x[0].startswith("ld.param.") and x[0].endswith("32")
            and (scale_param is None or x[1] == "[sm_scale]"))


def _is_neg_l2(t, scale_param: int | None) -> bool:
    """-fl32(LSE * log2 e), through the dQ kernel's guard selp(0, LSE2, lse == -inf) or not."""
    if not (isinstance(t, tuple) and t[0] == "neg.f32" and len(t) == 2):
        return False
    x = t[1]
    if isinstance(x, tuple) and x[0] == "selp.f32" and len(x) == 4 and _ZERO_F32 in x[1:3]:
        x = x[2] if x[1] == _ZERO_F32 else x[1]
    return _is_l2(x, scale_param)


def _is_fma_min(t, scale_param: int | None) -> bool:
    """min(fma(c2, qk, -LSE2), 0): the argument rounded once (the fma), then clamped at 0 (exact)."""
    if not (isinstance(t, tuple) and t[0] == "min.f32" and len(t) == 3 and _ZERO_F32 in t[1:]):
        return False
    f = t[2] if t[1] == _ZERO_F32 else t[1]
    if not (isinstance(f, tuple) and f[0] == "fma.rn.f32" and len(f) == 4 and _is_neg_l2(f[3], scale_param)):
        return False
    dot = [x for x in f[1:3] if isinstance(x, tuple) and re.fullmatch(r"fma\.rn\.f32(\^\d+)?", x[0])]
    c2 = [x for x in f[1:3] if _is_c2(x, scale_param)]
    return len(dot) == 1 and len(c2) == 1 and dot[0] is not c2[0]


def _ex2_argument_trees(ptx: str, scale_param: int | None) -> list:
    writers = _writers(ptx)
    trees = []
    for line in ptx.splitlines():
        m = _INSTR.match(line)
        if m and m.group(1).startswith("ex2.approx"):
            trees.append(_writer_tree(_operands(m.group(2))[1], writers, scale_param))
    return trees


def exp_argument_chains(ptx: str, scale_param: int | None = None) -> dict:
    """The writer chains of every ex2.approx argument (_writer_tree, rendered), counted: what
    backward_exp_argument classifies, for diagnosis."""
    chains: dict[str, int] = {}
    for t in _ex2_argument_trees(ptx, scale_param):
        k = _render(t)
        chains[k] = chains.get(k, 0) + 1
    return chains


def backward_exp_argument(ptx: str, scale_param: int | None = None) -> str:
    """The backward kernels' exponent argument form: "fma_min" when every ex2.approx argument is
    min.f32(fma.rn.f32(c2, dot, neg.f32(L2)), 0) (either operand order of the min, the fma's product and the muls),
    with c2 = mul.f32(ld.param, 0f3FB8AA3B) (qk_scale2 = fl32(fl32(sm_scale) log2 e); the parameter sm_scale's where
    scale_param, its index among the PTX parameters, is given), dot written by fma.rn.f32 (tl.dot's FMA chain, fp32
    "ieee"), L2 = mul.f32(LSE, 0f3FB8AA3B), in the dQ kernel through selp.f32 with 0 (its -inf guard): P~ =
    ex2(min(fl32(c2 qk - fl32(LSE log2 e)), 0)), the argument rounded once. Else (or no ex2 at all) "unknown"."""
    trees = _ex2_argument_trees(ptx, scale_param)
    return "fma_min" if trees and all(_is_fma_min(t, scale_param) for t in trees) else "unknown"


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


def _record_backward(job):
    """The backward kernels' exponent arguments for one (dtype, dot, head dim): both kernels compiled in the
    forward's variants (the backward has no p_split; its tiles are kernel_config's dkdv and dq, whatever the
    forward's precision mode). bwd_exp_argument "fma_min" where every ex2 argument of both kernels of the plain
    variant, aligned and ragged/unaligned, has backward_exp_argument's form (masked calls are not claimed)."""
    dtype, dot, d = job
    fused, variants, tiles = True, {}, {}
    for variant in ("plain", "band", "mask"):
        for n, aligned in ((4096, True), (4099, False)):
            entry = {}
            for name, (launch, ck, scale) in compile_backward(dtype, d, n, n, dot, variant, aligned).items():
                ptx = ck.asm["ptx"]
                form = backward_exp_argument(ptx, scale)
                if variant == "plain":
                    fused = fused and form == "fma_min"
                cx = dict(launch.constexprs)
                tiles[name] = {"block_m": cx["BLOCK_M"], "block_n": cx["BLOCK_N"], "num_warps": launch.num_warps,
                               "num_stages": launch.num_stages}
                entry[name] = {"exp_argument": form, "ex2_argument_chains": exp_argument_chains(ptx, scale)}
            variants[f"{variant}{'' if aligned else '/ragged_unaligned'}"] = entry
    return {"bwd_exp_argument": "fma_min" if fused else "unknown", "bwd_tiles": tiles, "bwd_variants": variants}


def _record_job(job):
    kind, args = job
    return _record_one(args) if kind == "fwd" else _record_backward(args)


def record(path: str, workers: int) -> None:
    """Compile the forward for every (dtype, dot, padded head dim, precision mode) kernel_config serves, each in
    its variants, and write the rowsum depths and the exp arguments' forms (the record `flashcheck.adapters.
    ours_precision` reads for this Triton version); and the backward's dK/dV and dQ kernels per (dtype, dot, head
    dim), their exponent arguments' form (bwd_exp_argument, _record_backward) added to each of its configs."""
    import json
    from concurrent.futures import ProcessPoolExecutor

    jobs, bwd_jobs = [], []
    for dtype, dot in (("float16", "tf32"), ("bfloat16", "tf32"), ("float32", "ieee"), ("float32", "tf32")):
        for d in (16, 32, 64, 128, 256):
            bwd_jobs.append((dtype, dot, d))
            for p_split in ((False, True) if dtype != "float32" else (False,)):
                jobs.append((dtype, dot, d, p_split))
    with ProcessPoolExecutor(workers) as ex:
        out = list(ex.map(_record_job, [("fwd", j) for j in jobs] + [("bwd", j) for j in bwd_jobs]))
    configs, bwd = out[:len(jobs)], dict(zip(bwd_jobs, out[len(jobs):]))
    for job, c in zip(jobs, configs):
        c.update(bwd[job[:3]])
    rep = {"triton": triton.__version__, "torch": torch.__version__, "target": "cuda sm_90",
           "method": "bench/compile_forward.py --record: PTX data flow of every ex2.approx result through add.f32 / "
                     "butterfly shuffles into the fp64 l (rowsum_depths); rowsum_depth = the deepest leaf, None where "
                     "the tree does not cover the tile's BLOCK_N keys or a partial sum leaves by another path. "
                     "Backward (dK/dV and dQ kernels, kernel_config's dkdv / dq tiles, per dtype, dot and head dim; "
                     "no p_split): the writer chain of every ex2.approx argument (exp_argument_chains); "
                     "bwd_exp_argument = fma_min where every one of both kernels' plain calls (N 4096 aligned, "
                     "4099 unaligned) is min.f32(fma.rn.f32(mul.f32(sm_scale, log2e), <fma.rn.f32 dot chain>, "
                     "neg.f32(mul.f32(LSE, log2e) [through the dQ kernel's selp -inf guard])), 0) "
                     "(backward_exp_argument: P~ = ex2(min(fl32(c2 qk - fl32(LSE log2e)), 0))), else unknown",
           "configs": configs}
    with open(path, "w") as f:
        json.dump(rep, f, indent=1)
    for c in configs:
        print(c["dtype"], c["dot"], c["block_d"], c["block_m"], c["block_n"], c["num_warps"], c["p_split"],
              "depth", c["rowsum_depth"], "exp_argument", c["exp_argument"], "bwd_exp_argument", c["bwd_exp_argument"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--dot", default=None, help="ieee / tf32 for float32")
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--dump", default=None)
    ap.add_argument("--record", default=None, help="write the record of every config to this JSON path")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--backward", action="store_true", help="the backward kernels' exponent arguments instead")
    a = ap.parse_args()
    if a.record:
        return record(a.record, a.workers)
    dot = a.dot or ("ieee" if a.dtype == "float32" else "tf32")  # fp16/bf16 operands: the launcher's spelling
    if a.backward:
        for name, (launch, ck, scale) in compile_backward(a.dtype, a.d, 4096, 4096, dot).items():
            ptx = ck.asm["ptx"]
            print(f"triton {triton.__version__} {name} dtype {a.dtype} dot {dot} d {a.d} constexprs "
                  f"{dict(launch.constexprs)} warps {launch.num_warps} stages {launch.num_stages}")
            print("exp argument", backward_exp_argument(ptx, scale))
            for chain, count in exp_argument_chains(ptx, scale).items():
                print(f"  {count} x {chain}")
            if a.dump:
                os.makedirs(a.dump, exist_ok=True)
                with open(os.path.join(a.dump, f"{name}_{a.dtype}_{dot}_d{a.d}_triton{triton.__version__}.ptx"),
                          "w") as f:
                    f.write(ptx)
        return
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

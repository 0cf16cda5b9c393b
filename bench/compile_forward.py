"""Compile our forward kernel ahead of time for sm_90 (no GPU needed: Triton builds PTX and the cubin
from its own toolchain) and print what the bounds assume about its arithmetic: how the exponent
argument S2 - m is formed (one fma, or a rounded product then a subtraction), the exp2 instruction, and
the layout of the tile's rowsum (tt.reduce in the TTGIR) with its adds and shuffles in the PTX.

    PYTHONPATH=. python3 bench/compile_forward.py --dtype bfloat16 --d 64 [--dump DIR]

With --delta: the backward's preprocess kernel instead, its Delta dot's evaluation tree (delta_tree: the PTX run on
symbolic floats); --record-delta PATH adds that tree to every config of an existing record (in place), --record writes
it with the rest.

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
                    aligned: bool = True, tiles: tuple = ()):
    """Compile the forward for one call's Layouts, specialized as Triton's JIT would (_signature). variant:
    "plain", "band" (causal / window), "mask" (a dense int8 mask); aligned False: K/V not 16-byte aligned (pointer
    loads instead of tensor descriptors where the tile config asks for them); tiles: a KernelConfig.flat() to compile
    every variant with (default: kernel_config's, whose forward tile may differ under a band)."""
    q = Layout.dense(dtype, (1, 1, nq, d))
    k = Layout.dense(dtype, (1, 1, nk, d))
    if not aligned:
        k = Layout(k.dtype, k.shape, k.strides, aligned=False)
    dense = Layout.dense("int8", (1, 1, nq, nk)) if variant == "mask" else None
    # no block-sparse variant: its tiles are the mask's (BlockSparseMask), not kernel_config's; nothing is claimed there
    launch = forward_launch(q, k, k, q, dense, None, band=variant == "band", off_lo=0, off_hi=0,
                            block_q=0, block_k=0, dot=dot, p_split=p_split,
                            save_res=False, tiles=list(tiles), interpret=False)
    return launch, _compile(launch, attn_fwd_kernel)[0]


def _compile(launch, kernel):
    """(the compiled kernel for sm_90, the index of sm_scale among its PTX parameters: the arguments that are not
    constexpr, in order; None for a kernel without sm_scale). A launch's num_warps / num_stages None is Triton's
    default (not passed, as the launcher does)."""
    sig, cx, attrs = _signature(launch, kernel)
    src = triton.compiler.ASTSource(fn=kernel, signature=sig, constexprs=cx, attrs=attrs)
    opts = {k: v for k, v in (("num_warps", launch.num_warps), ("num_stages", launch.num_stages)) if v is not None}
    names = kernel.arg_names
    scale = (sum(1 for n in names[:names.index("sm_scale")] if sig[n] != "constexpr") if "sm_scale" in names
             else None)
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


# ----------------------------------------------------------------------------- the backward's Delta dot
#
# The preprocess kernel's Delta = tl.sum(dO * O, axis=1) in fp32 (kernels/triton_bwd.py). Its evaluation tree is
# read by running the PTX: a straight-line interpreter for the kernel's opcodes, every thread of one program in
# lockstep, integers concrete (thread and program ids, the launch's ints, distinct base addresses per pointer), floats
# symbolic (each value an expression over the loaded elements), so shuffles read the other lane's expression and shared
# memory round trips move them between warps. Each stored Delta_i is then an expression whose leaves are named by
# (tensor, row, column) from their load addresses: what it computes, not a pattern of opcodes.

_PTX_LINE = re.compile(r"^\s*(@!?%\w+)?\s*([a-z][\w.]*)\s*([^;]*);")


class _Halves:
    """A b32 register that holds two 16-bit elements loaded from memory: (buffer, element) each, or None (the 0 a
    masked load leaves)."""

    __slots__ = ("lo", "hi")

    def __init__(self, lo, hi):
        self.lo, self.hi = lo, hi


class _Half:
    __slots__ = ("ref",)

    def __init__(self, ref):
        self.ref = ref


class _Float:
    """An fp32 value as an expression: an id into _PtxRun.nodes (0: +0.0)."""

    __slots__ = ("i",)

    def __init__(self, i: int):
        self.i = i


class _PtxRun:
    """One program of a straight-line kernel (no branches) run on symbolic floats: `run` returns the global stores
    [(buffer index, element index, value)]; nodes[i] is ("zero",), ("in", buffer, element) (a loaded fp32 value or a
    converted 16-bit one), or (opcode, operand ids...) for every fp32 operation (add / mul / fma and whatever else
    writes an .f32 register)."""

    def __init__(self, params: dict, buffers: dict):
        self.params, self.buffers = params, buffers  # buffers: {param index: (itemsize, base address)}
        self.nodes, self._ids = [("zero",)], {("zero",): 0}

    def node(self, key) -> _Float:
        i = self._ids.get(key)
        if i is None:
            i = self._ids[key] = len(self.nodes)
            self.nodes.append(key)
        return _Float(i)

    def _locate(self, addr: int):
        for k, (size, base) in self.buffers.items():
            if base <= addr < base + (1 << 34):
                if (addr - base) % size:
                    raise ValueError(f"misaligned access at buffer {k}")
                return k, (addr - base) // size
        raise ValueError(f"address {addr:#x} outside every buffer")

    def run(self, ptx: str, n_threads: int) -> list:
        body = ptx[ptx.index(".entry"):]
        prog = []
        for raw in body[body.index("{"):].splitlines():
            s = raw.strip()
            if not s or s[0] in "./${}" or s.startswith(")"):
                continue
            m = _PTX_LINE.match(raw)
            if not m:
                raise ValueError(f"unparsed PTX line {raw!r}")
            if m.group(2) == "ret":
                break
            prog.append((m.group(1), m.group(2), _operands(m.group(3))))
        regs = [{} for _ in range(n_threads)]
        smem, stores = {}, []
        for guard, op, args in prog:
            if op.startswith(("bra", "call", "brx", "exit")):
                raise ValueError(f"control flow ({op}): not a straight-line kernel")
            if op.startswith("bar"):
                continue  # lockstep: every write before a barrier is applied before the next instruction runs
            writes = []
            for t in range(n_threads):
                if guard is not None and regs[t][guard.lstrip("@!")] == guard.startswith("@!"):
                    writes.append(None)
                    continue
                writes.append(self._step(op, args, t, regs, smem))
            for t, w in enumerate(writes):
                for k, v in (w or {}).items():
                    if k[0] == "smem":
                        smem[k[1]] = v
                    elif k[0] == "gmem":
                        stores.append((k[1], k[2], v))
                    else:
                        regs[t][k[1]] = v
        return stores

    def _step(self, op: str, args: list, t: int, regs: list, smem: dict) -> dict:
        R = regs[t]

        def val(a: str):
            if a.startswith("%"):
                if a == "%tid.x":
                    return t
                if a in ("%ctaid.x", "%ctaid.y", "%ctaid.z", "%tid.y", "%tid.z"):
                    return 0  # program (0, 0): rows 0..BLOCK_M-1 of the first head
                return R[a]
            if a == "global_smem":
                return 0
            if a.startswith("0f"):
                if int(a[2:], 16) == 0:
                    return _Float(0)
                raise ValueError(f"fp32 constant {a}")
            return int(a, 0)

        def addr(a: str) -> int:
            m = re.fullmatch(r"\[\s*(%\w+|\w+)\s*(?:\+\s*(-?\d+))?\s*\]", a)
            return val(m.group(1)) + int(m.group(2) or 0)

        base, *mods = op.split(".")
        w = {}
        if base == "ld" and mods[0] == "param":
            w[("reg", args[0])] = self.params[int(re.search(r"_param_(\d+)\]", args[1]).group(1))]
        elif base == "ld" and mods[0] in ("global", "shared"):
            a = addr(args[1])
            step = 2 if mods[-1] == "b16" else 4
            for j, d in enumerate(_regs(args[0])):
                if mods[0] == "shared":
                    w[("reg", d)] = smem[a + step * j]
                    continue
                k, e = self._locate(a + step * j)
                size = self.buffers[k][0]
                if size == 4:
                    w[("reg", d)] = self.node(("in", k, e))
                elif step == 4:  # two 16-bit elements in one b32 register
                    w[("reg", d)] = _Halves((k, e), (k, e + 1))
                else:
                    w[("reg", d)] = _Half((k, e))
        elif base == "st" and mods[0] in ("global", "shared"):
            a = addr(args[0])
            step = 2 if mods[-1] == "b16" else 4
            for j, s in enumerate(_regs(args[1])):
                if mods[0] == "shared":
                    w[("smem", a + step * j)] = val(s)
                else:
                    k, e = self._locate(a + 4 * j)
                    w[("gmem", k, e)] = val(s)
        elif base == "mov" and args[1].startswith("{"):  # pack two 16-bit registers into one b32
            lo, hi = (_Half(None) if isinstance(x, int) and x == 0 else x for x in map(val, _regs(args[1])))
            if not (isinstance(lo, _Half) and isinstance(hi, _Half)):
                raise ValueError(f"packing {lo!r}, {hi!r}")
            w[("reg", args[0])] = _Halves(lo.ref, hi.ref)
        elif base == "mov" and args[0].startswith("{"):  # unpack a b32 register into its two halves
            x, (lo, hi) = val(args[1]), _regs(args[0])
            if isinstance(x, _Halves):
                w[("reg", lo)], w[("reg", hi)] = _Half(x.lo), _Half(x.hi)
            elif x == 0:
                w[("reg", lo)], w[("reg", hi)] = _Half(None), _Half(None)
            else:
                raise ValueError(f"unpacking {x!r}")
        elif base == "mov":
            w[("reg", args[0])] = val(args[1])
        elif base == "cvt" and mods[0] == "f32" and mods[-1] in ("f16", "bf16"):
            h = val(args[1])
            if isinstance(h, int) and h == 0:  # a masked 16-bit load's 0 (mov.b16 0, then a predicated load)
                h = _Half(None)
            w[("reg", args[0])] = _Float(0) if h.ref is None else self.node(("in", *h.ref))
        elif base == "ldmatrix":  # a warp loads 8x8 matrices of b16 pairs: lane i gets row i // 4's word i % 4 of
            # matrix j, the rows' addresses from lanes 8 j .. 8 j + 7 (PTX ISA, ldmatrix; .trans not interpreted)
            if "trans" in mods or mods[-1] != "b16":
                raise ValueError(f"opcode {op} not interpreted")
            lane, warp = t & 31, t & ~31
            for j, d in enumerate(_regs(args[0])):
                src = regs[warp | (8 * j + lane // 4)]
                m = re.fullmatch(r"\[\s*(%\w+)\s*(?:\+\s*(-?\d+))?\s*\]", args[1])
                w[("reg", d)] = smem[src[m.group(1)] + int(m.group(2) or 0) + 4 * (lane % 4)]
        elif base == "shfl":
            if mods[1] != "bfly":
                raise ValueError(f"shuffle {op}")
            src = (t & ~31) | ((t & 31) ^ val(args[2]))
            w[("reg", args[0].split("|")[0])] = regs[src][args[1]]
        elif mods and mods[-1] == "f32":  # every fp32 arithmetic: a node (analysed by _delta_tree)
            xs = [val(a) for a in args[1:]]
            xs = [_Float(0) if isinstance(x, int) and x == 0 else x for x in xs]  # a masked fp32 load's 0
            if not all(isinstance(x, _Float) for x in xs):
                raise ValueError(f"{op} of {xs!r}")
            w[("reg", args[0])] = self.node((base, *(x.i for x in xs)))
        elif base == "setp":
            x, y = val(args[1]), val(args[2])
            w[("reg", args[0])] = {"lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y, "eq": x == y,
                                   "ne": x != y}[mods[0]]
        elif base in ("and", "or", "not") and mods[-1] == "pred":
            x = [val(a) for a in args[1:]]
            w[("reg", args[0])] = {"and": lambda: x[0] and x[1], "or": lambda: x[0] or x[1],
                                   "not": lambda: not x[0]}[base]()
        elif base == "selp":
            w[("reg", args[0])] = val(args[1]) if val(args[3]) else val(args[2])
        else:
            x = [val(a) for a in args[1:]]
            if not all(isinstance(v, int) for v in x):
                raise ValueError(f"{op} of {x!r}")
            ops = {"add": lambda: x[0] + x[1], "sub": lambda: x[0] - x[1], "and": lambda: x[0] & x[1],
                   "or": lambda: x[0] | x[1], "xor": lambda: x[0] ^ x[1], "shl": lambda: x[0] << x[1],
                   "shr": lambda: x[0] >> x[1], "bfe": lambda: (x[0] >> x[1]) & ((1 << x[2]) - 1),
                   "mul": lambda: x[0] * x[1], "mad": lambda: x[0] * x[1] + x[2], "cvt": lambda: x[0],
                   "min": lambda: min(x), "max": lambda: max(x)}
            if base not in ops or (base in ("mul", "mad") and mods[0] not in ("lo", "wide")):
                raise ValueError(f"opcode {op} not interpreted")
            r = ops[base]()
            if not 0 <= r < 1 << 63:
                raise ValueError(f"{op} left the nonnegative range the interpreter assumes")
            w[("reg", args[0])] = r
        return w


def compile_preprocess(dtype: str, dv: int, has_res: bool, o_row: int | None = None, o_aligned: bool = True,
                       do_row: int | None = None, do_aligned: bool = True):
    """The backward's preprocess (Delta) kernel compiled as backward_launches launches it on the GPU for (1, 1, 4096,
    dv) tensors of `dtype` (BLOCK_M 64, BLOCK_DV the padded dv, Triton's default warps; HAS_RES: Delta from O + O_res,
    delta_from="fp32" with 16-bit inputs), specialized as Triton's JIT would (_signature): O's (and O_res's) rows
    `o_row` apart (default dv, dense), 16-byte aligned or not, dO's likewise. Returns (launch, compiled)."""
    from flashcheck.kernels.triton_bwd import attn_bwd_preprocess_kernel

    def layout(row, aligned):
        rs = row or dv
        return Layout(dtype, (1, 1, 4096, dv), (4096 * rs, 4096 * rs, rs, 1), aligned)

    x, g = layout(o_row, o_aligned), layout(do_row, do_aligned)
    pre, _, _ = backward_launches(x, x, x, x, g, (x, x, x), has_res, None, None, band=False, off_lo=0, off_hi=0,
                                  block_q=0, block_k=0, dot="ieee" if dtype == "float32" else "tf32", tiles=[],
                                  interpret=False)
    return pre, _compile(pre, attn_bwd_preprocess_kernel)[0]


_ZERO = ("0",)  # a product of a masked (0) load: exactly 0, no leaf, no rounding


def _delta_node(nodes: list, names: dict, strides: dict, row: int, i: int):
    """The Delta dot's tree under node i, canonical: ("m", c) the product of column c rounded (mul.f32, or an fma with
    addend 0), ("f", c, sub) an fma whose fused product is column c's, exact inside it, added to sub with one rounding,
    ("+", a, b) an add.f32 (the child with the smaller first column first: the add commutes). A product is dO[row, c]
    times O[row, c] (or O + O_res of that element, the fp32 O of delta_from="fp32"), an element at index e of a buffer
    with row stride strides[name] being (e // stride, e % stride); a product with a masked load's 0 is exactly 0
    (_ZERO: dropped, an fma of it is its addend, an add of it the other operand, all exact); anything else raises
    ValueError."""
    def operand(j):
        n = nodes[j]
        if n[0] == "in":
            return (names[n[1]], *divmod(n[2], strides[names[n[1]]]))
        if n[0] == "add":
            a, b = operand(n[1]), operand(n[2])
            if {a[0], b[0]} == {"O", "ORes"} and a[1:] == b[1:]:
                return ("O", *a[1:])
        raise ValueError(f"operand {n}")

    def column(a, b):
        x, y = operand(a), operand(b)
        if {x[0], y[0]} != {"O", "DO"} or x[1:] != y[1:] or x[1] != row:
            raise ValueError(f"product of {x} and {y} in row {row}")
        return x[2]

    def sub(j):
        return _delta_node(nodes, names, strides, row, j)

    n = nodes[i]
    if n[0] == "zero":
        return _ZERO
    if n[0] == "mul":
        return _ZERO if 0 in n[1:] else ("m", column(n[1], n[2]))
    if n[0] == "fma":
        if 0 in n[1:3]:
            return sub(n[3])
        c, t = column(n[1], n[2]), sub(n[3])
        return ("m", c) if t == _ZERO else ("f", c, t)
    if n[0] == "add":
        a, b = sub(n[1]), sub(n[2])
        if _ZERO in (a, b):
            return b if a == _ZERO else a
        return ("+", *sorted((a, b), key=lambda x: min(_delta_leaves(x))))
    raise ValueError(f"fp32 {n[0]} in the Delta dot")


def _tree_of_order(order, dv: int):
    """The canonical tree (_delta_node's form) of the complete pairwise tree over `order` with the columns >= dv exact
    zeros: what _delta_node reads off a kernel that computes that tree with those columns masked."""
    level = []
    for a, b in zip(order[0::2], order[1::2]):
        level.append(_ZERO if a >= dv and b >= dv else ("m", b) if a >= dv else ("m", a) if b >= dv
                     else ("f", a, ("m", b)))
    while len(level) > 1:
        nxt = []
        for x, y in zip(level[0::2], level[1::2]):
            nxt.append(y if x == _ZERO else x if y == _ZERO
                       else ("+", *sorted((x, y), key=lambda t: min(_delta_leaves(t)))))
        level = nxt
    return level[0]


def _delta_leaves(t) -> list:
    return [t[1]] if t[0] == "m" else [t[1], *_delta_leaves(t[2])] if t[0] == "f" else [
        *_delta_leaves(t[1]), *_delta_leaves(t[2])]


def _delta_count(t, kind: str) -> int:
    """How many nodes of `kind` ("f": fused products, "m": products rounded alone) the tree has."""
    return (t[0] == kind) + sum(_delta_count(c, kind) for c in t[1:] if isinstance(c, tuple))


def _delta_depth(t) -> int:
    """Roundings on the deepest leaf-to-root path: a rounded product 1, an fma 1 above its addend (its own product
    enters exact), an add 1 above its deeper child."""
    return 1 if t[0] == "m" else 1 + _delta_depth(t[2]) if t[0] == "f" else 1 + max(map(_delta_depth, t[1:]))


def _pairwise_order(t) -> list | None:
    """The leaf order of a complete binary tree of adds over pair nodes fma(p_a, fl(p_b)) (("f", a, ("m", b)), all at
    one depth), listed [a, b, ...] left to right; None for any other shape."""
    if t[0] == "f":
        return [t[1], t[2][1]] if t[2][0] == "m" else None
    if t[0] != "+":
        return None
    a, b = _pairwise_order(t[1]), _pairwise_order(t[2])
    return a + b if a is not None and b is not None and len(a) == len(b) else None


def delta_tree(ptx: str, launch, against=None) -> dict:
    """The Delta dot of the preprocess kernel's PTX (compile_preprocess), run on symbolic floats (_PtxRun, program
    (0, 0)): every stored Delta_i (i < BLOCK_M) read back to its products (_delta_node). Returns {"depth": the most
    roundings any leaf passes through to the stored value (_delta_depth), None unless every row's tree holds each of
    the HEAD_DV columns of its own row exactly once; "order": the leaf order where every row's tree is the complete
    binary tree of _pairwise_order (the same for every row), else None; "fused": how many products enter an fma exact,
    "rounded": how many are rounded alone (mul.f32), in row 0; "matches" (with `against`, a recorded order): whether
    every row's tree is that order's complete pairwise tree with the columns >= HEAD_DV masked (_tree_of_order);
    "error": why depth is None, else None}."""
    from flashcheck.kernels.triton_bwd import attn_bwd_preprocess_kernel as kernel

    cx = dict(launch.constexprs)
    sig, cx_sig, _ = _signature(launch, kernel)
    args = [n for n in kernel.arg_names if sig[n] != "constexpr"]
    pointers = kernel.arg_names[:len(launch.pointers)]
    value = {**dict(zip([n for n in kernel.arg_names if n not in cx and n not in pointers], launch.ints)), **cx_sig}
    params, buffers, names = {}, {}, {}
    for i, n in enumerate(args):  # the PTX's parameters: the arguments that are not constexpr, in order
        if sig[n].startswith("*"):
            params[i] = (i + 1) << 36
            buffers[i] = (4 if sig[n] == "*fp32" else 2, params[i])
            names[i] = n
        else:
            params[i] = value[n]
    for i in range(len(args), len(args) + 4):  # Triton's own trailing pointers (scratch): never read here
        params[i] = (i + 1) << 36
    strides = {"O": value["stride_om"], "ORes": value["stride_om"], "DO": value["stride_dm"], "Delta": 1}
    out = {"depth": None, "order": None, "fused": None, "rounded": None, "error": None}
    try:
        run = _PtxRun(params, buffers)
        stores = run.run(ptx, int(re.search(r"\.reqntid\s+(\d+)", ptx).group(1)))
        dv = cx["HEAD_DV"]
        trees = {}
        for k, e, v in stores:
            if names.get(k) != "Delta" or not isinstance(v, _Float):
                raise ValueError(f"a store of {v!r} to {names.get(k)}")
            trees.setdefault(e, set()).add(_delta_node(run.nodes, names, strides, e, v.i))
        if sorted(trees) != list(range(cx["BLOCK_M"])) or any(len(s) != 1 for s in trees.values()):
            raise ValueError(f"rows stored {sorted(trees)[:8]}..., not each of the {cx['BLOCK_M']} once")
        for t, in trees.values():
            if t == _ZERO or sorted(_delta_leaves(t)) != list(range(dv)):
                raise ValueError(f"a tree's leaves are not the {dv} columns once each")
        shapes = {t for (t,) in trees.values()}
        (t0,) = trees[0]
        out.update(depth=max(map(_delta_depth, shapes)), fused=_delta_count(t0, "f"), rounded=_delta_count(t0, "m"),
                   order=_pairwise_order(t0) if len(shapes) == 1 else None)
        if against is not None:
            out["matches"] = shapes == {_tree_of_order(against, dv)}
    except (ValueError, KeyError, AttributeError) as err:
        out["error"] = f"{type(err).__name__}: {err}"
    return out


def _record_one(job):
    """One config's entry: the forward of (dtype, dot, head dim, p_split) compiled with the tiles `tiles` (a
    KernelConfig.flat()) in every variant, so that the entry describes one binary family (kernel_config's band tile
    is a config of its own: _tile_jobs, whose band flag the entry keeps)."""
    dtype, dot, d, p_split, tiles, band = job
    depths, fused, variants = [], True, {}
    # Triton specializes on 16-byte alignment and divisibility by 16: N = 4096 with aligned tensors, and N = 4099
    # (strides and sizes not divisible) with unaligned K, V, each plain, causal and with a dense mask
    for variant in ("plain", "band", "mask"):
        for n, aligned in ((4096, True), (4099, False)):
            launch, ck = compile_forward(dtype, d, n, n, dot, p_split, variant, aligned, tiles)
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
            "exp_argument": "fma" if fused else "unknown", "variants": variants, "band": band}


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


def _delta_variants(d: int) -> dict:
    """The preprocess calls whose Delta dot the record must cover, per padded head dim d: {name: (dv, O's row stride
    or None, O aligned, dO's row stride or None, dO aligned)}. Triton specializes on alignment and divisibility by 16,
    and vectorizes a load by what they (and the mask of a head dim below d) allow, which sets the layout and so the
    tree. Our O (and O_res) is allocated dense and aligned (rows dv apart: O's loads vectorize fully where dv is a
    multiple of 16, else not at all), dO is the caller's (its loads by its alignment, its row stride and the mask's
    constancy: the largest power of 2 dividing dv). The tree is read for d dense; a head dim 16 below (masked columns,
    strides divisible by 16); dO's rows d + 8 apart, unaligned; both so; a head dim 8 below (masked, strides not
    divisible by 16), dO unaligned; and a head dim m = 2, 4, 8 below with dO's rows d apart, aligned (O not vectorized,
    dO by m)."""
    out = {"plain": (d, None, True, None, True), "do_unaligned": (d, None, True, d + 8, False),
           "unaligned": (d, d + 8, False, d + 8, False), "ragged_unaligned": (d - 8, None, True, None, False),
           **{f"do_vec{m}": (d - m, None, True, d, True) for m in (2, 4, 8)}}
    if d > 16:
        out["ragged"] = (d - 16, None, True, None, True)
    return out


def _record_delta(job):
    """The Delta dot's trees (delta_tree) of the preprocess kernel for one (dtype, padded head dim), keyed by
    Precision.delta_from: "output" (Delta from the stored O: HAS_RES off) and "fp32" (the launcher's HAS_RES for it:
    O + O_res with 16-bit inputs; fp32 inputs have no residual, HAS_RES off). Each entry: "depth", the deepest over the
    variants (_delta_variants; None if any is unread); "orders", the distinct leaf orders of the full head dims' trees,
    the plain call's first (None if any is not the complete pairwise tree, or a masked variant's tree is not one of
    them with its columns masked); the plain call's "fused" and "rounded"; and per variant its depth, order index and
    error."""
    dtype, d = job
    out = {}
    for has_res in (False, True) if dtype != "float32" else (False,):
        results, orders = {}, []
        for name, (dv, o_row, o_al, do_row, do_al) in _delta_variants(d).items():
            launch, ck = compile_preprocess(dtype, dv, has_res, o_row, o_al, do_row, do_al)
            results[name] = (dv, launch, ck)
        variants, ok = {}, True
        for name, (dv, launch, ck) in results.items():  # the full head dims first: their orders
            if dv == d:
                r = delta_tree(ck.asm["ptx"], launch)
                if r["order"] is not None and r["order"] not in orders:
                    orders.append(r["order"])
                ok = ok and r["order"] is not None
                variants[name] = {"head_dv": dv, "depth": r["depth"], "error": r["error"],
                                  "order": None if r["order"] is None else orders.index(r["order"])}
                if name == "plain":
                    plain = r
        for name, (dv, launch, ck) in results.items():  # masked head dims: one of those orders, masked
            if dv != d:
                rs = [delta_tree(ck.asm["ptx"], launch, against=o) for o in orders] or [
                    delta_tree(ck.asm["ptx"], launch)]
                hit = [i for i, r in enumerate(rs) if r.get("matches")]
                ok = ok and bool(hit)
                variants[name] = {"head_dv": dv, "depth": rs[0]["depth"], "error": rs[0]["error"],
                                  "order": hit[0] if hit else None}
        depths = [v["depth"] for v in variants.values()]
        out[has_res] = {"has_res": has_res, "block_m": dict(results["plain"][1].constexprs)["BLOCK_M"],
                        "depth": None if None in depths else max(depths), "orders": orders if ok else None,
                        "fused": plain["fused"], "rounded": plain["rounded"], "variants": variants}
    return {"output": out[False], "fp32": out[dtype != "float32"]}


def _record_job(job):
    kind, args = job
    return {"fwd": _record_one, "bwd": _record_backward, "delta": _record_delta}[kind](args)


def _tile_jobs(dtype: str, dot: str, d: int, p_split: bool) -> list:
    """The forward configs kernel_config serves for (dtype, dot, head dim, p_split): (dtype, dot, d, p_split, tiles,
    band) for the unbanded tile (band False) and, where kernel_config gives banded calls a tile of its own (other
    block_m, block_n or warps), for that one too (band True)."""
    from flashcheck.kernels.attention import KernelConfig, kernel_config

    tdt = getattr(torch, dtype)
    precision = "accurate" if p_split else "default"
    plain = kernel_config(d, tdt, interpret=False, precision=precision)
    band = kernel_config(d, tdt, interpret=False, precision=precision, band=True)
    jobs = [(dtype, dot, d, p_split, tuple(plain.flat()), False)]
    if (band.fwd.block_m, band.fwd.block_n, band.fwd.num_warps) != (plain.fwd.block_m, plain.fwd.block_n,
                                                                     plain.fwd.num_warps):
        jobs.append((dtype, dot, d, p_split, tuple(KernelConfig(band.fwd, plain.dkdv, plain.dq).flat()), True))
    return jobs


def record_band(path: str, workers: int) -> None:
    """Add (or replace) the entries of kernel_config's band tiles in an existing record, in place: each compiled in
    every variant (_record_one); its backward and Delta fields are its unbanded sibling's (the backward kernels' tiles
    do not follow the band)."""
    import json
    from concurrent.futures import ProcessPoolExecutor

    with open(path) as f:
        rep = json.load(f)
    jobs = [j for dtype, dot in _DTYPES_DOTS for d in _HEAD_DIMS
            for p_split in ((False, True) if dtype != "float32" else (False,))
            for j in _tile_jobs(dtype, dot, d, p_split) if j[5]]
    with ProcessPoolExecutor(workers) as ex:
        out = list(ex.map(_record_one, jobs))

    def key(c):
        return c["dtype"], c["dot"], c["block_d"], c["block_m"], c["block_n"], c["num_warps"], c["p_split"]
    configs = [c for c in rep["configs"] if key(c) not in {key(e) for e in out}]
    for job, c in zip(jobs, out):
        (sib,) = [e for e in configs if (e["dtype"], e["dot"], e["block_d"], e["p_split"]) == (c["dtype"], c["dot"],
                                                                                            c["block_d"], job[3])
                  and not e.get("band")]
        c.update({k: v for k, v in sib.items() if k.startswith("bwd") or k == "delta"})
        configs.append(c)
        print(c["dtype"], c["dot"], c["block_d"], c["block_m"], c["block_n"], c["num_warps"], c["p_split"], "band",
              "depth", c["rowsum_depth"], "exp_argument", c["exp_argument"])
    rep["configs"] = configs
    rep["method_band"] = ("bench/compile_forward.py --record-band: kernel_config's band tile (banded calls' own "
                          "forward tile, band: true) compiled in every variant like any config; bwd_* and delta "
                          "copied from the unbanded config of the same dtype, dot, head dim and p_split")
    with open(path, "w") as f:
        json.dump(rep, f, indent=1)


def _gluon_descriptor_type(dtype: str, d: int, rows: int) -> str:
    """The signature type of a host TMA descriptor argument as the launcher passes it (gluon_fwd.descriptor: boxes of
    `rows` rows of one head, NVMMA layout), for GluonASTSource."""
    from triton.experimental.gluon import language as gl

    from flashcheck.kernels import gluon_fwd

    gdt = gl.bfloat16 if dtype == "bfloat16" else gl.float16
    short = {"float16": "fp16", "bfloat16": "bf16"}[dtype]
    return (f"tensordesc<{short}[{', '.join(map(str, gluon_fwd.descriptor_block(rows, d)))}],"
            f"{gluon_fwd.shared_layout(rows, d, gdt)!r}>")


def _compile_gluon(kernel, args: dict, constexprs: dict, maxnreg: int | None = None):
    """A Gluon kernel compiled for sm_90 (4 warps in its default partition) from its arguments' signature types and
    its constexprs; maxnreg: the launch's registers a thread (ptx .maxnreg), None: Triton's."""
    from triton.experimental import gluon

    sig = {**args, **{k: "constexpr" for k in constexprs}}
    src = gluon._runtime.GluonASTSource(fn=kernel, signature=sig, constexprs=constexprs)
    options = {"num_warps": 4} if maxnreg is None else {"num_warps": 4, "maxnreg": maxnreg}
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def compile_gluon(dtype: str, d: int, band: bool, write_res: bool, stages: int, block_n: int = 128,
                  maxnreg: int | None = None, module=None, paired: bool = False, block_m: int = 128,
                  persistent: bool = False):
    """Compile kernels/gluon_fwd.py's forward (or `module`'s: a source variant, bench/fwd_variants.py) for sm_90 as
    its launcher specializes it (4-D tensor descriptors of [1, 1, rows, d] boxes, block_m-row query tiles (128: two
    consumer warpgroups), one query head per kv head); paired: the PAIRED build (two query blocks a program:
    attention._gluon_paired); persistent: the PERSISTENT build (a program an SM, looping over the query blocks)."""
    from flashcheck.kernels import gluon_fwd

    def desc(rows):
        return _gluon_descriptor_type(dtype, d, rows)
    kernel = (module or gluon_fwd).attn_fwd_gluon_kernel
    constexprs = dict(GROUP=1, HEAD_D=d, BLOCK_M=block_m, BLOCK_N=block_n, STAGES=stages, BAND=band,
                      WRITE_RES=write_res, HEAVY_FIRST=band)
    if "PAIRED" in kernel.arg_names:  # (a variant from before it has not)
        constexprs["PAIRED"] = paired
    if "PERSISTENT" in kernel.arg_names:
        constexprs["PERSISTENT"] = persistent
    ints = ("Nq", "Nk", "Hq", "off_lo", "off_hi") + (("BH", ) if "BH" in kernel.arg_names else ())
    return _compile_gluon(kernel,
                          {"q_desc": desc(64), "k_desc": desc(block_n), "v_desc": desc(block_n), "o_desc": desc(64),
                           "ores_desc": desc(64), "LSE": "*fp32", "sm_scale": "fp32", **{x: "i32" for x in ints}},
                          constexprs, maxnreg)


def gluon_dkdv_signature(dtype: str, d: int, block_m: int) -> dict:
    """kernels/gluon_bwd.py's dK/dV kernel's argument types as the launcher passes them (4-D tensor descriptors: Q and
    dO boxes of block_m rows, K, V, dK, dV boxes of 64; LSE's and Delta's per-row slices: gluon_bwd.rows_descriptor),
    in its argument order."""
    from flashcheck.kernels import gluon_bwd

    def desc(rows):
        return _gluon_descriptor_type(dtype, d, rows)

    def rows(cols):
        return f"tensordesc<fp32[1, {cols}],{gluon_bwd.ROWS_LAYOUT!r}>"
    return {"q_desc": desc(block_m), "k_desc": desc(64), "v_desc": desc(64), "do_desc": desc(block_m),
            "dk_desc": desc(64), "dv_desc": desc(64), "lse_desc": rows(block_m), "delta_desc": rows(block_m),
            "sm_scale": "fp32", "Nq": "i32", "Nk": "i32", "Hkv": "i32", "off_lo": "i32", "off_hi": "i32"}


def compile_gluon_dkdv(dtype: str, d: int, band: bool, group: int, block_m: int, stages: int):
    """Compile kernels/gluon_bwd.py's dK/dV kernel for sm_90 as the launcher specializes it (gluon_dkdv_signature)."""
    from flashcheck.kernels import gluon_bwd

    return _compile_gluon(gluon_bwd.attn_bwd_dkdv_gluon_kernel, gluon_dkdv_signature(dtype, d, block_m),
                          dict(GROUP=group, HEAD_D=d, BLOCK_M=block_m, BLOCK_N=128, STAGES=stages, BAND=band))


def compile_gluon_fused(dtype: str, group: int, d: int = 64, block_m: int = 128, stages: int = 2, band: bool = False):
    """Compile kernels/gluon_bwd_fused.py's backward for sm_90 as the launcher specializes it: gluon_dkdv_signature's
    eight descriptors without the band's offsets, the fp32 accumulator's descriptor (boxes of 64 rows) and the
    counters' pointer after them, `rotate` a runtime value (the launch passes 0 or 1: Triton specializes a 1)."""
    from flashcheck.kernels import gluon_bwd_fused

    sig = gluon_dkdv_signature(dtype, d, block_m)
    for name in ("off_lo", "off_hi", "sm_scale", "Nq", "Nk", "Hkv"):
        del sig[name]
    sig.update(acc_desc=f"tensordesc<fp32[1, {block_m // 2}, {d}],{gluon_bwd_fused.dq_stage_layout()!r}>",
               Sem="*i32", sm_scale="fp32", Nq="i32", Nk="i32", Hkv="i32", rotate="i32", off_lo="i32", off_hi="i32")
    return _compile_gluon(gluon_bwd_fused.attn_bwd_fused_gluon_kernel, sig,
                          dict(GROUP=group, HEAD_D=d, BLOCK_M=block_m, BLOCK_N=128, STAGES=stages, BAND=band))


def sass_counts(ck, c7512: bool = False, sass: str | None = None) -> dict:
    """HGMMA and local-memory (LDL + STL: spills) instruction counts in a compiled kernel's SASS (`sass`, where the
    caller has it already, else bench/sass_defs.py sass_of: Triton's own cuobjdump), and the latter inside the tile
    loops (bench/sass_defs.py loop_local); with c7512, also whether Triton's ptxas warns C7512 on its PTX (wgmma
    serialized for want of registers: Triton does not show that warning)."""
    import subprocess
    import tempfile

    from bench.sass_defs import loop_local, sass_of

    sass = sass_of(ck) if sass is None else sass
    out = {"hgmma": sass.count("HGMMA"), "local": sass.count("LDL") + sass.count("STL"), "loop_local": loop_local(sass)}
    if c7512:
        tools = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
        with tempfile.TemporaryDirectory() as tmp:
            ptx = os.path.join(tmp, "k.ptx")
            with open(ptx, "w") as f:
                f.write(ck.asm["ptx"])
            warn = subprocess.run([os.path.join(tools, "ptxas"), "-arch=sm_90a", "-v", ptx, "-o",
                                   os.path.join(tmp, "o.cubin")], capture_output=True, text=True).stderr
        out.update(c7512="C7512" in warn, smem=ck.metadata.shared)
    return out


def compile_gluon_dq(dtype: str, d: int, band: bool, group: int, block_n: int, stages: int):
    """Compile kernels/gluon_bwd.py's dQ kernel for sm_90 as the launcher specializes it (4-D tensor descriptors: Q,
    dO and dQ boxes of 64 rows, K and V boxes of block_n)."""
    from flashcheck.kernels import gluon_bwd

    def desc(rows):
        return _gluon_descriptor_type(dtype, d, rows)
    return _compile_gluon(gluon_bwd.attn_bwd_dq_gluon_kernel,
                          {"q_desc": desc(64), "k_desc": desc(block_n), "v_desc": desc(block_n), "do_desc": desc(64),
                           "dq_desc": desc(64), "LSE": "*fp32", "Delta": "*fp32", "sm_scale": "fp32", "Nq": "i32",
                           "Nk": "i32", "Hq": "i32", "off_lo": "i32", "off_hi": "i32"},
                          dict(GROUP=group, HEAD_D=d, BLOCK_M=128, BLOCK_N=block_n, STAGES=stages, BAND=band,
                               HEAVY_FIRST=band))


def _record_gluon(job):
    """One gluon entry: gluon_fwd compiled plain and banded (and WIDE at d = 64), with and without O_res; rowsum_depth
    the deepest tree where every rowsum counts the tile's 128 keys (else None)."""
    dtype, d, stages = job
    depths, variants = [], {}
    # at d = 64 the WIDE build too (three consumer warpgroups, 192 rows: attention._gluon_wide), unbanded only
    builds = [(band, 128) for band in (False, True)] + ([(False, 192)] if d == 64 else [])
    for band, block_m in builds:
        for res in (False, True):
            r = rowsum_depths(compile_gluon(dtype, d, band, res, stages, block_m=block_m).asm["ptx"])
            ok = set(r["widths"]) <= {1, 128} and 128 in r["widths"]
            depths.append(max(r["depths"]) if ok else None)
            name = "band" if band else "plain" if block_m == 128 else "wide"
            variants[f"{name}{'/res' if res else ''}"] = {"rowsum": r}
    return {"dtype": dtype, "dot": "tf32", "block_d": d, "block_m": 128, "block_n": 128, "num_warps": 8,
            "p_split": False, "rowsum_depth": None if None in depths else max(depths), "exp_argument": "unknown",
            "variants": variants, "band": False, "engine": "gluon"}


def record_gluon(path: str, workers: int) -> None:
    """Add (or replace) gluon_fwd's entries (engine "gluon") in an existing record, in place, and the entries of
    triton_fwd with the same tiles (kernel_config(engine="gluon")'s forward: the calls outside gluon_fwd's domain)
    where the record lacks them. bwd_* and delta copied from the unbanded triton entry of the same dtype and head
    dim (the backward kernels do not change with the forward's engine)."""
    import json
    from concurrent.futures import ProcessPoolExecutor

    from flashcheck.kernels.attention import kernel_config

    with open(path) as f:
        rep = json.load(f)

    def key(c):
        return (c["dtype"], c["dot"], c["block_d"], c["block_m"], c["block_n"], c["num_warps"], c["p_split"],
                c.get("engine", "triton"))
    have = {key(c) for c in rep["configs"]}
    g_jobs, t_jobs = [], []
    for dtype in ("float16", "bfloat16"):
        for d in (64, 128):
            cfg = kernel_config(d, getattr(torch, dtype), interpret=False, engine="gluon")
            g_jobs.append((dtype, d, cfg.fwd.num_stages))
            if (dtype, "tf32", d, 128, 128, 8, False, "triton") not in have:
                t_jobs.append((dtype, "tf32", d, False, tuple(cfg.flat()), False))
    with ProcessPoolExecutor(workers) as ex:
        g_out = list(ex.map(_record_gluon, g_jobs))
        t_out = list(ex.map(_record_one, t_jobs))
    new = g_out + t_out
    configs = [c for c in rep["configs"] if key(c) not in {key(e) for e in new}]
    for c in new:
        # the unbanded triton_fwd entry of kernel_config's default tiles for this dtype and head dim
        t = kernel_config(c["block_d"], getattr(torch, c["dtype"]), interpret=False, engine="triton").fwd
        (sib,) = [e for e in configs if key(e) == (c["dtype"], c["dot"], c["block_d"], t.block_m, t.block_n,
                                                   t.num_warps, False, "triton") and not e.get("band")]
        c.update({k: v for k, v in sib.items() if k.startswith("bwd") or k == "delta"})
        configs.append(c)
        print(c["dtype"], c["block_d"], c["block_m"], c["block_n"], c["num_warps"], c.get("engine", "triton"),
              "depth", c["rowsum_depth"])
    rep["configs"] = configs
    rep["method_gluon"] = ("bench/compile_forward.py --record-gluon: kernels/gluon_fwd.py compiled for sm_90 "
                           "(compile_gluon: plain and banded, with and without O_res), its rowsum trees read as "
                           "any config's (engine: gluon); triton_fwd with the same 128 x 128 / 8-warp tiles added "
                           "where missing (engine absent: triton); bwd_* and delta copied from the unbanded triton "
                           "entry of the same dtype and head dim")
    with open(path, "w") as f:
        json.dump(rep, f, indent=1)


_DTYPES_DOTS = (("float16", "tf32"), ("bfloat16", "tf32"), ("float32", "ieee"), ("float32", "tf32"))
_HEAD_DIMS = (16, 32, 64, 128, 256)
_METHOD_DELTA = ("Delta (bench/compile_forward.py --record / --record-delta): the backward's preprocess kernel "
                 "compiled as backward_launches launches it on the GPU (BLOCK_M 64, BLOCK_DV = the head dim, default "
                 "warps, "
                 "HAS_RES per delta_from), its PTX run by a straight-line interpreter on symbolic floats (program "
                 "(0, 0), every thread in lockstep, integers concrete: shuffles and shared memory move expressions "
                 "between lanes and warps); each stored Delta_i read back to its products dO[i,c] O[i,c] by their load "
                 "addresses (delta_tree). delta[delta_from].depth = the most roundings any product passes through "
                 "(mul.f32 1, an fma 1 above its addend with its own product exact, add.f32 1), None unless each row's "
                 "tree holds its head dim's columns once each, the deepest over the variants (_delta_variants: dense, "
                 "masked head dims, dO or both unaligned with rows not 16 apart, dO vectorized by 2, 4, 8); orders = the distinct leaf orders of "
                 "the complete binary tree of adds over pairs fma(p_a, fl(p_b)) among the variants (one of them is "
                 "the call's), None unless every variant's tree is one of them (masked columns as exact zeros)")


def _delta_jobs() -> list:
    return [(dtype, d) for dtype in ("float16", "bfloat16", "float32") for d in _HEAD_DIMS]


def record(path: str, workers: int) -> None:
    """Compile the forward for every (dtype, dot, padded head dim, precision mode) kernel_config serves, each in
    its variants, and write the rowsum depths and the exp arguments' forms (the record `flashcheck.adapters.
    ours_precision` reads for this Triton version); and the backward's dK/dV and dQ kernels per (dtype, dot, head
    dim), their exponent arguments' form (bwd_exp_argument, _record_backward) added to each of its configs."""
    import json
    from concurrent.futures import ProcessPoolExecutor

    jobs, bwd_jobs, delta_jobs = [], [], _delta_jobs()
    for dtype, dot in _DTYPES_DOTS:
        for d in _HEAD_DIMS:
            bwd_jobs.append((dtype, dot, d))
            for p_split in ((False, True) if dtype != "float32" else (False,)):
                jobs += _tile_jobs(dtype, dot, d, p_split)
    with ProcessPoolExecutor(workers) as ex:
        out = list(ex.map(_record_job, [("fwd", j) for j in jobs] + [("bwd", j) for j in bwd_jobs]
                          + [("delta", j) for j in delta_jobs]))
    configs, bwd = out[:len(jobs)], dict(zip(bwd_jobs, out[len(jobs):len(jobs) + len(bwd_jobs)]))
    delta = dict(zip(delta_jobs, out[len(jobs) + len(bwd_jobs):]))
    for job, c in zip(jobs, configs):
        c.update(bwd[job[:3]])
        c["delta"] = delta[(job[0], job[2])]
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
           "method_delta": _METHOD_DELTA, "configs": configs}
    with open(path, "w") as f:
        json.dump(rep, f, indent=1)
    for c in configs:
        print(c["dtype"], c["dot"], c["block_d"], c["block_m"], c["block_n"], c["num_warps"], c["p_split"],
              "depth", c["rowsum_depth"], "exp_argument", c["exp_argument"], "bwd_exp_argument", c["bwd_exp_argument"],
              "delta_depth", {k: v["depth"] for k, v in c["delta"].items()})


def record_delta(path: str, workers: int) -> None:
    """Add the Delta dot's tree (_record_delta: "delta" per config) to an existing record of this Triton version
    (`record`'s file, rewritten in place; every other field kept): the short run that brings a record made before the
    Delta dot was read up to date."""
    import json
    from concurrent.futures import ProcessPoolExecutor

    with open(path) as f:
        rep = json.load(f)
    if rep["triton"] != triton.__version__:
        raise SystemExit(f"{path} records Triton {rep['triton']}; this is Triton {triton.__version__}")
    jobs = _delta_jobs()
    with ProcessPoolExecutor(workers) as ex:
        delta = dict(zip(jobs, ex.map(_record_job, [("delta", j) for j in jobs])))
    for c in rep["configs"]:
        c["delta"] = delta[(c["dtype"], c["block_d"])]
    rep["method_delta"] = _METHOD_DELTA
    with open(path, "w") as f:
        json.dump(rep, f, indent=1)
    for (dtype, d), r in delta.items():
        print(dtype, d, {k: (v["depth"], v["fused"], v["rounded"], None if v["orders"] is None else len(v["orders"]),
                             {n: (x["depth"], x["order"], x["error"]) for n, x in v["variants"].items()})
                         for k, v in r.items()})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--dot", default=None, help="ieee / tf32 for float32")
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--dump", default=None)
    ap.add_argument("--record", default=None, help="write the record of every config to this JSON path")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--backward", action="store_true", help="the backward kernels' exponent arguments instead")
    ap.add_argument("--record-delta", default=None,
                    help="add the Delta dot's tree (every config's 'delta') to this existing record, in place")
    ap.add_argument("--delta", action="store_true", help="the preprocess kernel's Delta dot tree instead")
    ap.add_argument("--record-band", default=None,
                    help="add kernel_config's band tiles (banded calls' own forward tile) to this record, in place")
    ap.add_argument("--record-gluon", default=None,
                    help="add gluon_fwd's entries (and triton_fwd's with the same tiles) to this record, in place")
    a = ap.parse_args()
    if a.record_gluon:
        return record_gluon(a.record_gluon, a.workers)
    if a.record:
        return record(a.record, a.workers)
    if a.record_band:
        return record_band(a.record_band, a.workers)
    if a.record_delta:
        return record_delta(a.record_delta, a.workers)
    if a.delta:
        for has_res in (False, True) if a.dtype != "float32" else (False,):
            launch, ck = compile_preprocess(a.dtype, a.d, has_res)
            print(f"triton {triton.__version__} preprocess dtype {a.dtype} dv {a.d} constexprs "
                  f"{dict(launch.constexprs)} warps {launch.num_warps}:", delta_tree(ck.asm["ptx"], launch))
            if a.dump:
                os.makedirs(a.dump, exist_ok=True)
                with open(os.path.join(a.dump, f"preprocess_{a.dtype}_d{a.d}_res{int(has_res)}_triton"
                                                f"{triton.__version__}.ptx"), "w") as f:
                    f.write(ck.asm["ptx"])
        return
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

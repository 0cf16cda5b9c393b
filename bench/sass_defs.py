"""Does a compiled kernel's SASS read a wgmma descriptor from a uniform register that some path leaves unwritten?

bench/NOTES.md "Session 2026-11-29i": ptxas 12.8 (the one Triton 3.6 ships) miscompiles the loop-around-the-block
forward (bench/results/h200-2026-11-29b/gluon_fwd_loop.py): the full tiles' first S product takes Q's descriptors
for k-steps 1-7 from uniform registers (UR4:UR5 "Q + 2", ...) that only the partial-tile loop's preheader writes, so
a query block with no partial tile runs S on stale descriptors (wrong O, or an illegal address at d = 64). ptxas
12.9 and 13.0 compute them on every path. This reads the SASS (Triton's cuobjdump) and runs a must-be-written
analysis over its control-flow graph: at each HGMMA, the uniform registers of its descriptors (gdesc[URx]: A in
URx, URx+1 and B in URx+2, URx+3 when A is in shared memory; B only when A is in registers) must be written on
every path from the kernel's entry, by an unpredicated instruction. A register read where some path never wrote it
is reported: the miscompile's signature (a descriptor computed in a block that does not dominate its use).

The warp-specialize dispatch's BRX jumps through a constant-bank table: its targets are taken to be the lowest
instruction no edge reaches, then the next such, until every instruction is reached (each partition's entry).

    PYTHONPATH=. python3 bench/sass_defs.py --variant SOURCE --d 128 [--paired]   # a forward variant (fwd_variants)
    PYTHONPATH=. python3 bench/sass_defs.py --product                             # the product's Gluon forwards
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(1, str(_ROOT))

_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_UR = re.compile(r"\bUR(\d+)\b")


def parse(sass: str) -> list[tuple[int, str]]:
    """(address, instruction text without the trailing ';') of each SASS instruction, in order."""
    return [(int(m.group(1), 16), m.group(2)) for m in _LINE.finditer(sass)]


def _pred_and_body(text: str) -> tuple[bool, str]:
    """(predicated, the instruction without its guard)."""
    m = re.match(r"@!?U?P[T0-9]+\s+(.*)", text)
    return (True, m.group(1)) if m else (False, text)


def _branch_target(body: str) -> int:
    """A BRA's target address (its last hex operand)."""
    return int(re.findall(r"0x[0-9a-f]+", body)[-1], 16)


def _written(body: str) -> set[int]:
    """Uniform registers an instruction writes: its first operand if a UR (two for .64 / WIDE forms)."""
    parts = body.split(None, 1)
    if len(parts) < 2:
        return set()
    op, rest = parts
    first = rest.split(",")[0].strip()
    m = re.fullmatch(r"UR(\d+)", first)
    if not m or op.startswith(("HGMMA", "SYNCS", "UTMA", "UBLKCP", "STS", "ST.", "RED", "ATOM")):
        return set()
    r = int(m.group(1))
    return {r, r + 1} if (".64" in op or "WIDE" in op) else {r}


def _sources(body: str) -> set[int]:
    """Uniform registers an instruction that writes one reads: its other UR operands (both halves of .64 ones)."""
    parts = body.split(None, 1)
    if len(parts) < 2:
        return set()
    op, rest = parts
    regs = {int(x) for x in _UR.findall(rest.split(",", 1)[1])} if "," in rest else set()
    return regs | {r + 1 for r in regs} if ".64" in op else regs


def _read_descriptors(body: str) -> set[int]:
    """The descriptor registers an HGMMA reads (empty for other instructions)."""
    if not body.startswith("HGMMA"):
        return set()
    m = re.search(r"gdesc\[UR(\d+)\]", body)
    if not m:
        return set()
    r = int(m.group(1))
    a_in_registers = re.search(r",\s*R\d+,\s*gdesc", body) is not None
    return {r + 2, r + 3} if a_in_registers else {r, r + 1, r + 2, r + 3}


def undefined_descriptor_reads(sass: str) -> list[tuple[int, str, list[int]]]:
    """(address, instruction, registers) for each HGMMA reading a descriptor register that some path from the
    kernel's entry leaves unwritten."""
    ins = parse(sass)
    bodies = [_pred_and_body(t) for _, t in ins]  # (predicated, instruction without its guard), parsed once
    index = {a: i for i, (a, _) in enumerate(ins)}
    succ: list[list[int]] = [[] for _ in ins]
    for i, (pred, body) in enumerate(bodies):
        op = body.split()[0] if body else ""
        falls = i + 1 < len(ins)
        if op.startswith("BRA"):
            t = _branch_target(body)
            if t in index:
                succ[i].append(index[t])
            # an unpredicated BRA without a predicate operand does not fall through
            falls = falls and (pred or re.match(r"BRA\S*\s+!?U?P[T0-9]+\s*,", body) is not None)
        elif op.startswith(("EXIT", "RET")) and not pred:
            falls = False
        elif op.startswith("BRX"):
            falls = False  # successors: the entries, below
        if falls:
            succ[i].append(i + 1)
    # the BRX's targets: the lowest instruction no edge reaches yet, again until every instruction is reached (each
    # partition's code starts at its entry)
    brx = [i for i, (_, body) in enumerate(bodies) if body.startswith("BRX")]
    reached: set[int] = set()
    todo = [0]
    while True:
        while todo:
            i = todo.pop()
            if i not in reached:
                reached.add(i)
                todo.extend(succ[i])
        rest = [i for i in range(len(ins)) if i not in reached]
        if not rest or not brx:
            break
        for b in brx:
            succ[b].append(rest[0])
        todo.append(rest[0])
    preds: list[list[int]] = [[] for _ in ins]
    for i, ss in enumerate(succ):
        for s in ss:
            preds[s].append(i)
    # a register holds a written value after an instruction that writes it from written values; one written from a
    # register some path left unwritten (a copy of a stale descriptor) is as unwritten as its source
    writes = [(pred, _written(body), _sources(body)) for pred, body in bodies]
    universe = set(range(256))
    out = [set(universe) for _ in ins]
    in_ = [set() for _ in ins]
    changed = True
    while changed:
        changed = False
        for i, (pred, dest, sources) in enumerate(writes):
            new_in = set.intersection(*(out[p] for p in preds[i])) if i and preds[i] else set()
            if dest and sources <= new_in and not pred:
                new_out = new_in | dest
            elif dest and not sources <= new_in:
                new_out = new_in - dest
            else:
                new_out = new_in
            if new_out != out[i] or new_in != in_[i]:
                in_[i], out[i], changed = new_in, new_out, True
    report = []
    for i, ((a, text), (_, body)) in enumerate(zip(ins, bodies)):
        missing = sorted(_read_descriptors(body) - in_[i])
        if missing:
            report.append((a, text, missing))
    return report


def loop_local(sass: str) -> int:
    """Local-memory instructions (LDL, STL: spills) inside the tile loops: the address ranges [target, branch] of the
    predicated backward branches (a loop's back edge; the warp-specialize partitions' unconditional jumps back to
    their dispatch are not tile loops) whose range holds an HGMMA (a barrier's spin loop holds none). A spill there is
    reloaded every tile; one outside runs once a program (bench/NOTES.md "Session 2026-11-29j": the dK/dV kernel's)."""
    ins = [(a, *_pred_and_body(text)) for a, text in parse(sass)]  # (address, predicated, body), parsed once
    loops = [(_branch_target(body), a) for a, pred, body in ins if pred and body.startswith("BRA")
             and _branch_target(body) <= a]
    tile_loops = [(lo, hi) for lo, hi in loops if any(lo <= a <= hi and "HGMMA" in body for a, _, body in ins)]
    return sum(1 for a, _, body in ins
               if body.startswith(("LDL", "STL")) and any(lo <= a <= hi for lo, hi in tile_loops))


def loads_before_products(sass: str) -> list[int]:
    """Shared-memory loads (LDS.64) a tile issues before its first product step, tile by tile in program order: those
    between the previous tile's last wgmma wait (`WARPGROUP.DEPBAR.LE gsb0, 0x0`) and the next HGMMA that starts
    an accumulator from zero (`RZ, !UPT`). Each partition's first tile (no such wait before it) is left out. The
    dK/dV kernel reads its LSE slice there (gluon_bwd `_tile`'s LSE_FIRST, bench/NOTES.md "Session 2026-11-30"):
    issued after Sᵀ's and dPᵀ's steps instead, the loads waited until the tensor core had taken them all."""
    counts, since = [], None
    for _, text in parse(sass):
        body = _pred_and_body(text)[1]
        if body.startswith("WARPGROUP.DEPBAR.LE gsb0, 0x0"):
            since = 0
        elif since is not None and body.startswith("LDS.64"):
            since += 1
        elif since is not None and body.startswith("HGMMA") and body.endswith("RZ, !UPT"):
            counts.append(since)
            since = None
    return counts


def sass_of(ck) -> str:
    """A compiled kernel's SASS, disassembled by Triton's own cuobjdump."""
    import os
    import subprocess
    import tempfile

    import triton

    tools = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, "k.cubin")
        with open(cubin, "wb") as f:
            f.write(ck.asm["cubin"])
        return subprocess.run([os.path.join(tools, "cuobjdump"), "-sass", cubin], capture_output=True, text=True,
                              check=True).stdout


def main(argv=None) -> int:
    import tempfile

    import triton

    from bench.compile_forward import compile_gluon
    from bench.fwd_variants import load_variant

    p = argparse.ArgumentParser()
    p.add_argument("--variant", type=Path, help="a forward variant's source (bench/fwd_variants.py load_variant)")
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--paired", action="store_true")
    p.add_argument("--band", action="store_true")
    p.add_argument("--stages", type=int, default=2)
    p.add_argument("--product", action="store_true",
                   help="the product's Gluon forward builds (one block a program, paired, persistent), d 64 and 128")
    args = p.parse_args(argv)
    print(f"Triton {triton.__version__}")
    builds = []
    if args.product:
        for d in (64, 128):
            for band in (False, True):
                for mode in ("one", "paired", "persistent"):
                    builds.append((None, d, band, mode))
    if args.variant:
        m = load_variant("gluon_fwd", args.variant.stem, args.variant.read_text(), Path(tempfile.mkdtemp()))
        builds.append((m, args.d, args.band, "paired" if args.paired else "one"))
    bad = 0
    for module, d, band, mode in builds:
        ck = compile_gluon("bfloat16", d, band, False, args.stages if module else 2 if d == 128 else 3,
                           module=module, paired=mode == "paired", persistent=mode == "persistent")
        report = undefined_descriptor_reads(sass_of(ck))
        name = f"{'product' if module is None else args.variant.name} d {d} band {band} {mode}"
        print(f"{name}: {len(report)} HGMMA reading a descriptor some path leaves unwritten")
        for a, text, regs in report[:8]:
            print(f"    {a:#06x} {text}   UR{regs}")
        bad += bool(report)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""Where a kernel's warps wait, instruction by instruction: read the SASS page of an Nsight Compute report
(`ncu --import R.ncu-rep --page source --csv --print-source sass > R.csv`, the report taken with
`--section SourceCounters`) and print the stall samples summed by opcode (HGMMA, WARPGROUP.DEPBAR, BAR.SYNC,
SYNCS.PHASECHK, MUFU.EX2, ...) and the instructions with the most samples, each with its address and share.

    python3 bench/ncu_source.py R.csv[.gz] [--top 30] [--hot 0.5]

The page's columns vary with the ncu version: the instruction's text is the column named "Source", its samples the
first whose name holds "Warp Stall Sampling (All" (else "Sampling"), its address the one named "Address" (if any).
Used for the Gluon backward's dK/dV kernel against its dQ kernel (bench/NOTES.md "Session 2026-11-29k").

With --hot F, also the tile loops alone: the lines executed at least F times as often as the most executed one (a
warp-specialized kernel's producer warps spend their samples idle at barriers and in try_wait loops, which take no
issue slot: read the consumers' loops), their samples summed by stall reason (the page's `stall_*` columns, the
"Not Issued" ones left out) and each of the top lines with its two main reasons. That is how the dK/dV kernel's LSE
loads were found (bench/NOTES.md "Session 2026-11-30")."""
from __future__ import annotations

import argparse
import csv
import gzip
import sys
from collections import Counter


def _column(header: list[str], *needles: str) -> int | None:
    for needle in needles:
        for i, name in enumerate(header):
            if needle in name:
                return i
    return None


def _number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def opcode(instruction: str) -> str:
    """The opcode of one SASS line, its predicate dropped and its modifiers kept to two (HGMMA.64x64x16,
    BAR.SYNC.DEFER_BLOCKING, SYNCS.PHASECHK.TRANS64 ...)."""
    words = instruction.strip().split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return ".".join(words[0].split(".")[:3]) if words else "?"


def stall_table(rows: list[list[str]]) -> tuple[Counter, list[tuple[float, str, str]], float]:
    """(samples by opcode, (samples, address, instruction) of every line, total samples) of the page's rows (its
    header first)."""
    header = rows[0]
    src = _column(header, "Source")
    samples = _column(header, "Warp Stall Sampling (All", "Sampling")
    addr = _column(header, "Address")
    if src is None or samples is None:
        raise SystemExit(f"no Source / Sampling column in {header}")
    by_op: Counter = Counter()
    lines = []
    for row in rows[1:]:
        if len(row) <= max(src, samples):
            continue
        n = _number(row[samples])
        by_op[opcode(row[src])] += n
        lines.append((n, row[addr] if addr is not None else "", row[src].strip()))
    return by_op, lines, sum(by_op.values())


def hot_lines(rows: list[list[str]], fraction: float) -> tuple[Counter, list[tuple[float, str, str, list]]]:
    """(samples by stall reason, (samples, address, instruction, its two main reasons) of each line) over the lines
    executed at least `fraction` times the most executed line's count, of the page's rows (its header first)."""
    header = rows[0]
    src, samples = _column(header, "Source"), _column(header, "Warp Stall Sampling (All", "Sampling")
    addr, executed = _column(header, "Address"), _column(header, "Instructions Executed")
    reasons = [(i, name[len("stall_"):]) for i, name in enumerate(header)
               if name.startswith("stall_") and "Not Issued" not in name]
    if src is None or samples is None or executed is None or not reasons:
        raise SystemExit(f"no Source / Sampling / Instructions Executed / stall_* columns in {header}")
    body = [r for r in rows[1:] if len(r) == len(header)]
    most = max((_number(r[executed]) for r in body), default=0.0)
    by_reason: Counter = Counter()
    lines = []
    for r in body:
        if most == 0 or _number(r[executed]) < fraction * most:
            continue
        mine = Counter({name: _number(r[i]) for i, name in reasons})
        by_reason.update(mine)
        lines.append((_number(r[samples]), r[addr] if addr is not None else "", r[src].strip(),
                      [(name, n) for name, n in mine.most_common(2) if n > 0]))
    return by_reason, lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("csv")
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--hot", type=float, default=None,
                   help="also the lines executed >= HOT x the most executed one's count (the tile loops), by reason")
    args = p.parse_args(argv)
    opener = gzip.open if args.csv.endswith(".gz") else open  # (the results keep the pages gzipped)
    with opener(args.csv, "rt", newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    # ncu prints notes before the table: the header is the first row naming a source and a sampling column
    start = next((i for i, r in enumerate(rows)
                  if any("Source" in c for c in r) and any("Sampling" in c for c in r)), None)
    if start is None:
        print(f"{args.csv}: no table with Source and Sampling columns", file=sys.stderr)
        return 1
    by_op, lines, total = stall_table(rows[start:])
    if total == 0:
        print(f"{args.csv}: no stall samples", file=sys.stderr)
        return 1
    print(f"{total:.0f} stall samples; by opcode:")
    for op, n in by_op.most_common(20):
        print(f"  {op:40s} {n:10.0f} {100 * n / total:5.1f} %")
    print(f"the {args.top} instructions with the most:")
    for n, a, text in sorted(lines, reverse=True)[:args.top]:
        print(f"  {a:>8s} {n:10.0f} {100 * n / total:5.1f} %  {text}")
    if args.hot is not None:
        by_reason, hot = hot_lines(rows[start:], args.hot)
        in_hot = sum(n for n, *_ in hot)
        print(f"the tile loops (lines executed >= {args.hot:g} x the most): {len(hot)} lines, {in_hot:.0f} samples "
              f"({100 * in_hot / total:.1f} %); by reason:")
        for name, n in by_reason.most_common(8):
            print(f"  {name:24s} {n:10.0f} {100 * n / max(in_hot, 1):5.1f} %")
        print(f"their {args.top} lines with the most:")
        for n, a, text, main_reasons in sorted(hot, key=lambda x: -x[0])[:args.top]:
            why = ", ".join(f"{name} {m:.0f}" for name, m in main_reasons)
            print(f"  {a:>8s} {n:10.0f} {100 * n / max(in_hot, 1):5.1f} %  {text[:70]:70s} {why}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

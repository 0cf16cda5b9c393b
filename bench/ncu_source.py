"""Where a kernel's warps wait, instruction by instruction: read the SASS page of an Nsight Compute report
(`ncu --import R.ncu-rep --page source --csv --print-source sass > R.csv`, the report taken with
`--section SourceCounters`) and print the stall samples summed by opcode (HGMMA, WARPGROUP.DEPBAR, BAR.SYNC,
SYNCS.PHASECHK, MUFU.EX2, ...) and the instructions with the most samples, each with its address and share.

    python3 bench/ncu_source.py R.csv [--top 30]

The page's columns vary with the ncu version: the instruction's text is the column named "Source", its samples the
first whose name holds "Warp Stall Sampling (All" (else "Sampling"), its address the one named "Address" (if any).
Used for the Gluon backward's dK/dV kernel against its dQ kernel (bench/NOTES.md "Session 2026-11-29k")."""
from __future__ import annotations

import argparse
import csv
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("csv")
    p.add_argument("--top", type=int, default=30)
    args = p.parse_args(argv)
    with open(args.csv, newline="") as f:
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A/B timing of the product from two source trees, for changes no module swap can isolate (kernels/tiles.py, the
launcher, several kernels at once; bench/gluon_ab.py swaps the Gluon kernels within one process). Each round runs
one worker process per tree (the order alternating), each timing the forward and forward + backward of every cell
through `flashcheck.kernels.attention` (bf16, B·N = 16k tokens, 2048 hidden: issue 10's cells), medians of
triton.testing.do_bench; the table compares each cell's medians over the rounds. Both trees' outputs are compared
bit for bit on every cell (O, dQ, dK, dV of the same inputs): a schedule change must not move a bit.

    mkdir -p _base && git archive main flashcheck kernels proofs reference | tar -x -C _base   # the device has no git
    PYTHONPATH=. python3 bench/ab_trees.py --base _base [--new .] [--rounds 3] [--cells 128:1024:1,64:1024:1] \
        [--budget SECONDS]

--budget: start no round that would end past that many seconds (by the last round's length) and compare the rounds
run; give it instead of an outer `timeout`, which cuts the whole table (the first round compiles both trees' kernels:
~40 s a tree on a fresh machine, session 2026-11-29g).

A tree is a folder holding the package (flashcheck/, kernels/, proofs/, reference/: pyproject's package dirs); the
worker runs with PYTHONPATH=<tree> only, so it imports that tree's code.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

CELLS = [(d, n, causal) for d in (128, 64) for n in (16384, 4096, 1024) for causal in (False, True)]  # issue 10's


def parse_cells(text: str | None):
    return CELLS if not text else [(int(d), int(n), c == "1") for d, n, c in (x.split(":") for x in text.split(","))]


def cell_calls(d: int, n: int, causal: bool):
    """Issue 10's cell (bf16, B·N = 16k tokens, 2048 hidden, seed 0) as two calls of the importable product:
    (forward FLOPs, fwd, fwd_bwd); fwd_bwd returns (O, dQ, dK, dV)."""
    import torch

    from flashcheck.kernels import attention

    B, H = 16384 // n, 2048 // d
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(B, H, n, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
    x = [t.detach().requires_grad_() for t in (q, k, v)]

    def fwd():
        with torch.no_grad():
            return attention(q, k, v, causal=causal)

    def fwd_bwd():
        for t in x:
            t.grad = None
        o = attention(*x, causal=causal)
        o.backward(do)
        return [o] + [t.grad for t in x]
    return 4.0 * B * H * n * n * d / (2 if causal else 1), fwd, fwd_bwd


def worker(cells, dump: str | None) -> None:
    """Time every cell with the importable tree's product; one JSON line a cell on stdout; outputs to `dump`."""
    import torch
    from triton.testing import do_bench

    outs = {}
    for d, n, causal in cells:
        _, fwd, fwd_bwd = cell_calls(d, n, causal)
        outs[f"{d}:{n}:{int(causal)}"] = [t.cpu() for t in fwd_bwd()]
        ms = {"fwd": do_bench(fwd, warmup=25, rep=100, return_mode="median"),
              "fwd+bwd": do_bench(fwd_bwd, warmup=25, rep=100, return_mode="median")}
        print(json.dumps(dict(d=d, N=n, causal=causal, ms=ms)), flush=True)
    if dump:
        torch.save(outs, dump)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--base", help="the base tree (a folder holding the package)")
    p.add_argument("--new", default=str(Path(__file__).resolve().parents[1]), help="the new tree (default: this one)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cells", default=None, help="d:N:causal,... (e.g. 128:1024:1), default issue 10's table")
    p.add_argument("--out", default=None, help="a folder for ab_trees.json")
    p.add_argument("--budget", type=float, default=None,
                   help="seconds: no round started that would end past them (at least one round runs)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--dump", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    cells = parse_cells(args.cells)
    if args.worker:
        worker(cells, args.dump)
        return 0
    if not args.base:
        raise SystemExit("give --base DIR")
    trees = {"base": str(Path(args.base).resolve()), "new": str(Path(args.new).resolve())}
    times = {(name, c, what): [] for name in trees for c in cells for what in ("fwd", "fwd+bwd")}
    dumps = {name: f"/tmp/ab_trees_{os.getpid()}_{name}.pt" for name in trees}
    start, last = time.monotonic(), 0.0
    for r in range(args.rounds):
        if r and args.budget is not None and time.monotonic() - start + last > args.budget:
            print(f"budget: {r} of {args.rounds} rounds ({time.monotonic() - start:.0f} s)", flush=True)
            break
        began = time.monotonic()
        for name in (("base", "new") if r % 2 == 0 else ("new", "base")):
            env = dict(os.environ, PYTHONPATH=trees[name])
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--cells",
                   ",".join(f"{d}:{n}:{int(c)}" for d, n, c in cells)] + (["--dump", dumps[name]] if r < 2 else [])
            res = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=trees[name])
            if res.returncode:
                raise SystemExit(f"the {name} worker failed:\n{res.stderr[-4000:]}")
            for line in res.stdout.splitlines():
                if line.startswith("{"):
                    row = json.loads(line)
                    for what, ms in row["ms"].items():
                        times[name, (row["d"], row["N"], row["causal"]), what].append(ms)
            print(f"round {r + 1}: {name} done", flush=True)
        last = time.monotonic() - began
    import torch

    base_out, new_out = torch.load(dumps["base"]), torch.load(dumps["new"])
    rows = []
    for c in cells:
        d, n, causal = c
        key = f"{d}:{n}:{int(causal)}"
        same = [torch.equal(a, b) for a, b in zip(base_out[key], new_out[key])]
        med = {(name, what): statistics.median(times[name, c, what]) for name in trees for what in ("fwd", "fwd+bwd")}
        rows.append(dict(d=d, N=n, causal=causal, same=same, ms={f"{a} {b}": v for (a, b), v in med.items()},
                         rounds={f"{a} {w}": times[a, c, w] for a in trees for w in ("fwd", "fwd+bwd")}))
        print(f"d={d:3d} N={n:5d} causal={causal!s:5} | fwd new/base speed {med['base', 'fwd'] / med['new', 'fwd']:.3f}"
              f" | fwd+bwd {med['base', 'fwd+bwd'] / med['new', 'fwd+bwd']:.3f} | bwd ~ "
              f"{(med['base', 'fwd+bwd'] - med['base', 'fwd']) / (med['new', 'fwd+bwd'] - med['new', 'fwd']):.3f}"
              f" | O dQ dK dV bit for bit: {' '.join('=' if s else 'DIFFERS' for s in same)}", flush=True)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "ab_trees.json").write_text(json.dumps(dict(trees=trees, rows=rows), indent=1))
    return 0 if all(all(r["same"]) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

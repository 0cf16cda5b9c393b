"""A/B timing of the Gluon kernels against earlier versions of them, through the product's launcher (the swap of
bench/gluon_bitwise.py, which checks the outputs bit for bit): the forward, and forward + backward, on issue 10's
cells (bf16, B·N = 16k tokens, 2048 hidden; bench/ab_trees.CELLS), the two versions interleaved within each round
(the order alternating), medians of triton.testing.do_bench. The engine is the product's ("auto" unless
FLASHCHECK_FORWARD_ENGINE says otherwise): cells that run no Gluon kernel time the same code twice (a noise control).

    git show REV:kernels/gluon_fwd.py > /tmp/base_fwd.py; git show REV:kernels/gluon_bwd.py > /tmp/base_bwd.py
    PYTHONPATH=. python3 bench/gluon_ab.py --base-fwd /tmp/base_fwd.py --base-bwd /tmp/base_bwd.py [--rounds 5]
        [--base-fused /tmp/base_fused.py]
        [--cells 128:1024:1,64:4096:1] [--out DIR]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(1, str(_ROOT))

from bench.ab_trees import cell_calls, parse_cells  # noqa: E402  (after the repo root is importable)
from bench.fwd_variants import save_rows  # noqa: E402
from bench.gluon_bitwise import swapper  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--base-fwd", help="an earlier kernels/gluon_fwd.py")
    p.add_argument("--base-bwd", help="an earlier kernels/gluon_bwd.py")
    p.add_argument("--base-fused", help="an earlier kernels/gluon_bwd_fused.py (d = 64, N >= 8k unmasked calls)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--cells", default=None, help="d:N:causal,... (e.g. 128:1024:1), default issue 10's table")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    import torch
    from triton.testing import do_bench

    use = swapper(args.base_fwd, args.base_bwd, args.base_fused)
    cells = parse_cells(args.cells)
    print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    rows = []
    for d, n, causal in cells:
        flops, fwd, fwd_bwd = cell_calls(d, n, causal)
        t = {(what, version): [] for what in ("fwd", "fwd+bwd") for version in ("base", "kernel")}
        for r in range(args.rounds):
            for version in (("base", "kernel") if r % 2 == 0 else ("kernel", "base")):
                use(version)
                for what, fn in (("fwd", fwd), ("fwd+bwd", fwd_bwd)):
                    t[what, version].append(do_bench(fn, warmup=25, rep=100, return_mode="median"))
        use("kernel")
        ms = {f"{what} {version}": statistics.median(v) for (what, version), v in t.items()}
        row = dict(d=d, N=n, causal=causal, ms=ms, rounds={f"{a} {b}": v for (a, b), v in t.items()})
        rows.append(row)
        print(f"d={d:3d} N={n:5d} causal={causal!s:5} | fwd kernel {flops / ms['fwd kernel'] / 1e9:5.1f} TFLOP/s "
              f"({ms['fwd base'] / ms['fwd kernel']:.3f}x base) | fwd+bwd kernel "
              f"{3.5 * flops / ms['fwd+bwd kernel'] / 1e9:5.1f} ({ms['fwd+bwd base'] / ms['fwd+bwd kernel']:.3f}x "
              f"base) | bwd ~ {ms['fwd+bwd base'] - ms['fwd base']:.3f} -> "
              f"{ms['fwd+bwd kernel'] - ms['fwd kernel']:.3f} ms", flush=True)
    save_rows(args.out, "gluon_ab.json", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())

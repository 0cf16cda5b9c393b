"""The Gluon forward prototype (bench/gluon/fa_fwd.py) against ours and cuDNN on issue 10's forward cells, one process.

For each cell of bench/run.py's table grid (bf16, B·N = 16k, H·d = 2048):
1. accuracy first: O and LSE of the prototype, ours and cuDNN against float64 attention of the same rounded inputs
   on the first two heads of the first batch (max abs error); a prototype whose error is not within 2x of ours is
   reported as WRONG and not timed (its speed would mean nothing);
2. speed: forward under no_grad, `rounds` interleaved rounds (backend after backend), medians of
   triton.testing.do_bench, inputs rotated over bench/run.py's `_copies` sets (no warm L2).

    PYTHONPATH=$PWD python3 bench/gluon/bench_fwd.py --out DIR [--rounds 3] [--cells d128N16k,...]
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bench.run import TABLE_GRID, _copies, _timer, make_backend  # noqa: E402
from bench.gluon import fa_fwd  # noqa: E402


def _ref(q, k, v, causal):
    """float64 O and LSE of the first batch's first two heads."""
    import torch

    q, k, v = (x[:1, :2].double() for x in (q, k, v))
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    lse = torch.logsumexp(s, -1)
    return torch.softmax(s, -1) @ v, lse


def main(argv=None) -> int:
    import torch

    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cells", default="", help="comma-separated labels like d128N16k or d64N1kc (c = causal)")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--variants", default="ws", help="comma-separated fa_fwd variants (ws, pingpong, twowg, "
                   "optionally :STAGES)")
    args = p.parse_args(argv)
    dtype = getattr(torch, args.dtype)
    timer = _timer("cuda")
    rows = []
    for cfg in TABLE_GRID:
        tag = f"d{cfg.d}N{cfg.N // 1024}k" + ("c" if cfg.causal else "")
        if args.cells and tag not in args.cells.split(","):
            continue
        g = torch.Generator(device="cuda").manual_seed(0)
        sets = [tuple(torch.randn(cfg.B, cfg.H, cfg.N, cfg.d, device="cuda", dtype=dtype, generator=g)
                      for _ in range(3)) for _ in range(_copies(cfg, "cuda", dtype))]
        variants = args.variants.split(",")
        fns = {**{f"gluon-{var}": (lambda q, k, v, c=cfg.causal, var=var: fa_fwd.forward(q, k, v, causal=c,
                                                                                       variant=var)[0])
                  for var in variants},
               "ours": make_backend("ours", cfg.causal), "torch-sdpa-cudnn": make_backend("torch-sdpa-cudnn",
                                                                                         cfg.causal)}
        q, k, v = sets[0]
        o_ref, lse_ref = _ref(q, k, v, cfg.causal)
        row = {"cell": cfg.label(), "tag": tag, "B": cfg.B, "H": cfg.H, "err": {}, "ms": {}, "rounds": {}}
        with torch.no_grad():
            for name, fn in fns.items():
                o = fn(q, k, v)
                row["err"][name] = float((o[:1, :2].double() - o_ref).abs().max())
            o_o = fns["ours"](q, k, v)
            wrong = set()
            for var in variants:
                name = f"gluon-{var}"
                o_g, lse = fa_fwd.forward(q, k, v, causal=cfg.causal, variant=var)
                row["err"][f"{name}_lse"] = float((lse[:1, :2].double() - lse_ref).abs().max())
                row["err"][f"{name}_vs_ours_all_heads"] = vs = float((o_g.float() - o_o.float()).abs().max())
                nan = bool(torch.isnan(o_g).any() or torch.isnan(lse).any())
                if nan or not row["err"][name] <= 2 * row["err"]["ours"] or not vs < 0.05:
                    wrong.add(name)
        row["wrong"] = sorted(wrong)
        names = [n for n in fns if n not in wrong]
        times = {n: [] for n in names}
        turn = [0]

        def call(fn):
            def run():
                turn[0] = (turn[0] + 1) % len(sets)
                with torch.no_grad():
                    fn(*sets[turn[0]])
            return run
        for _ in range(args.rounds):
            for n in names:
                times[n].append(timer(call(fns[n])))
        flops = cfg.flops("fwd")
        for n in names:
            row["ms"][n] = statistics.median(times[n])
            row["rounds"][n] = times[n]
        row["tflops"] = {n: flops / row["ms"][n] * 1e-9 for n in names}
        ratio = {f"{a}/cudnn": row["ms"]["torch-sdpa-cudnn"] / row["ms"][a] for a in names if a != "torch-sdpa-cudnn"}
        row["ratio"] = ratio
        print(f"{tag:10s} WRONG {row['wrong']} err " + " ".join(f"{n} {e:.2e}" for n, e in row["err"].items()
                                                                  if "_" not in n) + " | TFLOP/s "
              + " ".join(f"{n} {t:.0f}" for n, t in row["tflops"].items()) + " | "
              + " ".join(f"{n} {r:.2f}" for n, r in ratio.items()), flush=True)
        rows.append(row)
        del sets
        torch.cuda.empty_cache()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gluon_fwd.json").write_text(json.dumps({"torch": torch.__version__, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

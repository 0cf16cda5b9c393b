"""Host time per forward call of each forward engine (issue 10: gluon_fwd's N = 1k cells looked host-bound).

    PYTHONPATH=$PWD python3 bench/engine_host.py [--n 300] [--out DIR]

A tiny problem (B = H = 1, N = 128, d = 128, bf16) under no_grad: the GPU finishes each launch long before the host
issues the next, so the wall time per call is the host's path. attention() with kernel_config(engine=...) tiles,
triton and gluon, and cuDNN's SDPA, 3 interleaved rounds, medians (one synchronize at the end of each loop).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(1, _ROOT)


def main(argv=None) -> int:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from flashcheck.kernels import attention, kernel_config

    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=300)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    q, k, v = (torch.randn(1, 1, 128, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    tiles = {e: kernel_config(128, torch.bfloat16, engine=e) for e in ("triton", "gluon")}

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            torch.nn.functional.scaled_dot_product_attention(q, k, v)
    calls = {"triton": lambda: attention(q, k, v, tiles=tiles["triton"]),
             "gluon": lambda: attention(q, k, v, tiles=tiles["gluon"]), "cudnn": cudnn}
    times = {name: [] for name in calls}
    with torch.no_grad():
        for _ in range(3):
            for name, fn in calls.items():
                for _ in range(20):
                    fn()
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(args.n):
                    fn()
                torch.cuda.synchronize()
                times[name].append((time.perf_counter() - t0) / args.n * 1e6)
    out = {name: {"us_per_call": statistics.median(t), "rounds": t} for name, t in times.items()}
    for name, r in out.items():
        print(f"{name:8s} {r['us_per_call']:7.1f} us per forward call (rounds {[round(x, 1) for x in r['rounds']]})")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "engine_host.json").write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Forward time of d = 64 calls with SHORT_KEYS to LONG_KEYS keys under the "auto" engine against "triton" (the
engine read per call: FLASHCHECK_FORWARD_ENGINE), side by side in one process, with and without a dense mask.
Unmasked, "auto" runs gluon_fwd's 128 x 128 tile (attention.SHORT_KEYS); a dense mask keeps gluon_fwd out, and
"auto" then runs triton_fwd at its own 64 x 64 tile as "triton" does (at the 128 x 128 one it ran 0.76-0.78x: bench/
NOTES.md, "Session 2026-11-29c"). bf16, B * N = 16k tokens, 32 heads.

    PYTHONPATH=. python3 bench/dense_short.py [--rounds 3] [--backward]
"""
from __future__ import annotations

import argparse
import os

import torch
import triton

from flashcheck.kernels.attention import attention, kernel_config

NS = (1024, 2048, 4000, 8192)  # 8192: a long call (LONG_KEYS), for the dense mask at the Gluon tiles


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--ns", type=int, nargs="+", default=NS)
    p.add_argument("--backward", action="store_true", help="time forward + backward, each engine's tiles passed "
                   "explicitly (kernel_config(engine=, n_keys=, n_queries=): the launch records are cached per "
                   "tiles, not per engine)")
    args = p.parse_args()
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__)
    g = torch.Generator(device="cuda").manual_seed(0)
    for n in args.ns:
        b = max(1, 16384 // n)
        q, k, v, do = (torch.randn(b, 32, n, 64, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
        mask = torch.rand(n, n, device="cuda", generator=g) < 0.9
        for name, m in (("unmasked", None), ("dense mask", mask)):
            times = {"auto": [], "triton": []}
            for _ in range(args.rounds):
                for engine in times:
                    if args.backward:
                        tiles = kernel_config(64, torch.bfloat16, engine=engine, n_keys=n,
                                              n_queries=None if m is not None else n)
                        x = [t.detach().requires_grad_() for t in (q, k, v)]
                        times[engine].append(triton.testing.do_bench(
                            lambda: attention(*x, mask=m, tiles=tiles).backward(do)))
                        continue
                    os.environ["FLASHCHECK_FORWARD_ENGINE"] = engine
                    with torch.no_grad():
                        times[engine].append(triton.testing.do_bench(lambda: attention(q, k, v, mask=m)))
            best = {e: min(t) for e, t in times.items()}
            flops = 4.0 * b * 32 * n * n * 64 * (3.5 if args.backward else 1)
            print(f"N={n:5d} {name:10s} {'fwd+bwd' if args.backward else 'fwd'} auto {best['auto'] * 1e3:8.1f} us "
                  f"({flops / best['auto'] / 1e9:5.0f} TFLOP/s)  triton {best['triton'] * 1e3:8.1f} us  "
                  f"auto/triton speed {best['triton'] / best['auto']:.3f}")
    os.environ.pop("FLASHCHECK_FORWARD_ENGINE", None)


if __name__ == "__main__":
    main()

"""Where the d = 128 forward's small tile stops winning (issue 10): 64x64/4w/3s against the table's 128x128/8w/3s
(heavy first under a band) at N = 1k .. 16k, bf16, B·N = 16k, H·d = 2048, causal or not, interleaved rounds in one
process, cuDNN beside. At N = 1k the small tile took 0.82x the time causal, 0.95x not (2026-11-27d); at N = 16k the
large tile 0.94x (2026-11-23b).

    PYTHONPATH=$PWD python3 bench/fwd_tile_threshold.py [--N 1024,2048,4096,8192,16384] [--rounds 3] [--out DIR]
    PYTHONPATH=$PWD python3 bench/fwd_tile_threshold.py --backward [--N 1024,4096]   # the backward's tiles likewise

(The forward's band tile is kernel_config's since 2026-11-27d: "table" is then the band tile for causal rows; pass
the unbanded table explicitly through tiles=, as below, to compare the two.)
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from kernel_speed import _cudnn, _flops, _inputs, _interleaved, _no_grad_call, ka  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--N", default="1024,2048,4096,8192,16384")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--out", default=None)
    ap.add_argument("--backward", action="store_true",
                    help="the backward's tiles instead (dK/dV and dQ 64x64/4w/3s against the table's, causal and not)")
    a = ap.parse_args(argv)
    if a.backward:
        return backward(a)
    attention = ka.attention
    table = ka.kernel_config(a.d, torch.bfloat16, interpret=False)
    small = dataclasses.replace(table, fwd=ka.TileConfig(64, 64, 4, 3))
    small_hf = dataclasses.replace(table, fwd=ka.TileConfig(64, 64, 4, 3, heavy_first=True))
    rows = []
    for N in (int(x) for x in a.N.split(",")):
        for causal in (False, True):
            B, H = max(1, 16384 // N), 2048 // a.d
            q, k, v = _inputs(B, H, N, a.d)
            fns = {"table": functools.partial(_no_grad_call, attention, q, k, v, causal=causal, tiles=table),
                   "64x64/4w/3s": functools.partial(_no_grad_call, attention, q, k, v, causal=causal, tiles=small),
                   "64x64/4w/3s heavy first": functools.partial(_no_grad_call, attention, q, k, v, causal=causal,
                                                                tiles=small_hf),
                   "cudnn": functools.partial(_no_grad_call, _cudnn(causal), q, k, v)}
            times = _interleaved(fns, a.rounds, 30, False)
            med = {n: statistics.median(t) for n, t in times.items()}
            r = [s / t for s, t in zip(times["64x64/4w/3s"], times["table"])]
            fl = _flops(B, H, N, a.d, causal)
            row = dict(N=N, causal=causal, ms=med, ratio_small_over_table=statistics.median(r), lo=min(r), hi=max(r),
                       x_cudnn={n: med["cudnn"] / med[n] for n in ("table", "64x64/4w/3s")},
                       tflops={n: fl / med[n] * 1e-9 for n in med})
            rows.append(row)
            print(f"d={a.d} N={N:5d} causal={causal!s:5} table {med['table']:.3f} ms ({row['tflops']['table']:.0f}, "
                  f"x cuDNN {row['x_cudnn']['table']:.2f})  64x64 {med['64x64/4w/3s']:.3f} ms "
                  f"({row['tflops']['64x64/4w/3s']:.0f}, x cuDNN {row['x_cudnn']['64x64/4w/3s']:.2f})  "
                  f"small/table {row['ratio_small_over_table']:.3f} [{row['lo']:.3f}, {row['hi']:.3f}]  heavy first "
                  f"{med['64x64/4w/3s heavy first']:.3f} ms", flush=True)
            del q, k, v
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "fwd_tile_threshold.json"), "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
                           triton=__import__("triton").__version__, rows=rows), f, indent=1)


def backward(a):
    """The backward's kernels at small tiles (64x64/4w/3s for dK/dV, for dQ, for both) against the table's, the
    forward at the table's, timed as autograd.grad on a kept graph (bench/run.py's way), interleaved with cuDNN's."""
    attention = ka.attention
    table = ka.kernel_config(a.d, torch.bfloat16, interpret=False)
    small = ka.TileConfig(64, 64, 4, 3)
    cands = {"table": table, "dkdv 64x64": dataclasses.replace(table, dkdv=small),
             "dq 64x64": dataclasses.replace(table, dq=small), "both 64x64": dataclasses.replace(table, dkdv=small,
                                                                                              dq=small)}
    rows = []
    for N in (int(x) for x in a.N.split(",")):
        for causal in (False, True):
            B, H = max(1, 16384 // N), 2048 // a.d
            q, k, v = _inputs(B, H, N, a.d)
            do = torch.randn_like(q)
            fns = {}
            for name, tiles in cands.items():
                o = attention(q, k, v, causal=causal, tiles=tiles)
                fns[name] = functools.partial(torch.autograd.grad, o, (q, k, v), do, retain_graph=True)
            oc = _cudnn(causal)(q, k, v)
            fns["cudnn"] = functools.partial(torch.autograd.grad, oc, (q, k, v), do, retain_graph=True)
            times = _interleaved(fns, a.rounds, 30, False)
            med = {n: statistics.median(t) for n, t in times.items()}
            ratio = {n: statistics.median([x / y for x, y in zip(times[n], times["table"])]) for n in cands}
            rows.append(dict(N=N, causal=causal, ms=med, over_table=ratio,
                             x_cudnn={n: med["cudnn"] / med[n] for n in cands}))
            print(f"bwd d={a.d} N={N:5d} causal={causal!s:5} table {med['table']:.3f} ms (x cuDNN "
                  f"{med['cudnn'] / med['table']:.2f})  " + "  ".join(f"{n} {ratio[n]:.3f}" for n in cands if n != "table"),
                  flush=True)
            del q, k, v, do, fns, oc
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "bwd_tile_threshold.json"), "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
                           triton=__import__("triton").__version__, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()

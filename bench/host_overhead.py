"""Host time per call of our attention, eager autograd.Function (the default since 2026-11-27c) against the
custom op's dispatch (torch.library, what every eager call went through before; torch.compile still does), and
what it costs in issue 10's small cells (bf16, B·N = 16k, H·d = 2048, N = 1k and 4k, causal or not), cuDNN beside,
interleaved rounds in one process.

    PYTHONPATH=$PWD python3 bench/host_overhead.py [--rounds 3] [--out DIR]

Host time: 300 calls of a tiny problem (B = H = 1, N = 128, d = 64) back to back, then one synchronize: the
GPU finishes each launch long before the host issues the next, so the wall time per call is the host's path.
"""
from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import statistics
import time

import torch
from triton.testing import do_bench

A = importlib.import_module("flashcheck.kernels.attention")


def via_op(q, k, v, causal=False):
    """attention() through torch.ops.flashcheck.attention_fwd, as every eager call was before 2026-11-27c."""
    nq, nk = q.shape[2], k.shape[2]
    grad = torch.is_grad_enabled() and q.requires_grad
    dot, p_split, save_res = A._modes(q.dtype, None, "default", "fp32", grad)
    band, lo, hi = A._band(causal, None, nq, nk)
    o, _, _ = torch.ops.flashcheck.attention_fwd(q, k, v, None, [], 1.0 / math.sqrt(q.shape[-1]), band, lo, hi,
                                                0, 0, dot, p_split, save_res, [])
    return o


def eager(q, k, v, causal=False):
    return A.attention(q, k, v, causal=causal)


def cudnn(q, k, v, causal=False):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


FNS = {"eager": eager, "op": via_op, "cudnn": cudnn}


def host_us(fn, grad: bool, n=300) -> float:
    q, k, v = (torch.randn(1, 1, 128, 64, device="cuda", dtype=torch.bfloat16, requires_grad=grad) for _ in range(3))
    do = torch.randn_like(q)
    for _ in range(20):
        o = fn(q, k, v)
        if grad:
            torch.autograd.grad(o, (q, k, v), do)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        o = fn(q, k, v)
        if grad:
            torch.autograd.grad(o, (q, k, v), do)
    torch.cuda.synchronize()
    return 1e6 * (time.perf_counter() - t) / n


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "triton": importlib.import_module("triton").__version__, "host_us": {}, "cells": []}
    for grad in (False, True):
        for name, fn in FNS.items():
            out["host_us"][f"{name} {'fwd+bwd' if grad else 'fwd'}"] = statistics.median(
                host_us(fn, grad) for _ in range(3))
    for key, us in out["host_us"].items():
        print(f"host {key:<16} {us:7.1f} us per call", flush=True)
    for d in (64, 128):
        for N in (1024, 4096):
            for causal in (False, True):
                B, H = 16384 // N, 2048 // d
                q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                           for _ in range(3))
                do = torch.randn_like(q)
                times = {f"{n} {p}": [] for n in FNS for p in ("fwd", "bwd")}
                for _ in range(a.rounds):
                    for name, fn in FNS.items():
                        times[f"{name} fwd"].append(do_bench(lambda: fn(q, k, v, causal), warmup=25, rep=100,
                                                             return_mode="median"))
                        o = fn(q, k, v, causal)
                        times[f"{name} bwd"].append(do_bench(lambda: torch.autograd.grad(o, (q, k, v), do,
                                                                                       retain_graph=True),
                                                             warmup=25, rep=100, return_mode="median"))
                med = {key: statistics.median(t) for key, t in times.items()}
                cell = {"d": d, "N": N, "causal": causal, "ms": med, "rounds": times}
                out["cells"].append(cell)
                print(f"d={d:3d} N={N:5d} causal={causal!s:5}  fwd ms eager {med['eager fwd']:.4f} op "
                      f"{med['op fwd']:.4f} cudnn {med['cudnn fwd']:.4f} (eager/op {med['eager fwd']/med['op fwd']:.3f},"
                      f" x cudnn {med['cudnn fwd']/med['eager fwd']:.2f} <- {med['cudnn fwd']/med['op fwd']:.2f})  "
                      f"bwd ms eager {med['eager bwd']:.4f} op {med['op bwd']:.4f} cudnn {med['cudnn bwd']:.4f} "
                      f"(eager/op {med['eager bwd']/med['op bwd']:.3f}, x cudnn {med['cudnn bwd']/med['eager bwd']:.2f}"
                      f" <- {med['cudnn bwd']/med['op bwd']:.2f})", flush=True)
                del q, k, v, do
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "host_overhead.json"), "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()

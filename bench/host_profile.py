"""Where the host time of one small attention call goes (issue 10: the N = 1k cells are host-bound).

    PYTHONPATH=$PWD python3 bench/host_profile.py [--n 300] [--out DIR]

A tiny problem (B = H = 1, N = 128, d = 64, bf16): the GPU finishes each launch long before the host issues the next,
so wall time per call is the host's path. Times, per call, each layer of the path separately (one synchronize at the
end of each loop):
  fwd            attention(q, k, v) under no_grad (q etc. do not require grad)
  fwd_impl       _fwd_impl with the arguments attention() computes (no checks, no mode logic)
  fwd_launch     the forward kernel's kernel[grid](...) alone, arguments prepared once
  fwd+bwd        attention() with grad, then torch.autograd.grad
  bwd            torch.autograd.grad alone on a kept graph (retain_graph)
  bwd_impl       _bwd_impl alone
  bwd_launches   the three backward kernels' kernel[grid](...) alone, arguments prepared once
  empty          torch.empty of O's shape (one allocation)
  fwd / fwd grad / fwd+bwd / fwd+bwd graph kept [direct | jit]: attention() with launches straight to the binaries
                 (the default) and with every launch through Triton's JIT, 3 interleaved rounds, medians ("graph
                 kept": each output held until the next call); cuDNN's in the same harness
then cProfile of 300 fwd+bwd calls (top functions by own time) and torch.profiler's CPU-side CUDA API calls of 20
(a cudaStreamSynchronize / cudaMemcpy in the path would show here).
"""
from __future__ import annotations

import argparse
import cProfile
import importlib
import io
import json
import math
import os
import pstats
import statistics
import time

import torch

A = importlib.import_module("flashcheck.kernels.attention")


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def per_call_us(fn, n: int) -> float:
    for _ in range(min(n, 10)):
        fn()
    sync()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    sync()
    return 1e6 * (time.perf_counter() - t) / n


def prepared(q, k, v, grad: bool):
    """attention()'s arguments to _fwd_impl for these tensors."""
    dot, p_split, save_res = A._modes(q.dtype, None, "default", "fp32", grad)
    band, lo, hi = A._band(False, None, q.shape[2], k.shape[2])
    return (q, k, v, None, [], 1.0 / math.sqrt(q.shape[-1]), band, lo, hi, 0, 0, dot, p_split, save_res, [])


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--out", default=None)
    ap.add_argument("--device", default="cuda", help="cpu: a dry run of the code path (TRITON_INTERPRET=1, fp16)")
    a = ap.parse_args(argv)
    n = a.n
    dev = a.device
    dtype = torch.bfloat16 if dev == "cuda" else torch.float16
    q0, k0, v0 = (torch.randn(1, 1, 128, 64, device=dev, dtype=dtype) for _ in range(3))
    q, k, v = (t.clone().requires_grad_(True) for t in (q0, k0, v0))
    do = torch.randn_like(q0)
    res = {}

    res["empty"] = per_call_us(lambda: torch.empty((1, 1, 128, 64), dtype=dtype, device=dev), n)
    with torch.no_grad():
        res["fwd"] = per_call_us(lambda: A.attention(q0, k0, v0), n)
    args = prepared(q0, k0, v0, False)
    res["fwd_impl"] = per_call_us(lambda: A._fwd_impl(*args), n)

    # the forward launch alone
    o, lse, o_res = A._fwd_impl(*args)
    launch = A.forward_launch(A.Layout.of(q0), A.Layout.of(k0), A.Layout.of(v0), A.Layout.of(o), None, None,
                              band=False, off_lo=0, off_hi=0, block_q=0, block_k=0, dot=args[11], p_split=False,
                              save_res=False, tiles=[])
    kw = dict(launch.constexprs, num_warps=launch.num_warps, num_stages=launch.num_stages)
    fk = A.attn_fwd_kernel[launch.grid]
    lead = (q0, k0, v0, o, o, lse, q0, lse, lse, lse, lse, args[5])
    res["fwd_launch"] = per_call_us(lambda: fk(*lead, *launch.ints, **kw), n)
    res["layouts_and_launch_record"] = per_call_us(lambda: A.forward_launch(
        A.Layout.of(q0), A.Layout.of(k0), A.Layout.of(v0), A.Layout.of(o), None, None, band=False, off_lo=0,
        off_hi=0, block_q=0, block_k=0, dot=args[11], p_split=False, save_res=False, tiles=[]), n)

    def fwd_bwd():
        out = A.attention(q, k, v)
        torch.autograd.grad(out, (q, k, v), do)
    res["fwd+bwd"] = per_call_us(fwd_bwd, n)
    out = A.attention(q, k, v)
    res["bwd"] = per_call_us(lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True), n)

    gargs = prepared(q0, k0, v0, True)
    o, lse, o_res = A._fwd_impl(*gargs)
    bargs = (q0, k0, v0, o, o_res, lse, do, None, None, [], gargs[5], False, 0, 0, 0, 0, gargs[11], [])
    res["bwd_impl"] = per_call_us(lambda: A._bwd_impl(*bargs), n)

    dq, dk, dv = (torch.empty_like(t) for t in (q0, k0, v0))
    pre, dkdv, dql = A.backward_launches(
        A.Layout.of(q0), A.Layout.of(k0), A.Layout.of(v0), A.Layout.of(o), A.Layout.of(do),
        (A.Layout.of(dq), A.Layout.of(dk), A.Layout.of(dv)), True, None, None, band=False, off_lo=0, off_hi=0,
        block_q=0, block_k=0, dot=gargs[11], tiles=[])
    delta = torch.empty_like(lse)

    def kwargs(l):
        return dict(l.constexprs, **({"num_warps": l.num_warps} if l.num_warps else {}),
                    **({"num_stages": l.num_stages} if l.num_stages else {}))
    kp, kk, kq = (kernel[l.grid] for kernel, l in ((A.attn_bwd_preprocess_kernel, pre),
                                                   (A.attn_bwd_dkdv_kernel, dkdv), (A.attn_bwd_dq_kernel, dql)))
    wp, wk, wq = kwargs(pre), kwargs(dkdv), kwargs(dql)
    sc = gargs[5]

    def three():
        kp(o, o_res, do, delta, *pre.ints, **wp)
        kk(q0, k0, v0, do, lse, delta, dk, dv, q0, lse, lse, lse, lse, sc, *dkdv.ints, **wk)
        kq(q0, k0, v0, do, lse, delta, dq, q0, lse, lse, lse, lse, sc, *dql.ints, **wq)
    res["bwd_launches"] = per_call_us(three, n)
    res["launch_preprocess"] = per_call_us(lambda: kp(o, o_res, do, delta, *pre.ints, **wp), n)

    # direct launches (the default since 2026-11-27d) against every launch through Triton's JIT, interleaved
    def fwd_nograd():
        with torch.no_grad():
            A.attention(q0, k0, v0)

    def fwd_grad():
        A.attention(q, k, v)

    # Ours pays ~276 us more per forward + backward than its forward and its retained-graph backward apart (cuDNN 29):
    # a hypothesis is that the freed graph's Python node (its destructor needs the GIL) dies on the autograd device
    # thread while this thread runs the next call's Python. Keeping each output until the next call makes this
    # thread drop the graph, after the device thread has let go of it.
    kept = []

    def fwd_bwd_kept():
        out = A.attention(q, k, v)
        torch.autograd.grad(out, (q, k, v), do)
        kept[:] = [out]
    for r in range(3):
        for mode in ("direct", "jit"):
            A._DIRECT_OFF.clear()
            if mode == "jit":
                A._DIRECT_OFF.append(True)
            for name, fn in (("fwd", fwd_nograd), ("fwd grad", fwd_grad), ("fwd+bwd", fwd_bwd),
                             ("fwd+bwd graph kept", fwd_bwd_kept)):
                res.setdefault(f"{name} [{mode}]", []).append(per_call_us(fn, n))
    A._DIRECT_OFF.clear()
    res = {key: statistics.median(v) if isinstance(v, list) else v for key, v in res.items()}
    print("binaries launched directly:", len(A._BINARIES), "triton", importlib.import_module("triton").__version__)

    from torch.nn.attention import SDPBackend, sdpa_kernel
    F = torch.nn.functional.scaled_dot_product_attention
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION if dev == "cuda" else SDPBackend.MATH):
        with torch.no_grad():
            res["cudnn fwd"] = per_call_us(lambda: F(q0, k0, v0), n)
        res["cudnn fwd grad"] = per_call_us(lambda: F(q, k, v), n)
        res["cudnn fwd+bwd"] = per_call_us(lambda: torch.autograd.grad(F(q, k, v), (q, k, v), do), n)
        oc = F(q, k, v)
        res["cudnn bwd"] = per_call_us(lambda: torch.autograd.grad(oc, (q, k, v), do, retain_graph=True), n)

    for key, us in res.items():
        print(f"{key:<28} {us:8.1f} us per call", flush=True)

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        fwd_bwd()
    sync()
    prof.disable()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(30)
    print(s.getvalue())
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(40)
    print(s.getvalue())

    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        for _ in range(20):
            fwd_bwd()
        sync()
    print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "host_profile.json"), "w") as f:
            json.dump({"device": torch.cuda.get_device_name() if dev == "cuda" else "cpu", "torch": torch.__version__,
                       "triton": importlib.import_module("triton").__version__, "us_per_call": res}, f, indent=1)
        p.export_chrome_trace(os.path.join(a.out, "trace.json"))


if __name__ == "__main__":
    main()

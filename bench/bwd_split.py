"""What limits our backward against cuDNN's (issue 10): the backward's kernels one by one under torch.profiler (ours:
Δ, dK/dV, dQ; cuDNN's), ms per backward, and whether each backward is deterministic (dQ, dK, dV bit for bit over 3
calls on the same inputs). bf16, B·N = 16k tokens, 2048 hidden; our engine as kernel_config gives it.

    PYTHONPATH=$PWD python3 bench/bwd_split.py [--out DIR]

Ours recomputes S = Q Kᵀ and dP = dO Vᵀ in a dQ kernel of its own, so that no two programs add into one dQ row
(deterministic, no atomics): 7 products of N x N x d per backward where a kernel accumulating dQ across key blocks
with atomics needs 5; TFLOP/s counts 5 (2.5x the forward's), as for every backend.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(1, _ROOT)


def _inputs(d: int, n: int, grad: bool = False):
    import torch

    B, H = 16384 // n, 2048 // d
    g = torch.Generator(device="cuda").manual_seed(0)
    return [torch.randn(B, H, n, d, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_(grad)
            for _ in range(3)]


def _tflops(d, n, causal, ms, factor=1.0):
    B, H = 16384 // n, 2048 // d
    f = 4 * B * H * n * n * d * factor / (2 if causal else 1)
    return f / (ms * 1e-3) / 1e12


def bwd_split() -> list[dict]:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.profiler import ProfilerActivity, profile

    from flashcheck.kernels import attention

    rows = []
    for d, n, causal in ((128, 16384, False), (128, 4096, True), (64, 16384, False), (128, 1024, False)):
        q, k, v = _inputs(d, n, grad=True)
        do = torch.randn_like(q)
        cz = "bottom_right" if causal else False
        out = {}
        for name in ("ours", "cudnn"):
            def fwd():
                if name == "ours":
                    return attention(q, k, v, causal=cz)
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
            o = fwd()
            grads = [torch.autograd.grad(o, (q, k, v), do, retain_graph=True) for _ in range(3)]
            det = all(torch.equal(a, b) for g in grads[1:] for a, b in zip(grads[0], g))
            for _ in range(3):
                torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(5):
                    torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
                torch.cuda.synchronize()
            kernels = {}
            for e in prof.key_averages():
                t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
                if t > 0 and e.count >= 5:
                    kernels[e.key[:80]] = t / 5 / 1e3  # ms per backward
            total = sum(kernels.values())
            out[name] = {"deterministic": det, "kernels_ms": kernels, "total_ms": total,
                         "tflops_bwd": _tflops(d, n, causal, total, 2.5)}
            print(f"d={d} N={n} causal={causal} {name}: deterministic={det} total {total:.3f} ms "
                  f"({out[name]['tflops_bwd']:.0f} TFLOP/s)", flush=True)
            for kname, ms in sorted(kernels.items(), key=lambda x: -x[1]):
                print(f"    {ms:8.3f} ms  {kname}", flush=True)
        rows.append({"d": d, "N": n, "causal": causal, **out})
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    import torch
    import triton

    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "bwd_split": bwd_split()}
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "bwd_split.json").write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

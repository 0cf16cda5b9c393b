"""Issue 11 measurement: accuracy and cost of the kernel's precision modes beside SDPA, on one GPU.

    PYTHONPATH=. python3 bench/accuracy_modes.py [--out DIR] [--base-kernels]

Accuracy: bf16, B = 2, H = 8, N = 2048, d = 128; inputs normal, outliers (N(0, 1) plus N(0, 100) on
0.1 % of the entries) and large logits (q, k ×8). Relative error ‖x − ref‖ / ‖ref‖ against float64
computed on the GPU from the same rounded inputs, for O, dQ, dK, dV of: ours with FA2's Δ from the
rounded O (delta_from="output"), ours default (Δ from O + O_res), ours accurate forward
(precision="accurate"), SDPA flash, cuDNN and math; plus the output-rounding floor
‖round(O_exact) − O_exact‖ / ‖O_exact‖.
Time: forward (no grad; and with grad, i.e. writing O_res), backward of each mode, do_bench median,
at the accuracy shape and at B = 2, H = 16, N = 8192, d = 128.
--ab: only the cost of the accurate backward, measured A/B interleaved (default and FA2-Δ backward
alternately, 7 rounds, median of the per-round ratios) at the bench shapes: the two backwards run the
same dK/dV and dQ kernels and differ only in the Δ preprocess, so single timings differ by noise.
--base-kernels: also time `kernels_base` (the kernel before the tile-helper refactor, imported
under another package name) beside ours, non-causal and causal, to check the refactor kept speed.
Prints Markdown tables and writes accuracy_modes.json to --out.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(1, _ROOT)

import torch  # noqa: E402
from triton.testing import do_bench as _do_bench  # noqa: E402

from flashcheck.kernels.attention import attention  # noqa: E402

CUDA = torch.cuda.is_available()
DEV = "cuda" if CUDA else "cpu"  # the CPU (TRITON_INTERPRET=1, fp16, tiny shapes) checks the code path only
SHAPE = (2, 8, 2048, 128) if CUDA else (1, 2, 32, 16)
TIME_SHAPES = ((2, 8, 2048, 128), (2, 16, 8192, 128), (1, 32, 16384, 64)) if CUDA else ((1, 2, 32, 16),)
DTYPE = torch.bfloat16 if CUDA else torch.float16
OURS = {  # name -> attention options
    "ours Δ from O (FA2)": dict(delta_from="output"),
    "ours default (Δ from O+O_res)": dict(),
    "ours accurate fwd": dict(precision="accurate"),
}


def _inputs(kind: str, shape, dtype=DTYPE, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    q, k, v, do = (torch.randn(shape, device=DEV, dtype=torch.float32, generator=g) for _ in range(4))
    if kind == "outliers":
        for x in (q, k, v):
            flat = x.view(-1)
            n = max(1, round(1e-3 * flat.numel()))
            idx = torch.randperm(flat.numel(), device=DEV, generator=g)[:n]
            flat[idx] += 10.0 * torch.randn(n, device=DEV, generator=g)
    elif kind == "large_logits":
        q, k = q * 8, k * 8
    elif kind != "normal":
        raise ValueError(kind)
    return tuple(t.to(dtype) for t in (q, k, v, do))


def _exact(q, k, v, do, scale):
    """float64 O, dQ, dK, dV of the rounded inputs (head by head to bound memory)."""
    q, k, v, do = (t.double() for t in (q, k, v, do))
    s = torch.einsum("bhid,bhjd->bhij", q, k) * scale
    p = torch.softmax(s, -1)
    o = p @ v
    dv = p.transpose(-1, -2) @ do
    dp = do @ v.transpose(-1, -2)
    delta = (do * o).sum(-1, keepdim=True)
    ds = p * (dp - delta)
    dq = ds @ k * scale
    dk = ds.transpose(-1, -2) @ q * scale
    return o, dq, dk, dv


def _sdpa(backend):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def fn(q, k, v):
        with sdpa_kernel(getattr(SDPBackend, backend)):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)
    return fn


def do_bench(fn, **kw):
    if CUDA:
        return _do_bench(fn, **kw)
    fn()
    return float("nan")


def _rel(x, ref):
    return float((x.double() - ref).norm() / ref.norm())


def accuracy():
    fns = {name: (lambda opts: lambda q, k, v: attention(q, k, v, **opts))(opts) for name, opts in OURS.items()}
    fns.update({"SDPA flash": _sdpa("FLASH_ATTENTION"), "cuDNN": _sdpa("CUDNN_ATTENTION"),
                "SDPA math": _sdpa("MATH")})
    rows = []
    for kind in ("normal", "outliers", "large_logits"):
        q, k, v, do = _inputs(kind, SHAPE)
        ref = _exact(q, k, v, do, 1 / math.sqrt(SHAPE[-1]))
        floor = _rel(ref[0].to(DTYPE), ref[0])
        rows.append({"inputs": kind, "impl": "output-rounding floor", "O": floor})
        for name, fn in fns.items():
            try:
                qq, kk, vv = (t.detach().clone().requires_grad_() for t in (q, k, v))
                o = fn(qq, kk, vv)
                grads = torch.autograd.grad(o, (qq, kk, vv), do)
                errs = [_rel(x, r) for x, r in zip((o,) + grads, ref)]
                rows.append({"inputs": kind, "impl": name, **dict(zip(("O", "dQ", "dK", "dV"), errs)),
                             "O/floor": errs[0] / floor})
            except Exception as exc:  # noqa: BLE001 - a peer that cannot run is listed, not fatal
                rows.append({"inputs": kind, "impl": name, "skipped": f"{type(exc).__name__}: {exc}"[:200]})
        del ref
        if CUDA:
            torch.cuda.empty_cache()
    return rows


def _time_modes(shape, causal=False, impls=None):
    q, k, v, do = _inputs("normal", shape)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    out = {}
    for name, fn in impls.items():
        def fwd():
            with torch.no_grad():
                fn(q, k, v)
        o = fn(q, k, v)  # with grad: writes O_res where the mode does
        t_fwd = do_bench(fwd, warmup=25, rep=100, return_mode="median")
        t_fwd_grad = do_bench(lambda: fn(q, k, v), warmup=25, rep=100, return_mode="median")
        t_bwd = do_bench(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True),
                         warmup=25, rep=100, return_mode="median")
        B, H, N, d = shape
        fl = 4.0 * B * H * N * N * d / (2 if causal else 1)
        out[name] = {"fwd_ms": t_fwd, "fwd_grad_ms": t_fwd_grad, "bwd_ms": t_bwd,
                     "fwd_tflops": fl / t_fwd * 1e-9, "bwd_tflops": 2.5 * fl / t_bwd * 1e-9}
        del o
    return out


def _base_attention():
    """The pre-refactor kernel (kernels_base/, a copy of kernels/ at the base commit with its
    package and op names changed), or None."""
    try:
        from kernels_base.attention import attention as base
    except ImportError as exc:
        print(f"kernels_base not importable: {exc}", file=sys.stderr)
        return None
    return base


def timing(with_base: bool):
    rows = []
    base = _base_attention() if with_base else None
    for shape in TIME_SHAPES:
        for causal in (False, True):
            impls = {name: (lambda opts: lambda q, k, v: attention(q, k, v, causal=causal, **opts))(opts)
                     for name, opts in OURS.items()}
            if base is not None:
                impls["base (pre-refactor)"] = lambda q, k, v: base(q, k, v, causal=causal)
            for name, r in _time_modes(shape, causal, impls).items():
                rows.append({"shape": list(shape), "causal": causal, "impl": name, **r})
            if CUDA:
                torch.cuda.empty_cache()
    return rows


def ab_backward(rounds=7):
    rows = []
    for shape in TIME_SHAPES[1:] or TIME_SHAPES:
        for causal in (False, True):
            q, k, v, do = _inputs("normal", shape)
            q, k, v = (t.requires_grad_() for t in (q, k, v))
            outs = {df: attention(q, k, v, causal=causal, delta_from=df) for df in ("output", "fp32")}
            fwds = {df: (lambda df: lambda: attention(q, k, v, causal=causal, delta_from=df))(df)
                    for df in ("output", "fp32")}
            t = {"output": [], "fp32": [], "fwd_output": [], "fwd_fp32": []}
            for _ in range(rounds):
                for df, o in outs.items():
                    t[df].append(do_bench(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True),
                                          warmup=10, rep=50, return_mode="median"))
                    t["fwd_" + df].append(do_bench(fwds[df], warmup=10, rep=50, return_mode="median"))
            med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
            ratio = med([a / b for a, b in zip(t["fp32"], t["output"])])
            fratio = med([a / b for a, b in zip(t["fwd_fp32"], t["fwd_output"])])
            rows.append({"shape": list(shape), "causal": causal, "bwd_ms_output": med(t["output"]),
                         "bwd_ms_fp32": med(t["fp32"]), "bwd_ratio_fp32_over_output": ratio,
                         "fwd_with_grad_ratio_fp32_over_output": fratio, "rounds": rounds})
            print(f"A/B {shape} causal={causal}: bwd Δ-from-O {med(t['output']):.4f} ms, Δ-from-O+O_res "
                  f"{med(t['fp32']):.4f} ms, ratio {ratio:.4f}; forward (grad enabled, writes O_res) ratio "
                  f"{fratio:.4f}", flush=True)
    return rows


def _fmt(x):
    return f"{x:.3g}" if isinstance(x, float) else str(x)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench-results")
    ap.add_argument("--base-kernels", action="store_true")
    ap.add_argument("--ab", action="store_true")
    a = ap.parse_args(argv)
    import triton
    header = {"device": torch.cuda.get_device_name() if CUDA else "cpu (interpreter)", "torch": torch.__version__,
              "triton": triton.__version__, "dtype": str(DTYPE), "accuracy shape (B, H, N, d)": SHAPE}
    print(header)
    if a.ab:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "backward_cost_ab.json").write_text(json.dumps({"header": header, "ab": ab_backward()}, indent=1))
        return
    acc = accuracy()
    print("\n| inputs | impl | O | O/floor | dQ | dK | dV |\n|---|---|---|---|---|---|---|")
    for r in acc:
        cells = ([f"skipped: {r['skipped'][:80]}"] if "skipped" in r else
                 [_fmt(r.get(c, "")) for c in ("O", "O/floor", "dQ", "dK", "dV")])
        print(f"| {r['inputs']} | {r['impl']} | " + " | ".join(cells) + " |")
    tim = timing(a.base_kernels)
    print("\n| shape | causal | impl | fwd ms | fwd (grad) ms | bwd ms | fwd TFLOP/s | bwd TFLOP/s |\n"
          "|---|---|---|---|---|---|---|---|")
    for r in tim:
        print(f"| {tuple(r['shape'])} | {r['causal']} | {r['impl']} | {r['fwd_ms']:.4f} | "
              f"{r['fwd_grad_ms']:.4f} | {r['bwd_ms']:.4f} | {r['fwd_tflops']:.1f} | {r['bwd_tflops']:.1f} |")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "accuracy_modes.json").write_text(json.dumps({"header": header, "accuracy": acc,
                                                         "timing": tim}, indent=1))


if __name__ == "__main__":
    main()

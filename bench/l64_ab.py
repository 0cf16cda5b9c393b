"""A/B of the forward's running sum l in fp64 (kernels/triton_fwd.py, `Arithmetic.l_accumulate`) against the
same kernel with l in fp32 (its source with the three fp64 lines put back as they were at main ef9d777, written to
a temporary module), in one process, interleaved: bf16, H = 2048 / d heads, B = 16384 / N, dense, forward only
(the backward reads LSE and does not touch l). Prints TFLOP/s per variant and rep, and the ratio l64 / l32
of the medians; writes l64_ab.json to --out.

    PYTHONPATH=. python3 bench/l64_ab.py --out $OUT
    TRITON_INTERPRET=1 PYTHONPATH=. python3 bench/l64_ab.py --dry-run   # the plumbing on the CPU (fp16, tiny)
"""
import argparse
import importlib
import importlib.util
import json
import os
import statistics
import sys
import tempfile

import torch

KERNEL = os.path.join(os.path.dirname(__file__), os.pardir, "kernels", "triton_fwd.py")
# the fp64 l of kernels/triton_fwd.py -> the fp32 l it replaced
TO_L32 = (("l_i = l_i * alpha.to(tl.float64) + tl.sum(p, 1).to(tl.float64)", "l_i = l_i * alpha + tl.sum(p, 1)"),
          ("l_i = tl.zeros([BLOCK_M], dtype=tl.float64)", "l_i = tl.zeros([BLOCK_M], dtype=tl.float32)"),
          ("l_safe = tl.where(empty, 1.0, l_i.to(tl.float32))", "l_safe = tl.where(empty, 1.0, l_i)"))


def load_old():
    src = open(KERNEL).read()
    for new, old in TO_L32:
        if src.count(new) != 1:
            raise SystemExit(f"kernels/triton_fwd.py no longer has exactly one {new!r}: update TO_L32")
        src = src.replace(new, old)
    path = os.path.join(tempfile.mkdtemp(), "triton_fwd_l32.py")  # Triton's JIT reads the source file
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location("triton_fwd_l32", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["triton_fwd_l32"] = mod
    spec.loader.exec_module(mod)
    return mod.attn_fwd_kernel


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    launcher = importlib.import_module("flashcheck.kernels.attention")
    from flashcheck.kernels import attention

    variants = {"l64": launcher.attn_fwd_kernel, "l32": load_old()}
    if a.dry_run:
        cells, dev, dt = [(16, 64, False), (16, 128, True)], "cpu", torch.float16
    else:
        cells = [(d, n, c) for d in (64, 128) for n in (1024, 16384) for c in (False, True)]
        dev, dt = "cuda", torch.bfloat16
    rows = []
    for d, n, causal in cells:
        H, B = (2, 1) if a.dry_run else (2048 // d, 16384 // n)
        q, k, v = (torch.randn(B, H, n, d, device=dev, dtype=dt) for _ in range(3))
        flops = 4 * B * H * n * n * d / (2 if causal else 1)
        res = {name: [] for name in variants}
        outs = {}
        for rep in range(1 if a.dry_run else a.reps):
            for name, kern in variants.items():
                launcher.attn_fwd_kernel = kern
                fn = lambda: attention(q, k, v, causal=causal)
                if a.dry_run:
                    outs[name] = attention(q, k, v, causal=causal, return_lse=True)
                    continue
                import triton.testing

                ms = triton.testing.do_bench(fn, warmup=50, rep=300)
                res[name].append(flops / ms / 1e9)
        launcher.attn_fwd_kernel = variants["l64"]
        if a.dry_run:
            (o1, l1), (o2, l2) = outs["l64"], outs["l32"]
            print(d, n, causal, "max |dO|", (o1 - o2).abs().max().item(), "max |dLSE|", (l1 - l2).abs().max().item())
            continue
        med = {k_: statistics.median(v_) for k_, v_ in res.items()}
        row = dict(d=d, n=n, causal=causal, tflops=res, ratio=med["l64"] / med["l32"])
        rows.append(row)
        print(f"d={d:3d} N={n:5d} causal={causal!s:5} l64 {med['l64']:6.1f} l32 {med['l32']:6.1f} "
              f"ratio {row['ratio']:.3f}  reps l64 {['%.0f' % x for x in res['l64']]} l32 {['%.0f' % x for x in res['l32']]}",
              flush=True)
    if a.out and rows:
        with open(os.path.join(a.out, "l64_ab.json"), "w") as f:
            json.dump(dict(torch=torch.__version__, device=torch.cuda.get_device_name(), rows=rows), f, indent=1)


if __name__ == "__main__":
    main()

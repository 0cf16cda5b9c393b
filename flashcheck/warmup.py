"""Compile a JIT kernel for every input the suite will give it, once, before the suite starts.

A Triton kernel compiles one specialization per combination of its constexprs and of its integer
arguments' divisibility (head dim, GQA group, causal/window/mask flags, N and strides mod 16): the ci
profile's ~300 calls of `ours` need ~160 forward and ~60 backward specializations. Under pytest-xdist
each worker compiled those it met itself, the first examples of every property at the same moment;
that was most of the 125 s `validate ours` took on the H100.

`flashcheck validate --warm-up` (the default for `ours` on CUDA) therefore runs in three steps:
1. a dry run of the suite with a float64 stand-in for the kernel (same name, capabilities, domain and
   precision model; exact, so every property holds and hypothesis draws the same inputs as for a
   correct kernel) that records each call's signature: shapes, dtype, flags, whether it needs a
   gradient (`StandIn`, plugin option --flashcheck-dry-run);
2. the distinct signatures called on the real kernel, split over one process per core, which fills
   Triton's on-disk cache (`python -m flashcheck.warmup`);
3. the suite itself, whose workers now load compiled kernels from that cache.
A kernel that fails draws different inputs after its first failure: those compile in step 3 as before.
Nothing is judged in steps 1 and 2; an exception there is ignored (step 3 meets it as a refusal).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Signature:
    """What a JIT specialization can depend on: shapes, dtype, flags (not the values)."""
    q: tuple
    k: tuple
    v: tuple
    dtype: str
    grad: bool
    causal: bool
    window: tuple | None
    mask: tuple | None  # the mask tensor's shape (broadcast dims of size 1 kept)
    scale: bool  # a scale was passed

    @classmethod
    def of(cls, q, k, v, *, causal=False, scale=None, window=None, mask=None) -> "Signature":
        return cls(q=tuple(q.shape), k=tuple(k.shape), v=tuple(v.shape), dtype=str(q.dtype).replace("torch.", ""),
                   grad=bool(q.requires_grad), causal=bool(causal),
                   window=None if window is None else tuple(window),
                   mask=None if mask is None else tuple(mask.shape), scale=scale is not None)

    @classmethod
    def from_dict(cls, data: dict) -> "Signature":
        data = dict(data)
        for name in ("q", "k", "v", "window", "mask"):
            if data[name] is not None:
                data[name] = tuple(data[name])
        return cls(**data)


class StandIn:
    """An exact float64 attention with the kernel's conventions (causal=True means its declared
    alignment), recording every call's `Signature` to `path` (one JSON line each)."""

    def __init__(self, alignment: str, path: str):
        self.alignment = alignment
        self.path = path

    def __call__(self, q, k, v, *, causal=False, scale=None, window=None, mask=None):
        import torch

        with open(self.path, "a") as f:
            f.write(json.dumps(Signature.of(q, k, v, causal=causal, scale=scale, window=window,
                                            mask=mask).__dict__) + "\n")
        B, Hq, Nq, d = q.shape
        Nk = k.shape[2]
        scale = 1.0 / math.sqrt(d) if scale is None else scale
        group = Hq // k.shape[1]
        q64, k64, v64 = q.double(), k.double().repeat_interleave(group, 1), v.double().repeat_interleave(group, 1)
        s = scale * (q64 @ k64.transpose(-1, -2))
        from flashcheck.reference.masks import visibility

        vis = torch.from_numpy(visibility(B, Hq, Nq, Nk, causal=self.alignment if causal else False,
                                          window=window,
                                          mask=None if mask is None else mask.cpu().numpy())).to(q.device)
        s = s.masked_fill(~vis, float("-inf"))
        lse = torch.logsumexp(s, -1)
        dead = torch.isinf(lse)[..., None]  # fully masked rows: O = 0, LSE = -inf
        p = torch.where(dead, torch.zeros_like(s), torch.softmax(s.masked_fill(dead, 0.0), -1))
        return (p @ v64).to(q.dtype), lse.float()


def stand_in_for(kernel, path: str):
    """`kernel` (a KernelUnderTest) with its function replaced by a recording `StandIn`."""
    from flashcheck.adapters import KernelUnderTest

    return KernelUnderTest(name=kernel.name, supports=kernel.supports,
                           fn=StandIn(kernel.domain.causal_alignment, path), layout="bhnd",
                           precision_fn=kernel.precision_fn, domain=kernel.domain)


def signatures(paths) -> list[Signature]:
    seen = {}
    for path in paths:
        if not os.path.exists(path):
            continue
        for line in open(path):
            sig = Signature.from_dict(json.loads(line))
            seen.setdefault(sig, None)
    return list(seen)


def distinct(kernel, sigs: list[Signature]) -> list[Signature]:
    """One signature per compiled code: all of them, or one per `kernel.compile_key` (Flex: per padded shape)."""
    if kernel.compile_key is None:
        return sigs
    keys = {}
    for sig in sigs:
        keys.setdefault(kernel.compile_key(sig), sig)
    return list(keys.values())


def call(kernel, sig: Signature, device: str):
    """The kernel on random inputs of `sig`'s shapes (and its backward when `sig.grad`)."""
    import torch

    dtype = getattr(torch, sig.dtype)
    q, k, v = (torch.randn(shape, device=device, dtype=dtype).requires_grad_(sig.grad) for shape in (sig.q, sig.k, sig.v))
    kw = {"causal": sig.causal, "window": sig.window}
    if sig.mask is not None:
        kw["mask"] = torch.rand(sig.mask, device=device) < 0.7
    if sig.scale:
        kw["scale"] = 1.0 / math.sqrt(sig.q[-1])
    o, _ = kernel(q, k, v, **kw)
    if sig.grad:
        torch.autograd.grad(o, (q, k, v), torch.randn_like(o), allow_unused=True)


def warm(target: str, device: str, path: str, part: int, parts: int, options: dict) -> int:
    """Call the real kernel on this part's share of the recorded signatures; the number called."""
    from flashcheck.adapters import resolve

    kernel = resolve(target, device=device, **options)
    mine = distinct(kernel, signatures([path]))[part::parts]
    for sig in mine:
        try:
            call(kernel, sig, device)
        except Exception:  # noqa: BLE001 - a refusal: the suite meets and reports it
            pass
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()
    return len(mine)


def run_parts(target: str, device: str, path: str, parts: int, options: dict, env: dict) -> None:
    """`warm` in `parts` processes at once (Triton compiles on the host: one process per core)."""
    cmd = [sys.executable, "-m", "flashcheck.warmup", target, "--device", device, "--signatures", path,
           "--parts", str(parts), "--options", json.dumps(options)]
    procs = [subprocess.Popen(cmd + ["--part", str(i)], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for i in range(parts)]
    for p in procs:
        p.wait()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m flashcheck.warmup",
                                description="compile a kernel for recorded call signatures (one share)")
    p.add_argument("target")
    p.add_argument("--device", required=True)
    p.add_argument("--signatures", required=True, help="JSON lines of Signature")
    p.add_argument("--part", type=int, default=0)
    p.add_argument("--parts", type=int, default=1)
    p.add_argument("--options", default="{}", help="resolve() keyword arguments as JSON")
    args = p.parse_args(argv)
    n = warm(args.target, args.device, args.signatures, args.part, args.parts, json.loads(args.options))
    print(f"warmed {n} signatures")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Whether the Gluon kernels compute what earlier versions of them computed, bit for bit: O, LSE and (through the
backward, which reads O's residual) dQ, dK, dV, on the call kinds a schedule change can break: ragged key and
query counts, N = 1, Nq != Nk under both causal alignments, windows (several partial tiles a block), GQA, d = 64 and
128, persistent, paired and one-block programs (attention._gluon_persistent, _gluon_paired), fp16 and bf16. A
schedule change (which tile's product is issued when, how a mask's predicate is formed) must not move a bit; an
arithmetic change is not this script's business.

    git show REV:kernels/gluon_fwd.py > /tmp/base_fwd.py; git show REV:kernels/gluon_bwd.py > /tmp/base_bwd.py
    FLASHCHECK_FORWARD_ENGINE=gluon PYTHONPATH=. python3 bench/gluon_bitwise.py --base-fwd /tmp/base_fwd.py \
        [--base-bwd /tmp/base_bwd.py]

Both versions run through the product's launcher (attention()), the base by swapping the kernels of
kernels/gluon_fwd.py (the forward) and kernels/gluon_bwd.py (the dK/dV and dQ kernels) for the given files' (the
launcher's binary cache cleared at each swap). Exit status 1 if any case differs.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(1, str(_ROOT))

# (B, Hq, Hkv, Nq, Nk, d, causal, window)
CASES = [
    (2, 4, 4, 256, 256, 128, False, None), (2, 4, 4, 1000, 1100, 128, False, None),
    (2, 4, 4, 1100, 1000, 128, "bottom_right", None), (2, 4, 4, 1000, 1100, 128, "top_left", None),
    (2, 4, 4, 1100, 1000, 64, "top_left", None), (2, 4, 4, 1000, 1100, 64, "bottom_right", None),
    (1, 4, 2, 777, 777, 128, True, None), (1, 2, 2, 1, 777, 128, False, None), (1, 2, 2, 777, 1, 64, "top_left", None),
    (1, 4, 4, 1500, 1500, 128, False, (200, 100)), (1, 4, 4, 1500, 1300, 64, False, (300, 0)),
    (1, 4, 4, 2000, 2000, 64, False, None), (1, 2, 2, 4200, 4100, 64, "bottom_right", None),
    (1, 2, 1, 4096, 4096, 128, True, None), (1, 4, 4, 3000, 3000, 128, False, (1000, 1000)),
]


def load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = m
    spec.loader.exec_module(m)
    return m


_KERNELS = {"fwd": ("gluon_fwd", ("attn_fwd_gluon_kernel", )),
            "bwd": ("gluon_bwd", ("attn_bwd_dkdv_gluon_kernel", "attn_bwd_dq_gluon_kernel")),
            "fused": ("gluon_bwd_fused", ("attn_bwd_fused_gluon_kernel", ))}


def swapper(base_fwd: str | None, base_bwd: str | None, base_fused: str | None = None):
    """use(version): the product's launcher runs the Gluon kernels of `version`, "base" (those of the files
    base_fwd / base_bwd / base_fused: earlier kernels/gluon_fwd.py / gluon_bwd.py / gluon_bwd_fused.py) or "kernel"
    (the modules' own), the launcher's binary cache cleared (its records are keyed per launch, not per kernel)."""
    ka = importlib.import_module("flashcheck.kernels.attention")  # the module (the package exports the function)
    swaps = {}  # (module, kernel name) -> {"base": kernel, "kernel": kernel}
    for part, path in (("fwd", base_fwd), ("bwd", base_bwd), ("fused", base_fused)):
        if path:
            stem, names = _KERNELS[part]
            mod, base = importlib.import_module(f"flashcheck.kernels.{stem}"), load(path, f"{stem}_base")
            swaps.update({(mod, n): {"base": getattr(base, n), "kernel": getattr(mod, n)} for n in names})
    if not swaps:
        raise SystemExit("give --base-fwd, --base-bwd and / or --base-fused")

    def use(version: str) -> None:
        for (mod, n), k in swaps.items():
            setattr(mod, n, k[version])
        ka._BINARIES.clear()
    return use


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--base-fwd", help="an earlier kernels/gluon_fwd.py")
    p.add_argument("--base-bwd", help="an earlier kernels/gluon_bwd.py")
    args = p.parse_args()
    import torch

    if os.environ.get("FLASHCHECK_FORWARD_ENGINE") != "gluon":
        raise SystemExit("set FLASHCHECK_FORWARD_ENGINE=gluon (every case through the Gluon kernels)")
    ka = importlib.import_module("flashcheck.kernels.attention")
    use = swapper(args.base_fwd, args.base_bwd)
    bad = 0
    for dtype in (torch.bfloat16, torch.float16):
        for B, Hq, Hkv, nq, nk, d, causal, window in CASES:
            g = torch.Generator(device="cuda").manual_seed(nq * 7 + nk)
            q = torch.randn(B, Hq, nq, d, device="cuda", dtype=dtype, generator=g)
            k, v = (torch.randn(B, Hkv, nk, d, device="cuda", dtype=dtype, generator=g) for _ in range(2))
            do = torch.randn(B, Hq, nq, d, device="cuda", dtype=dtype, generator=g)
            out = {}
            for version in ("base", "kernel"):
                use(version)
                x = [t.detach().clone().requires_grad_() for t in (q, k, v)]
                o, lse = ka.attention(*x, causal=causal, window=window, return_lse=True)
                o.backward(do)
                out[version] = [o, lse] + [t.grad for t in x]
            use("kernel")
            same = [torch.equal(a, b) for a, b in zip(out["base"], out["kernel"])]  # NaN: never the same
            diff = [float((a.float() - b.float()).abs().nan_to_num(float("inf")).max()) if not s else 0.0
                    for a, b, s in zip(out["base"], out["kernel"], same)]
            # the forward's programs, read off the launch record attention() made (attention._gluon_launch)
            fwd = dict(ka.launches(*(ka.Layout.of(x) for x in (q, k, v)), causal=causal, window=window,
                                   interpret=False, gluon=True)[0].constexprs)
            programs = ("persistent" if fwd.get("PERSISTENT") else "paired" if fwd.get("PAIRED")
                        else "wide" if fwd.get("BLOCK_M") == 192 else "one")
            ok = all(same)
            bad += not ok
            print(f"{'same' if ok else 'DIFFERS'} {str(dtype)[6:]:8s} B={B} Hq={Hq} Hkv={Hkv} Nq={nq:5d} Nk={nk:5d} "
                  f"d={d:3d} causal={causal!s:12s} window={window!s:12s} programs={programs:10s} "
                  + " ".join(f"{n}:{'=' if s else f'{x:.1e}'}" for n, s, x in
                             zip(("O", "LSE", "dQ", "dK", "dV"), same, diff)), flush=True)
    print(f"{bad} case(s) differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

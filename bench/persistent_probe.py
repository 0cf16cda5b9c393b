"""Where gluon_fwd's PERSISTENT build differs from one block a program (bench/NOTES.md "Session 2026-11-29i"): both
launched on the same inputs (O and LSE filled with NaN first: rows never written show as NaN), then each query block's
max |O − O_ref|, |LSE − LSE_ref| and |O_res − O_res_ref| (WRITE_RES), and for a differing block the reference block
its O is closest to (loop_pair_probe.block_report). One line a case with --quiet.

    PYTHONPATH=. python3 bench/persistent_probe.py --B 2 --H 8 --Hkv 4 --N 1024 --d 128 [--causal] [--programs 3]
        [--window L R] [--res] [--repeat 3] [--dtype float16] [--quiet]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(1, str(_ROOT))

from bench.fwd_variants import launch_args  # noqa: E402  (after the repo root is importable)
from bench.loop_pair_probe import block_report  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--B", type=int, default=2)
    p.add_argument("--H", type=int, default=8)
    p.add_argument("--Hkv", type=int, default=None)
    p.add_argument("--N", type=int, default=1024)
    p.add_argument("--Nk", type=int, default=None)
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--programs", type=int, default=None, help="PERSISTENT programs (default: the SM count)")
    p.add_argument("--res", action="store_true", help="WRITE_RES (O_res, as a backward's forward writes it)")
    p.add_argument("--repeat", type=int, default=1, help="launch the persistent build this many times (races)")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    p.add_argument("--window", type=int, nargs=2, default=None, help="a sliding window (left, right) instead")
    p.add_argument("--dump", type=Path, default=None, help="write the persistent launch's cubin here (FILE)")
    p.add_argument("--variant", type=Path, default=None,
                   help="run the persistent launch from this gluon_fwd source instead (e.g. the banded build's)")
    args = p.parse_args(argv)
    import importlib

    import torch

    ka = importlib.import_module("flashcheck.kernels.attention")
    from flashcheck.kernels import gluon_fwd

    nk = args.Nk or args.N
    hkv = args.Hkv or args.H
    g = torch.Generator(device="cuda").manual_seed(0)
    dt = getattr(torch, args.dtype)
    q = torch.randn(args.B, args.H, args.N, args.d, device="cuda", dtype=dt, generator=g)
    k, v = (torch.randn(args.B, hkv, nk, args.d, device="cuda", dtype=dt, generator=g) for _ in range(2))
    t = ka.kernel_config(args.d, dt, engine="gluon", band=bool(args.causal or args.window)).fwd
    band, off_lo, off_hi = ka._band("bottom_right" if args.causal else False,
                                    tuple(args.window) if args.window else None, args.N, nk)
    sms = args.programs  # (None: the launcher's own count, attention._sm_count)
    if args.variant:
        import tempfile

        from bench.fwd_variants import load_variant
        variant = load_variant("gluon_fwd", "probe", args.variant.read_text(), Path(tempfile.mkdtemp()))
    out = {}
    for persistent in (False, True):
        launch = ka._gluon_launch(ka.Layout.of(q), ka.Layout.of(k), band, off_lo, off_hi, args.res, t, False, False,
                                  persistent, sms)
        for r in range(args.repeat if persistent else 1):
            o = torch.full_like(q, float("nan"))
            res = torch.full_like(q, float("nan"))
            lse = torch.full((args.B, args.H, args.N), float("nan"), device="cuda", dtype=torch.float32)
            mod = variant if persistent and args.variant else gluon_fwd
            a, c = launch_args(mod, q, k, v, o, lse, launch, res if args.res else None)
            binary = mod.attn_fwd_gluon_kernel[launch.grid](*a, **c, num_warps=4)
            if persistent and args.dump and r == 0:
                args.dump.write_bytes(binary.asm["cubin"])  # before the sync that may fail
            torch.cuda.synchronize()
            out.setdefault(persistent, []).append((o, lse, res))
    o_ref, lse_ref, res_ref = out[False][0]
    bad = 0
    for r, (o, lse, res) in enumerate(out[True]):
        lines = block_report(o, lse, o_ref, lse_ref, t.block_m)
        differ = [x for x in lines if "differs" in x]
        dres = float((res.float() - res_ref.float()).abs().nan_to_num(float("inf")).max()) if args.res else 0.0
        head = (f"{args.dtype} B {args.B} H {args.H}/{hkv} N {args.N}/{nk} d {args.d} causal {args.causal} "
                f"window {args.window} res {args.res} programs {launch.grid[0]} launch {r}: "
                f"blocks {len(lines)} differ {len(differ)} max|dO_res| {dres:.3g}")
        print(head, flush=True)
        if not args.quiet:
            print("\n".join(differ[:12]))
        bad += bool(differ) or dres != 0
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

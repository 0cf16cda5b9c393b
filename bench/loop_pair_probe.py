"""Where the loop-around-the-block forward goes wrong on Triton 3.6 (bench/NOTES.md "Session 2026-11-29b" item 5,
"Session 2026-11-29g" Next 2): the persistent forward a short call wants needs a loop around a query block's whole
code (Q wait, tile loops, epilogue), and that variant (bench/results/h200-2026-11-29b/gluon_fwd_loop.py: f530f96's
gluon_fwd.py with its PAIRED pair run by `for j in range(1 + has_b)`) gave paired != unpaired and an illegal address.

This runs it PAIRED on the case that failed and compares, query block by query block, its O and LSE with the
product's Gluon forward run one block a program (LSE filled with NaN first: rows it never writes show as NaN):
which block's rows are wrong, and how (zeros, NaN, or another block's rows: each differing block names the
reference block its O is closest to). Session 2026-11-29h: wrong exactly when a block has no partial tile and the
loop runs twice (bench/NOTES.md there); --variant runs another source (its results folder's variants). Under
compute-sanitizer the illegal address gets its instruction:

    PYTHONPATH=. python3 bench/loop_pair_probe.py [--B 2 --H 4 --N 256 --d 128] [--variant SOURCE]
    PYTHONPATH=. compute-sanitizer --tool memcheck python3 bench/loop_pair_probe.py
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(1, str(_ROOT))

from bench.fwd_variants import launch_args, load_variant  # noqa: E402  (after the repo root is importable)

VARIANT = _ROOT / "bench" / "results" / "h200-2026-11-29b" / "gluon_fwd_loop.py"


def block_report(o, lse, o_ref, lse_ref, block_m: int) -> list[str]:
    """One line a (batch, head, query block): max |O − O_ref|, LSE's, rows of LSE never written (NaN), rows of O
    all zero where O_ref's are not."""
    import torch

    lines = []
    B, H, N, _ = o.shape
    for b in range(B):
        for h in range(H):
            for blk in range(-(-N // block_m)):
                r = slice(blk * block_m, min(N, (blk + 1) * block_m))
                do = (o[b, h, r].float() - o_ref[b, h, r].float()).abs().nan_to_num(float("inf")).max().item()
                dl = (lse[b, h, r] - lse_ref[b, h, r]).abs().nan_to_num(float("inf")).max().item()
                unwritten = int(torch.isnan(lse[b, h, r]).sum())
                zero_rows = int(((o[b, h, r] == 0).all(-1) & (o_ref[b, h, r] != 0).any(-1)).sum())
                line = (f"b={b} h={h} block={blk}: max|dO| {do:.3g} max|dLSE| {dl:.3g} "
                        f"LSE rows unwritten {unwritten} O rows zero {zero_rows}")
                if do != 0 or dl != 0:
                    # the reference's (batch, head, block) whose rows these are closest to: a block written with
                    # another block's rows, or another head's, shows here
                    gaps = {x: _block_gap(o, o_ref, (b, h, blk), x, block_m)
                            for x in ((bb, hh, kk) for bb in range(B) for hh in range(H)
                                      for kk in range(-(-N // block_m)))}
                    best = min(gaps, key=gaps.get)
                    line += f"   <-- differs; closest reference (b, h, block) {best}: max gap {gaps[best]:.3g}"
                lines.append(line)
    return lines


def _block_gap(o, o_ref, at, ref_at, block_m: int) -> float:
    """max |O[at] − O_ref[ref_at]| over the rows both blocks have (inf where NaN)."""
    (b, h, k), (bb, hh, kk) = at, ref_at
    n = o.shape[2]
    rows = min(n - k * block_m, n - kk * block_m, block_m)
    x = o[b, h, k * block_m:k * block_m + rows].float()
    y = o_ref[bb, hh, kk * block_m:kk * block_m + rows].float()
    return (x - y).abs().nan_to_num(float("inf")).max().item()


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--B", type=int, default=2)
    p.add_argument("--H", type=int, default=4)
    p.add_argument("--N", type=int, default=256)
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--variant", type=Path, default=VARIANT, help="the loop variant's source (default: 29b's)")
    args = p.parse_args(argv)
    import importlib

    import torch

    ka = importlib.import_module("flashcheck.kernels.attention")  # the module, not the function of that name
    m = load_variant("gluon_fwd", "loop", args.variant.read_text(), Path(tempfile.mkdtemp(prefix="loop_pair_")))
    from flashcheck.kernels import gluon_fwd

    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(args.B, args.H, args.N, args.d, device="cuda", dtype=torch.bfloat16, generator=g)
               for _ in range(3))
    causal = "bottom_right" if args.causal else False
    t = ka.kernel_config(args.d, torch.bfloat16, engine="gluon", band=bool(args.causal)).fwd
    band, off_lo, off_hi = ka._band(causal, None, args.N, args.N)
    out = {}
    for name, mod, paired in (("reference: the product's kernel, one block a program", gluon_fwd, False),
                              ("the loop variant, PAIRED", m, True)):
        launch = ka._gluon_launch(ka.Layout.of(q), ka.Layout.of(k), band, off_lo, off_hi, False, t, paired, False,
                                  False)
        o = torch.full_like(q, float("nan"))
        lse = torch.full((args.B, args.H, args.N), float("nan"), device="cuda", dtype=torch.float32)
        a, c = launch_args(mod, q, k, v, o, lse, launch)
        mod.attn_fwd_gluon_kernel[launch.grid](*a, **c, num_warps=4)
        torch.cuda.synchronize()  # an illegal address surfaces here, named by compute-sanitizer
        print(f"{name}: grid {launch.grid}, constexprs {c}", flush=True)
        out[paired] = (o, lse)
    lines = block_report(*out[True], *out[False], t.block_m)
    print("\n".join(lines))
    return 0 if not any("differs" in x for x in lines) else 1


if __name__ == "__main__":
    sys.exit(main())

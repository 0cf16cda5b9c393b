"""Where the fused d = 64 backward (bench/gluon/fused_bwd.py `fused_tma2`: dQ's products in the dK/dV kernel, added by
TMA in descending key-tile order) is ahead of the product's two Gluon kernels: unmasked calls at d = 64 by N_q and N_k
(issue 10; bench/NOTES.md). Timed side by side in one process, bf16, H = 32 heads, B = max(1, 16384 // max(N_q, N_k)).

    PYTHONPATH=$PWD python3 bench/fused_threshold.py --rounds 3 --out $OUT/threshold.json     # H100 / H200
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(1, str(_ROOT))

# (N_q, N_k): square calls around the measured 16k, and the two unequal ones a key-count threshold alone would admit
CELLS = [(8192, 8192), (16384, 16384), (32768, 32768), (2048, 16384), (16384, 2048), (512, 32768)]


def timed(rounds: int, cells=CELLS) -> list[dict]:
    import torch

    from bench.fwd_variants import timed_row
    from bench.gluon.fused_bwd import _VARIANT_ARGS, launchers

    rows = []
    d, H = 64, 32
    for nq, nk in cells:
        B = max(1, 16384 // max(nq, nk))
        g = torch.Generator(device="cuda").manual_seed(0)
        q, do = (torch.randn(B, H, nq, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
        k, v = (torch.randn(B, H, nk, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
        fused, product, _ = launchers(q, k, v, do)
        ref = tuple(x.clone() for x in product())
        fns = {"kernel": product, "fused_tma2": lambda: fused(**_VARIANT_ARGS["fused_tma2"])}
        diff = {"fused_tma2": max(float((a.float() - b.float()).abs().max()) for a, b in zip(fns["fused_tma2"](), ref))}

        def tflops(d_, n_, causal, ms, B=B, nq=nq, nk=nk):  # the backward counted as 2.5 forwards
            return 2.5 * 4 * B * H * nq * nk * d / (ms * 1e-3) / 1e12
        row = timed_row(d, nk, False, fns, rounds, diff, tflops, "dQ,dK,dV")
        row["Nq"] = nq
        rows.append(row)
        del q, k, v, do
        torch.cuda.empty_cache()
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    rows = timed(a.rounds)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""CPU emulation check of a forward tile width against the derived bound (no GPU needed).

    PYTHONPATH=. python3 bench/tile_emulation.py [--N 512] [--d 128]

flashcheck.proofs.emulation.fa2_forward (bf16 operands, the tensor-core k-steps, ascending key tiles) at
block_k = 64 and at the block_k that `flashcheck.kernels.attention.kernel_config` uses on the H100 for this
head dim, for the default and the accurate forward, on normal, large-logit (q, k ×8) and outlier
inputs; prints worst |err| / bound of O and LSE (both kinds, `flashcheck.proofs.bounds.forward_bound` with
the Precision `flashcheck.adapters.ours_precision` states) and the relative O error. Written when the
d = 128 forward moved to 128-wide key tiles and no GPU was lent to verify it (bench/NOTES.md).
"""
import argparse
import dataclasses
import sys
import time
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(1, _ROOT)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from flashcheck.adapters import ours_precision  # noqa: E402
from flashcheck.proofs.bounds import forward_bound  # noqa: E402
from flashcheck.proofs.emulation import fa2_forward, round_to  # noqa: E402
from flashcheck.reference import attention  # noqa: E402


def _inputs(kind, shape, rng):
    q, k, v = (rng.standard_normal(shape) for _ in range(3))
    if kind == "large_logits":
        q, k = q * 8, k * 8
    elif kind == "outliers":  # N(0, 100) added to 0.1 % of the entries
        for x in (q, k, v):
            idx = rng.choice(x.size, x.size // 1000, replace=False)
            x.flat[idx] += 10 * rng.standard_normal(idx.size)
    return tuple(round_to(x, "bfloat16") for x in (q, k, v))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--N", type=int, default=512)
    ap.add_argument("--d", type=int, default=128)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    for kind in ("normal", "large_logits", "outliers"):
        q, k, v = _inputs(kind, (1, 2, args.N, args.d), rng)
        ref_o, ref_lse = attention(q, k, v)
        for precision in ("default", "accurate"):
            pr = ours_precision(torch.bfloat16, head_dim=args.d, interpret=False, precision=precision)
            for bk in sorted({64, pr.block_k}):
                p = dataclasses.replace(pr, block_k=bk)
                t = time.time()
                o, lse = fa2_forward(q, k, v, dtype="bfloat16", dot="bf16", block_k=bk, p_split=p.p_split)
                rel = np.linalg.norm(o - ref_o) / np.linalg.norm(ref_o)
                for kd in ("probabilistic", "worst_case"):
                    b = forward_bound(q, k, v, precision=p, kind=kd)
                    print(f"{kind:12} {precision:8} block_k={bk:3} {kd:13} worst |err|/bound "
                          f"O {np.max(np.abs(o - ref_o) / b.o):.3f} LSE {np.max(np.abs(lse - ref_lse) / b.lse):.3f}"
                          f"  rel. error O {rel:.3e}  [{time.time() - t:.0f} s]", flush=True)


if __name__ == "__main__":
    main()

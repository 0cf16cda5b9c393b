"""sha256 over the arrays the bounds return, per precision set-up: a change that must leave the bounds bit for bit
unchanged (a refactor, or a new stated property that only some set-ups claim) prints the same lines.

    python bench/bounds_fingerprint.py > /tmp/before.txt   # on the parent commit
    python bench/bounds_fingerprint.py > /tmp/after.txt    # with the change; diff the two

Set-ups: fp16, bf16, tf32 (the H100's truncation), fp32 ieee with and without Precision.ieee_fma_chain, fp32 ieee
with Precision.exp_argument "fma" (the claim: expected to differ), bf16 with tile_order "any"; causal or not; both
kinds; shapes with a ragged tile (N_k % block_k != 0), one tile narrower than block_k, and whole tiles.
`--forward-only` skips backward_bound."""
from __future__ import annotations

import argparse
import hashlib

import numpy as np

SETUPS = {
    "fp16": dict(input="float16", dot="fp16"),
    "bf16": dict(input="bfloat16", dot="bf16"),
    "tf32": dict(input="float32", dot="tf32"),
    "fp32-ieee": dict(input="float32", dot="ieee"),
    "fp32-ieee-fma": dict(input="float32", dot="ieee", ieee_fma_chain=True),
    "fp32-ieee-fma-exparg": dict(input="float32", dot="ieee", ieee_fma_chain=True, exp_argument="fma"),
    "bf16-any": dict(input="bfloat16", dot="bf16", tile_order="any"),
}
SHAPES = ((8, 100, 64), (16, 40, 32), (4, 256, 64))  # (N_q, N_k, d): ragged, one narrow tile, whole tiles


def digest(arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(np.asarray(a, dtype=np.float64))
        h.update(str(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def main(argv=None):
    from flashcheck.proofs.bounds import Precision, backward_bound, forward_bound
    from flashcheck.proofs.emulation import round_to

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--forward-only", action="store_true")
    ap.add_argument("--setups", nargs="+", default=list(SETUPS))
    a = ap.parse_args(argv)
    for name in a.setups:
        kw = dict(SETUPS[name])
        dtype = kw["input"]
        pr = Precision(exp="libm", l_accumulate="float64", delta_from="fp32", **kw)
        for nq, nk, d in SHAPES:
            rng = np.random.default_rng(nq * 1000 + nk + d)
            q, k, v, do = (round_to(rng.standard_normal((1, 2, n, d)), dtype) for n in (nq, nk, nk, nq))
            for causal in (False, True):
                for kind in ("probabilistic", "worst_case"):
                    fb = forward_bound(q, k, v, precision=pr, kind=kind, causal=causal)
                    arrays = [fb.o, fb.lse]
                    if not a.forward_only:
                        bb = backward_bound(q, k, v, do, precision=pr, kind=kind, causal=causal)
                        arrays += [bb.dq, bb.dk, bb.dv]
                    print(f"{name:22s} {nq:3d} {nk:4d} {d:3d} causal={int(causal)} {kind:13s} {digest(arrays)}",
                          flush=True)


if __name__ == "__main__":
    main()

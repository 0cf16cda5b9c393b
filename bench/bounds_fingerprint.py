"""sha256 over the arrays the bounds return, per precision set-up: a change that must leave the bounds bit for bit
unchanged (a refactor, or a new stated property that only some set-ups claim) prints the same lines.

    python bench/bounds_fingerprint.py > /tmp/before.txt   # on the parent commit
    python bench/bounds_fingerprint.py > /tmp/after.txt    # with the change; diff the two

Set-ups: fp16, bf16, tf32 (the H100's truncation), fp32 ieee with and without Precision.ieee_fma_chain, fp32 ieee
with Precision.exp_argument "fma" (the claim: expected to differ), bf16 with tile_order "any"; causal or not; both
kinds; shapes with a ragged tile (N_k % block_k != 0), one tile narrower than block_k, and whole tiles.
`--forward-only` skips backward_bound.

`--extended` adds: fp32 ieee with Precision.rowsum_depth=6 (and with the FMA chains), a ragged N_q 70 x N_k 100
(block_k 64), GQA (Hq 4, Hkv 2), fp32 inputs rounded into bf16 operands, duplicated keys (the grouped random model)
and a bias + window + mask (FLAVOURS), and lse_gradient_bound (default and random dlse weights) on every set-up and
shape."""
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
EXTRA_SETUPS = {
    "fp32-ieee-depth6": dict(input="float32", dot="ieee", rowsum_depth=6),
    "fp32-ieee-fma-depth6": dict(input="float32", dot="ieee", ieee_fma_chain=True, rowsum_depth=6),
    "fp16-depth6": dict(input="float16", dot="fp16", rowsum_depth=6),
    "fp32-in-bf16": dict(input="float32", dot="bf16"),  # q, k, v rounded into the operands (Precision u_in)
}
SHAPES = ((8, 100, 64), (16, 40, 32), (4, 256, 64))  # (N_q, N_k, d): ragged, one narrow tile, whole tiles
EXTRA_SHAPES = ((70, 100, 32),)  # ragged in both (block_k 64)
HEADS = ((2, 2),)  # (Hq, Hkv)
EXTRA_HEADS = ((4, 2),)  # GQA
# data flavours (--extended, heads 2/2 only): "dup" every key row twice (the probabilistic kind's groups of identical
# keys), "bwm" a bias, a window (8, 4) and a random boolean mask
FLAVOURS = ("dup", "bwm")


def flavour(name, q, k, v, rng):
    """(k, v, keyword arguments) of a data flavour."""
    if name == "dup":
        n = k.shape[-2]
        idx = np.arange(n) // 2 * 2
        return k[..., idx, :], v, {}
    nq, nk = q.shape[-2], k.shape[-2]
    bias = np.round(rng.standard_normal((1, q.shape[1], nq, nk)), 3)
    mask = rng.random((nq, nk)) < 0.8
    return k, v, dict(bias=bias, window=(8, 4), mask=mask)


def digest(arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(np.asarray(a, dtype=np.float64))
        h.update(str(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def main(argv=None):
    from flashcheck.proofs.bounds import Precision, backward_bound, forward_bound, lse_gradient_bound
    from flashcheck.proofs.emulation import round_to

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--forward-only", action="store_true")
    ap.add_argument("--setups", nargs="+", default=None)
    ap.add_argument("--extended", action="store_true")
    a = ap.parse_args(argv)
    setups = {**SETUPS, **EXTRA_SETUPS}
    names = a.setups or (list(setups) if a.extended else list(SETUPS))
    shapes = SHAPES + EXTRA_SHAPES if a.extended else SHAPES
    heads = HEADS + EXTRA_HEADS if a.extended else HEADS
    for name in names:
        kw = dict(setups[name])
        dtype = kw["input"]
        pr = Precision(exp="libm", l_accumulate="float64", delta_from="fp32", **kw)
        for nq, nk, d in shapes:
            for hq, hkv in heads:
                # (2, 2): the seed and draw order of the lines before --extended existed (they print the same)
                rng = np.random.default_rng(nq * 1000 + nk + d + (0 if (hq, hkv) == (2, 2) else 7 * hq + hkv))
                q, k, v, do = (round_to(rng.standard_normal((1, h, n, d)), dtype)
                               for h, n in ((hq, nq), (hkv, nk), (hkv, nk), (hq, nq)))
                gqa = "" if (hq, hkv) == (2, 2) else f" gqa={hq}/{hkv}"
                w = round_to(rng.standard_normal((1, hq, nq)), "float32")
                flavours = ("",) + (FLAVOURS if a.extended and (hq, hkv) == (2, 2) else ())
                for fl in flavours:
                    kf, vf, extra = (k, v, {}) if not fl else flavour(fl, q, k, v, rng)
                    tag = gqa + (f" {fl}" if fl else "")
                    for causal in (False, True):
                        for kind in ("probabilistic", "worst_case"):
                            kw = dict(precision=pr, kind=kind, causal=causal, **extra)
                            fb = forward_bound(q, kf, vf, **kw)
                            arrays = [fb.o, fb.lse]
                            if not a.forward_only:
                                bb = backward_bound(q, kf, vf, do, **kw)
                                arrays += [bb.dq, bb.dk, bb.dv]
                            line = f"{name:22s} {nq:3d} {nk:4d} {d:3d} causal={int(causal)} {kind:13s}{tag}"
                            print(f"{line} {digest(arrays)}", flush=True)
                            if a.extended:
                                lg = [lse_gradient_bound(q, kf, **kw), lse_gradient_bound(q, kf, dlse=w, **kw)]
                                print(f"{line} lse_gradient {digest(lg)}", flush=True)


if __name__ == "__main__":
    main()

"""Is Triton's fp32 tl.dot(p, v, acc, input_precision="ieee") one fp32 FMA per key, continuing from acc? (issue 8)

    PYTHONPATH=. python3 bench/probe_fma_acc.py --device cuda          # on the GPU (seconds)
    TRITON_INTERPRET=1 PYTHONPATH=. python3 bench/probe_fma_acc.py     # CPU interpreter: tl.dot is a NumPy
        matmul there, so mismatches are expected; the script only reports them

The forward bound's fp32 "ieee" model of P.V (proofs/bounds/forward.py, Precision.accumulation "recursive",
k_step 1) and its evaluation on the data assume what our kernel's inner loop (kernels/triton_fwd.py `_fwd_pv`)
does is, per output (i, c) and key tile t in visiting order:

    acc <- fl32(acc * alpha_t)                                   (the rescale, one rounding)
    acc <- fl32(acc + p_ij v_jc)   for j over the tile's keys ascending   (one fma.rn.f32 per key)

i.e. the accumulator is the chain's starting value, not added after a separate sum of the tile. This probe
runs that loop (several tiles, alpha_t in (0, 1], positive p like exp2 outputs, V random or cancelling) and
compares every output bit for bit with the emulation (flashcheck.proofs.fma_chain.fma_step, exact, no double
rounding). On a mismatch it reports whether "acc + (tile's own chain from 0)" explains the outputs instead.
Exit code 0 iff all bit-exact; --out FILE writes the per-case JSON.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np


def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def probe(P, V, A, Init, Out, T: tl.constexpr, M: tl.constexpr, N: tl.constexpr, DV: tl.constexpr):
        """P (T, M, N), V (T, N, DV), A (T, M) alphas, Init (M, DV): acc = Init; per tile acc = acc * alpha,
        acc = tl.dot(p, v, acc) (as _fwd_pv)."""
        offs_m = tl.arange(0, M)
        offs_n = tl.arange(0, N)
        offs_c = tl.arange(0, DV)
        acc = tl.load(Init + offs_m[:, None] * DV + offs_c[None, :])
        for t in tl.static_range(T):
            alpha = tl.load(A + t * M + offs_m)
            acc = acc * alpha[:, None]
            p = tl.load(P + t * M * N + offs_m[:, None] * N + offs_n[None, :])
            v = tl.load(V + t * N * DV + offs_n[:, None] * DV + offs_c[None, :])
            acc = tl.dot(p, v, acc, input_precision="ieee")
        tl.store(Out + offs_m[:, None] * DV + offs_c[None, :], acc)

    return probe


def _f32(x):
    return np.asarray(x, dtype=np.float32).astype(np.float64)


def emulate(p, v, alpha, init, chain_from_acc: bool = True):
    """The loop above in exact fp32 arithmetic (float64 arrays of fp32 values). chain_from_acc False: the
    alternative acc + fl32-chain of the tile from 0 (one more rounding per tile)."""
    from flashcheck.proofs.fma_chain import fma_step

    acc = init.copy()
    T, M, N = p.shape
    for t in range(T):
        acc = _f32(acc * alpha[t][:, None])  # fp32 product of two fp32 values: float64 exact, one rounding
        run = acc if chain_from_acc else np.zeros_like(acc)
        for j in range(N):
            run = fma_step(run, p[t, :, j, None] * v[t, j, None, :])
        acc = run if chain_from_acc else fma_step(acc, run)
    return acc


def inputs(kind, T, M, N, DV, rng):
    p = _f32(np.exp2(-np.abs(rng.standard_normal((T, M, N))) * 3))
    if kind == "random":
        v = _f32(rng.standard_normal((T, N, DV)))
    elif kind == "cancel":  # large values that cancel within and across tiles, plus a small residue
        base = rng.standard_normal((T, N // 2, DV)) * 2.0**8
        v = _f32(np.concatenate([base, -base * (1 + 2.0**-12)], axis=1) + rng.standard_normal((T, N, DV)))
    else:  # constant V: every step rounds the same way unless the chain is as stated
        v = _f32(np.full((T, N, DV), 0.1))
    alpha = _f32(np.where(rng.random((T, M)) < 0.5, 1.0, np.exp2(-rng.random((T, M)) * 4)))
    init = _f32(rng.standard_normal((M, DV)))
    return p, v, alpha, init


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default=os.path.join(os.environ["OUT"], "probe_fma_acc.json") if os.environ.get("OUT") else None)
    a = ap.parse_args(argv)
    import torch

    probe = _kernel()
    rng = np.random.default_rng(0)
    cases, ok = [], True
    for (M, N, DV, warps) in ((64, 64, 64, 4), (64, 32, 64, 4), (32, 64, 128, 4), (64, 64, 128, 8), (128, 64, 64, 8)):
        for kind in ("random", "cancel", "constant"):
            T = 3
            p, v, alpha, init = inputs(kind, T, M, N, DV, rng)
            t = [torch.tensor(x, dtype=torch.float32, device=a.device).contiguous() for x in (p, v, alpha, init)]
            out = torch.empty((M, DV), dtype=torch.float32, device=a.device)
            probe[(1,)](*t, out, T=T, M=M, N=N, DV=DV, num_warps=warps)
            got = out.cpu().double().numpy()
            want = emulate(p, v, alpha, init)
            mism = int(np.sum(got != want))
            alt = int(np.sum(got != emulate(p, v, alpha, init, chain_from_acc=False)))
            ok &= mism == 0
            cases.append(dict(M=M, N=N, DV=DV, warps=warps, kind=kind, tiles=T, total=int(got.size),
                              mismatches=mism, mismatches_tile_chain_then_add=alt))
            print(f"M={M:3d} N={N:3d} DV={DV:3d} warps={warps} {kind:8s} mismatches {mism:5d} / {got.size}"
                  f"   (acc + tile chain from 0: {alt})")
    print("RESULT:", "BIT-EXACT" if ok else "MISMATCHES")
    if a.out:
        from bench.probe_fma_dot import write_report  # the same record as the dot probe's (versions, device)

        write_report(a.out, a.device, hypothesis="acc = fl32(acc*alpha); then one fma.rn.f32 per key, ascending, "
                     "continuing from acc", all_bit_exact=bool(ok), cases=cases)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

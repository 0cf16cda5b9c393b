"""The fp32 arithmetic of the TMA reduce-add (cp.reduce.async.bulk.tensor .add, the fused dQ's tile additions:
kernels/gluon_bwd_fused.py), measured: its rounding (to nearest even, or not) and whether it flushes subnormal
operands and results to zero, as PTX documents for red / atom .add.f32. The bound charges a flush (proofs/bounds.md
sec. 8b, precision._dq_tile_add_flush); this says whether it happens.

One 64 x 64 fp32 tile: dst (global, the accumulator) and src (shared, the partial) chosen per element, added once by
the TMA unit with the fused kernel's own descriptor and reduce-add, then compared with numpy's float32 addition
(round to nearest even) under four models: {round to nearest, truncation toward zero} x {no flush, operands and
result flushed}. Hand-picked pairs (ties, subnormal results, subnormal operands) first, the rest random pairs over
wide exponents, a quarter of them subnormal.

    PYTHONPATH=. python3 bench/probe_tma_add.py [--out DIR]     # on the H100 / H200 (sm_90)
"""
from __future__ import annotations

import argparse
import json
import os

import numpy as np
import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, tma

from flashcheck.kernels.gluon_bwd_fused import _tma_reduce_add, dq_acc_descriptor

ROWS = COLS = 64  # one box of the fused kernel's accumulator descriptor (one warpgroup's 64 rows, d = 64)
TINY = np.float32(2.0**-126)  # fp32's smallest normal


@gluon.jit
def _add_tile(src_ptr, acc_desc, ROWS: gl.constexpr, COLS: gl.constexpr):
    # src from global memory through registers into shared memory (the fused kernel stages its partial so), then ONE
    # TMA reduce-add into the accumulator's tile at (0, 0, 0), waited for until performed
    layout: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [4, 1], [1, 0])
    r = gl.arange(0, ROWS, layout=gl.SliceLayout(1, layout))
    c = gl.arange(0, COLS, layout=gl.SliceLayout(0, layout))
    x = gl.load(src_ptr + r[:, None] * COLS + c[None, :])
    stage = gl.allocate_shared_memory(gl.float32, [1, ROWS, COLS], acc_desc.layout)
    stage.reshape([ROWS, COLS]).store(x)
    fence_async_shared()
    _tma_reduce_add(acc_desc, [0, 0, 0], stage)
    tma.store_wait(0)


def _pairs(rng) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(dst, src, names of the hand-picked pairs): float32 arrays of ROWS * COLS."""
    s = np.float32
    picked = [
        ("0 + 2^-130 (subnormal operand, subnormal result)", 0.0, 2.0**-130),
        ("2^-130 + 0 (subnormal accumulator)", 2.0**-130, 0.0),
        ("1.5*2^-126 - 2^-126 (normal operands, subnormal result)", 1.5 * 2.0**-126, -(2.0**-126)),
        ("2^-126 + 2^-130 (subnormal operand, normal result)", 2.0**-126, 2.0**-130),
        ("1 + 2^-24 (a tie: even is 1)", 1.0, 2.0**-24),
        ("1 + 3*2^-25 (above the tie: nearest is 1 + 2^-23, truncation 1)", 1.0, 3 * 2.0**-25),
        ("(1 + 2^-23) + 2^-24 (a tie: even is 1 + 2^-22)", 1.0 + 2.0**-23, 2.0**-24),
        ("1 - 3*2^-26 (nearest 1 - 2^-24, truncation 1 - 2^-24)", 1.0, -3 * 2.0**-26),
        ("-1 - 3*2^-25 (nearest -(1 + 2^-23), truncation -1)", -1.0, -3 * 2.0**-25),
        ("2^-126 * (1 + 2^-23) - 2^-126 (result 2^-149)", 2.0**-126 * (1 + 2.0**-23), -(2.0**-126)),
    ]
    n = ROWS * COLS
    mag = rng.uniform(-30, 30, size=(2, n))
    sub = rng.random((2, n)) < 0.25
    mag[sub] = rng.uniform(-149, -126, size=sub.sum())
    x = (rng.choice([-1.0, 1.0], size=(2, n)) * rng.uniform(1, 2, size=(2, n)) * 2.0**mag).astype(s)
    dst, src = x[0].copy(), x[1].copy()
    for i, (_, a, b) in enumerate(picked):
        dst[i], src[i] = s(a), s(b)
    return dst, src, [p[0] for p in picked]


def _flush(x: np.ndarray) -> np.ndarray:
    return np.where(np.abs(x) < TINY, np.float32(0.0) * x, x).astype(np.float32)


def _truncate(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a + b rounded toward zero in float32: the float64 sum (exact where the exponents differ by <= 29; the random
    pairs' wider gaps make it a model of truncation only to within float64's rounding), rounded to nearest in
    float32, then stepped toward zero where that overshot."""
    exact = a.astype(np.float64) + b.astype(np.float64)
    rn = exact.astype(np.float32)
    over = np.abs(rn.astype(np.float64)) > np.abs(exact)
    return np.where(over, np.nextafter(rn, np.float32(0.0)), rn).astype(np.float32)


def models(dst: np.ndarray, src: np.ndarray) -> dict[str, np.ndarray]:
    with np.errstate(over="ignore"):
        return {"nearest": (dst + src).astype(np.float32),
                "nearest, ftz": _flush(_flush(dst) + _flush(src)),
                "truncation": _truncate(dst, src),
                "truncation, ftz": _flush(_truncate(_flush(dst), _flush(src)))}


def _run(seed: int, verbose: bool) -> dict:
    """One tile of pairs (seed) through the TMA reduce-add: {pairs, mismatches per model, picked: name -> result}."""
    dst, src, names = _pairs(np.random.default_rng(seed))
    acc = torch.from_numpy(dst.copy()).reshape(1, ROWS, COLS).cuda()
    src_t = torch.from_numpy(src).reshape(ROWS, COLS).cuda()
    _add_tile[(1,)](src_t, dq_acc_descriptor(acc), ROWS, COLS, num_warps=4)
    torch.cuda.synchronize()
    got = acc.cpu().numpy().reshape(-1)
    ms = models(dst, src)
    same = lambda x, y: (x.view(np.uint32) == y.view(np.uint32)) | (np.isnan(x) & np.isnan(y))  # noqa: E731
    if verbose:
        for i, name in enumerate(names):
            fits = [m for m, v in ms.items() if same(got[i:i + 1], v[i:i + 1])[0]]
            print(f"  {name}: {float(got[i]).hex()}  fits: {', '.join(fits) or 'none'}")
    run = {"seed": seed, "pairs": int(got.size), "mismatches": {},
           "picked": {name: float(got[i]).hex() for i, name in enumerate(names)}}
    for m, v in ms.items():
        miss = ~same(got, v)
        run["mismatches"][m] = int(miss.sum())
        j = int(np.argmax(miss))
        print(f"seed {seed}, {m}: {int(miss.sum())} of {got.size} differ"
              + (f" (first: {dst[j]!r} + {src[j]!r} -> {got[j]!r}, model {v[j]!r})" if miss.any() else ""))
    return run


def main(argv=None):
    import subprocess

    import triton

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="directory for tma_add.json (proofs/measurements/h100_tma_add.json)")
    ap.add_argument("--seeds", type=int, default=3, help="tiles of random pairs (seeds 0 ...)")
    a = ap.parse_args(argv)
    driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                            text=True).stdout.strip()
    report = {"device": torch.cuda.get_device_name(), "driver": driver, "torch": torch.__version__,
              "triton": triton.__version__, "models": list(models(np.zeros(1, np.float32), np.zeros(1, np.float32))),
              "runs": [_run(seed, seed == 0) for seed in range(a.seeds)]}
    print(f"{report['device']}, driver {driver}, torch {torch.__version__}, triton {triton.__version__}")
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "tma_add.json"), "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()

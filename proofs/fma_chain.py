"""Exact emulation of an fp32 FMA chain: what Triton's "ieee" fp32 tl.dot computes on CUDA cores (if the
lowering is one fma chain per output over K in ascending order from a zero accumulator; measured by
bench/probe_fma_dot.py, recorded in proofs/hardware.py `ieee_dot`).

    acc_0 = 0,  acc_{k+1} = fl32(acc_k + a_k b_k)   (one rounding per step: fma.rn.f32)

NumPy float64 throughout, exact: the product of two fp32 values (24-bit significands) is exact in float64
(48 bits, exponents far inside float64's range), acc_k + a_k b_k is formed as s + err with an exact two-sum
(Knuth), and s + err is rounded once into fp32 through round-to-odd: s is replaced by the float64 neighbour
with an odd last bit on err's side when err != 0 and s is even, which rounds to the same fp32 value as the
exact s + err (53 >= 24 + 2 bits: Boldo & Melquiond 2008). A plain float32(s) would round twice (the
exact sum to float64, then to fp32) and err on midpoints.

Subnormals: the emulation is IEEE gradual underflow; a flush-to-zero FMA would differ where an operand or a
result is below 2^-126. `fma_chain_dot(..., return_normal=True)` also returns, per output, whether every
operand of its chain is 0 or normal and every exact step value acc_k + a_k b_k is 0 or >= 2^-126 in
magnitude (then FTZ and gradual underflow give the same bits), and finite (no overflow).
"""
from __future__ import annotations

import numpy as np

F32_MIN_NORMAL = 2.0**-126
LOG2E = 1.4426950408889634  # log2(e) as kernels/tiles.py states it (a float64 literal, fp32 in the kernel)


def kernel_qk_scale2(scale: float) -> float:
    """The kernel's base-2 logit scale qk_scale2 = sm_scale * LOG2E (kernels/triton_fwd.py, triton_bwd.py): the
    fp32 argument sm_scale times the fp32 constant, rounded: fl32(fl32(scale) fl32(log2 e)) (measured by
    bench/probe_fma_dot.py)."""
    return float(np.float32(np.float32(scale) * np.float32(LOG2E)))


def round_fp32(s: np.ndarray, err: np.ndarray) -> np.ndarray:
    """fl32(s + err) rounded to nearest even, once, for float64 s, err with s = fl64(s + err) (two-sum output):
    round-to-odd onto float64, then float32."""
    s = np.asarray(s, dtype=np.float64)
    err = np.asarray(err, dtype=np.float64)
    even = (s.view(np.int64) & 1) == 0
    fix = (err != 0) & even & np.isfinite(s)
    if np.any(fix):
        s = np.where(fix, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    with np.errstate(over="ignore", invalid="ignore"):
        return s.astype(np.float32).astype(np.float64)


def fma_step(acc: np.ndarray, p: np.ndarray) -> np.ndarray:
    """fl32(acc + p), one rounding, for fp32-valued acc and an exact float64 product p."""
    with np.errstate(over="ignore", invalid="ignore"):
        s = acc + p
        bb = s - acc
        err = (acc - (s - bb)) + (p - bb)
    err = np.where(np.isfinite(s), err, 0.0)
    return round_fp32(s, err)


def _fp32_valued(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore"):
        if not np.array_equal(x.astype(np.float32).astype(np.float64), x, equal_nan=True):
            raise ValueError("fma_chain_dot: operands must be fp32 values")
    return x


def fma_chain_dot(a, b, order: str = "ascending", return_normal: bool = False, acc0=None):
    """a @ b (a (..., M, K), b (..., K, N), fp32 values as float64) as one fp32 FMA chain per output over K in
    `order` ("ascending": k = 0, 1, ..., K - 1; "descending"), from a zero accumulator or from acc0 (fp32 values,
    broadcast to the result: tl.dot(a, b, acc) continues the chain from acc). Returns the fp32 results as float64
    (and, with return_normal, the boolean mask of the module docstring; acc0's own values are not checked)."""
    a, b = _fp32_valued(a), _fp32_valued(b)
    K = a.shape[-1]
    if b.shape[-2] != K:
        raise ValueError(f"fma_chain_dot: inner dimensions {K} and {b.shape[-2]}")
    shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
    acc = np.zeros(shape) if acc0 is None else np.array(np.broadcast_to(_fp32_valued(acc0), shape))
    normal = np.ones(shape, dtype=bool)
    ks = range(K) if order == "ascending" else range(K - 1, -1, -1)
    for k in ks:
        ak, bk = a[..., :, k, None], b[..., None, k, :]
        p = ak * bk
        if return_normal:
            exact = acc + p  # only compared with 2^-126: its float64 rounding cannot move it across 2^-126
            for x in (ak, bk, exact):
                normal &= (x == 0) | (np.abs(x) >= F32_MIN_NORMAL)
        acc = fma_step(acc, p)
    if return_normal:
        return acc, normal & np.isfinite(acc)
    return acc

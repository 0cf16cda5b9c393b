"""Is Triton's fp32 tl.dot(input_precision="ieee") one ascending fp32 FMA chain per output? (issue 8)

    PYTHONPATH=. python3 bench/probe_fma_dot.py --device cuda          # on the GPU (seconds)
    TRITON_INTERPRET=1 PYTHONPATH=. python3 bench/probe_fma_dot.py     # CPU interpreter: tl.dot is a NumPy
        matmul there, so mismatches are expected; the script only reports them

Hypothesis (what proofs/bounds/logits.py may then use for our kernel, Precision.ieee_fma_chain): every
output of an fp32 "ieee" tl.dot is acc_0 = 0, acc_{k+1} = fma.rn.f32(a_k, b_k, acc_k) over k = 0..K-1 in
ascending order, so each logit the kernel computes is a known fp32 number, emulated exactly on the CPU by
flashcheck.proofs.fma_chain.fma_chain_dot (exact two-sum + round-to-odd: no double rounding).

Cases: our kernel's fp32 tile shapes (kernels/attention.py kernel_config: 64x32, 32x64, 32x32 with 8 warps
for d > 128; also 64x64, 128x64), K = the head dims 16, 64, 80 (padded to 128 with zeros as the kernel
loads it), 128, 256; the kernel's patterns:
  qk        tl.dot(q, kT)                            (forward _fwd_qk: K tile loaded transposed)
  qk_scale  tl.dot(q, kT) * qk_scale2,  qk_scale2 = sm_scale * LOG2E formed in the kernel (_fwd_shift,
            backward dQ kernel); qk_scale2 itself is stored and compared with fl32(fl32(sm_scale) fl32(log2 e))
  kq_bwd    tl.dot(k, tl.trans(q)) * qk_scale2       (backward dK/dV kernel, transposed logits)
  shift     tl.dot(q, kT) * qk_scale2 - rowmax(...)  (_fwd_shift: is the product rounded, or fused into the
            subtraction by fp contraction? Either form passes (the bounds charge that rounding either way); the
            form found is recorded per case as shift_form; on the H200 with Triton 3.6 it is "fused")
Inputs: random normal; "cancel" (pairs of large products that cancel up to a small residue, magnitudes over
2^+-8: the order of the chain decides the result); "ties" (short significands: exact midpoints, the
double-rounding trap); "wide" (exponents over 2^+-20).

Per case: mismatches / total against the ascending chain; on a mismatch a few examples and which other
orders (descending, pairwise tree, K split into 2/4/8/16 contiguous or interleaved chains summed in fp32,
one rounding of the exact sum, float32 BLAS matmul) reproduce the mismatching outputs (and all outputs).
Exit code 0 iff every case is bit-exact (and qk_scale2 is as stated). With --out FILE (default
$OUT/probe_fma_dot.json when $OUT is set): the per-case results, the versions and the fp32 instructions of the
compiled probe kernels' PTX (fma.rn.f32 or fma.rn.ftz.f32: flush-to-zero or not) as JSON; proofs/hardware.py
reads such a file from proofs/measurements/h100_fma_dot.json (HardwareConstants.ieee_dot).
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import re
import sys

import numpy as np
import torch
import triton
import triton.language as tl

from flashcheck.kernels.tiles import LOG2E
from flashcheck.proofs.fma_chain import fma_chain_dot, fma_step

LOG2E_F = float(getattr(LOG2E, "value", LOG2E))  # the constexpr's Python float
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
MODES = ("qk", "qk_scale", "kq_bwd", "shift")


@triton.jit
def _probe_kernel(Q, Kt, Out, Scale2, sm_scale, M: tl.constexpr, N: tl.constexpr, HEAD_D: tl.constexpr,
                  BLOCK_D: tl.constexpr, MODE: tl.constexpr):
    """One tile: Q (M, HEAD_D), K (N, HEAD_D) row-major fp32; head-dim columns past HEAD_D read as 0 (as
    kernels/tiles.py load_rows does). MODE 0 qk, 1 qk_scale, 2 kq_bwd (Out is (N, M)), 3 shift."""
    offs_m = tl.arange(0, M)
    offs_n = tl.arange(0, N)
    offs_d = tl.arange(0, BLOCK_D)
    dmask = offs_d < HEAD_D
    q = tl.load(Q + offs_m[:, None] * HEAD_D + offs_d[None, :], mask=dmask[None, :], other=0.0)
    qk_scale2 = sm_scale * LOG2E  # as kernels/triton_fwd.py and triton_bwd.py form it
    if MODE == 2:
        k = tl.load(Kt + offs_n[:, None] * HEAD_D + offs_d[None, :], mask=dmask[None, :], other=0.0)
        s2T = tl.dot(k, tl.trans(q), input_precision="ieee") * qk_scale2
        tl.store(Out + offs_n[:, None] * M + offs_m[None, :], s2T)
    else:
        kT = tl.load(Kt + offs_n[None, :] * HEAD_D + offs_d[:, None], mask=dmask[:, None], other=0.0)
        qk = tl.dot(q, kT, input_precision="ieee")
        if MODE == 1:
            qk = qk * qk_scale2
        if MODE == 3:
            s2 = qk * qk_scale2
            m2 = tl.max(s2, 1)
            qk = s2 - m2[:, None]
        tl.store(Out + offs_m[:, None] * N + offs_n[None, :], qk)
    tl.store(Scale2 + offs_m, tl.zeros([M], dtype=tl.float32) + qk_scale2)


# ---- inputs ------------------------------------------------------------------------------------------
def _f32(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float32).astype(np.float64)


def make_inputs(kind: str, M: int, N: int, K: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """(q (M, K), k (N, K)) fp32 values as float64."""
    if kind == "random":
        return _f32(rng.standard_normal((M, K))), _f32(rng.standard_normal((N, K)))
    if kind == "wide":
        e = lambda s: np.exp2(rng.integers(-20, 21, s))  # noqa: E731
        return _f32(rng.standard_normal((M, K)) * e((M, K))), _f32(rng.standard_normal((N, K)) * e((N, K)))
    if kind == "ties":  # 6-bit significands, exponents over 2^+-12: sums land on fp32 midpoints
        def short(s):
            sig = rng.integers(32, 64, s) / 32.0
            return sig * np.exp2(rng.integers(-12, 13, s)) * rng.choice([-1.0, 1.0], s)
        return _f32(short((M, K))), _f32(short((N, K)))
    if kind == "cancel":  # products in pairs (2j, 2j+1) that cancel up to a residue; large pairs early
        q = rng.standard_normal((M, K)) * np.exp2(rng.integers(-8, 9, (M, K)))
        k = rng.standard_normal((N, K))
        h = K // 2
        q[:, 1:2 * h:2] = q[:, 0:2 * h:2] * (1.0 + 2.0**-20 * rng.standard_normal((M, h)))
        k[:, 1:2 * h:2] = -k[:, 0:2 * h:2] * (1.0 + 2.0**-18 * rng.standard_normal((N, h)))
        return _f32(q), _f32(k)
    raise ValueError(kind)


# ---- candidate orders ----------------------------------------------------------------------------------
def _fl32(x):
    return np.asarray(x, dtype=np.float64).astype(np.float32).astype(np.float64)


def _add32(x, y):  # fp32 addition of fp32 values: one rounding of the exact sum (fma_step with p = y)
    return fma_step(x, y)


def _pairwise(a, b):
    P = a[:, None, :] * b.T[None, :, :]  # (M, N, K) exact products; each rounded into fp32 first (fmul)
    terms = [_fl32(P[..., k]) for k in range(P.shape[-1])]
    while len(terms) > 1:
        nxt = [_add32(terms[i], terms[i + 1]) for i in range(0, len(terms) - 1, 2)]
        if len(terms) % 2:
            nxt.append(terms[-1])
        terms = nxt
    return terms[0]


def _split(a, b, c: int, interleaved: bool):
    K = a.shape[-1]
    if K % c:
        return None
    idx = [np.arange(j, K, c) for j in range(c)] if interleaved else np.split(np.arange(K), c)
    parts = [fma_chain_dot(a[:, ix], b[ix, :]) for ix in idx]
    out = parts[0]
    for p in parts[1:]:
        out = _add32(out, p)
    return out


def _exact_once(a, b):
    P = a[:, None, :] * b.T[None, :, :]
    out = np.empty(P.shape[:2])
    for i in range(P.shape[0]):
        for j in range(P.shape[1]):
            out[i, j] = math.fsum(P[i, j])  # correctly rounded float64; then fp32 (double rounding is
    return _fl32(out)  # possible here, this candidate is only a diagnostic)


def candidates(a, b):
    """name -> a @ b (a (M, K), b (K, N)) computed in that order, fp32 values."""
    out = {"ascending": fma_chain_dot(a, b), "descending": fma_chain_dot(a, b, order="descending"),
           "pairwise": _pairwise(a, b), "exact_once": _exact_once(a, b),
           "blas_fp32": (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float64)}
    for c in (2, 4, 8, 16):
        for inter in (False, True):
            r = _split(a, b, c, inter)
            if r is not None:
                out[f"split{c}{'_interleaved' if inter else ''}"] = r
    return out


def _post(mode: str, x: np.ndarray, c2: float, fused: bool = False) -> np.ndarray:
    """The kernel's steps after the dot, on the dot's fp32 outputs x."""
    if mode == "qk":
        return x
    if mode == "kq_bwd":
        return _fl32(x * c2).T  # x * c2: exact in float64 (two fp32 values), then one rounding
    y = _fl32(x * c2)
    if mode == "qk_scale":
        return y
    m = y.max(1, keepdims=True)
    if fused:  # fma(x, c2, -m): one rounding of the exact x c2 - m
        return fma_step(np.broadcast_to(-m, x.shape), x * c2)
    return _add32(y, np.broadcast_to(-m, y.shape))


# ---- run ---------------------------------------------------------------------------------------------
def run_case(mode, M, N, K, warps, kind, rng, device, sm_scale, verbose=3):
    bd = max(16, triton.next_power_of_2(K))
    q, k = make_inputs(kind, M, N, K, rng)
    qt = torch.tensor(q, dtype=torch.float32, device=device).contiguous()
    kt = torch.tensor(k, dtype=torch.float32, device=device).contiguous()
    shape = (N, M) if mode == "kq_bwd" else (M, N)
    out = torch.empty(shape, dtype=torch.float32, device=device)
    sc2 = torch.empty((M,), dtype=torch.float32, device=device)
    compiled = _probe_kernel[(1,)](qt, kt, out, sc2, sm_scale, M=M, N=N, HEAD_D=K, BLOCK_D=bd,
                                   MODE=MODES.index(mode), num_warps=warps)
    got = out.cpu().double().numpy()
    c2_got = float(sc2[0].cpu())
    c2 = float(np.float32(np.float32(sm_scale) * np.float32(LOG2E_F)))  # the kernel's qk_scale2, stated
    # the chain over the padded head dim (zeros past K), as the kernel's operands are
    qp = np.zeros((M, bd))
    qp[:, :K] = q
    kp = np.zeros((N, bd))
    kp[:, :K] = k
    a, b = qp, kp.T
    asc = fma_chain_dot(a, b)
    # the chain judged with the qk_scale2 the kernel formed (its own check is separate, below)
    want = _post(mode, asc, c2_got)
    bad = got != want
    n_bad = int(bad.sum())
    label = f"{mode:9s} M={M:3d} N={N:3d} K={K:3d}(pad {bd:3d}) warps={warps} {kind:7s}"
    line = f"{label} mismatches {n_bad:5d} / {bad.size}"
    extra = []
    if c2_got != c2:
        extra.append(f"qk_scale2 {c2_got!r} != fl32(fl32(sm_scale) fl32(log2e)) {c2!r} "
                     f"(fl32(sm_scale log2e in float64) = {float(np.float32(sm_scale * LOG2E_F))!r})")
    shift_form = None
    if mode == "shift":
        # The exp argument x c - m: the product rounded, then the subtraction (two roundings), or the product
        # contracted into the subtraction, fma(x, c, -m) (one rounding). The bounds charge the product's rounding
        # either way (logits.py), so either form is the hypothesis; which one the compiler chose is recorded.
        fused = _post(mode, asc, c2_got, fused=True)
        nf = int((got != fused).sum())
        extra.append(f"separate roundings: {n_bad} mismatches; fused fma(x, c, -m): {nf} mismatches"
                     + (" -> the product is contracted into the subtraction" if nf == 0 else ""))
        shift_form = "separate" if n_bad == 0 else "fused" if nf == 0 else None
        n_sep, n_bad = n_bad, min(n_bad, nf)
        if n_bad == 0:
            bad = np.zeros_like(bad)
        line = f"{label} mismatches {n_bad:5d} / {bad.size} ({shift_form or 'neither'} form)"
    if n_bad and mode != "shift":
        cands = candidates(a, b)
        expl = []
        for name, r in cands.items():
            rr = _post(mode, r, c2_got)
            expl.append(f"{name}: {int((rr[bad] == got[bad]).sum())}/{n_bad} of the mismatches, "
                        f"{'ALL' if np.array_equal(rr, got) else int((rr != got).sum())} "
                        f"{'outputs' if np.array_equal(rr, got) else 'mismatches overall'}")
        extra.append("other orders: " + "; ".join(expl))
    if n_bad:
        ii = np.argwhere(bad)[:verbose]
        for i, j in ii:
            g, w = got[i, j], want[i, j]
            ulp = np.spacing(np.float32(w)).astype(np.float64) if w != 0 else 2.0**-149
            extra.append(f"  [{i},{j}] got {float(g)!r} ascending chain {float(w)!r} ({(g - w) / ulp:+.1f} ulp)")
    rec = dict(mode=mode, M=M, N=N, K=K, block_d=bd, num_warps=warps, inputs=kind, mismatches=n_bad,
               total=int(bad.size), qk_scale2=c2_got, qk_scale2_stated=c2, ptx_f32_ops=_ptx_ops(compiled))
    if mode == "shift":
        rec.update(shift_form=shift_form, mismatches_separate=n_sep, mismatches_fused=nf)
    return n_bad == 0, c2_got == c2, line, extra, rec


def _ptx_ops(compiled) -> list:
    """The distinct fp32 arithmetic instructions (fma/mul/add/sub ... .f32) in the kernel's PTX ([] without it)."""
    try:
        ptx = compiled.asm["ptx"]
    except Exception:
        return []
    return sorted(set(re.findall(r"\b(?:fma|mul|add|sub|neg|max)\.[a-z0-9.]*f32\b", ptx)))


def _versions(device: str) -> dict:
    info = {"torch": torch.__version__, "triton": triton.__version__, "numpy": np.__version__,
            "python": sys.version.split()[0], "interpreter": INTERPRET, "device_arg": device,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    if device == "cuda" and not INTERPRET and torch.cuda.is_available():
        info["device"] = torch.cuda.get_device_name()
        info["capability"] = list(torch.cuda.get_device_capability())
        info["cuda_runtime"] = torch.version.cuda
    else:
        info["device"] = "cpu (TRITON_INTERPRET=1: numpy, not a GPU)"
    return info


def write_report(path: str, device: str, **report) -> None:
    """The probe's record as JSON at `path`, with the versions and the device it ran on (`_versions`)."""
    with open(path, "w") as f:
        json.dump(dict(versions=_versions(device), **report), f, indent=1)
    print("wrote", path)


CONFIGS = [  # (M, N, warps): kernel_config's fp32 tiles and the shapes of the brief
    (64, 32, 4), (32, 64, 4), (32, 64, 8), (32, 32, 8), (64, 64, 4), (128, 64, 4), (128, 64, 8)]
HEAD_DIMS = (16, 64, 80, 128, 256)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu" if INTERPRET or not torch.cuda.is_available() else "cuda")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="fewer cases (the CPU interpreter is slow)")
    ap.add_argument("--out", default=os.path.join(os.environ["OUT"], "probe_fma_dot.json") if os.environ.get("OUT")
                    else None, help="write the results as JSON here")
    args = ap.parse_args(argv)
    if args.device == "cuda" and INTERPRET:
        print("TRITON_INTERPRET=1 with --device cuda: the interpreter runs on the CPU", file=sys.stderr)
    rng = np.random.default_rng(args.seed)
    print(f"triton {triton.__version__}, torch {torch.__version__}, device {args.device}"
          + (f" ({torch.cuda.get_device_name()})" if args.device == "cuda" and torch.cuda.is_available() else "")
          + (", TRITON_INTERPRET=1 (tl.dot is a NumPy matmul: mismatches expected)" if INTERPRET else ""))
    configs, dims = CONFIGS, HEAD_DIMS
    if args.quick:
        configs, dims = [(64, 32, 4), (32, 64, 4)], (16, 80)
    ok_all, n_cases, n_fail, n_c2, per_mode, records = True, 0, 0, 0, {}, []
    for M, N, warps in configs:
        for K in dims:
            if K > 128 and (M, N) != (32, 32):  # d > 128 only with the 32 x 32 tiles (kernel_config)
                continue
            for mode in MODES:
                kinds = ("random", "cancel", "ties", "wide") if mode in ("qk", "kq_bwd") else ("random", "cancel")
                for kind in kinds:
                    sm_scale = 1.0 / math.sqrt(K)
                    ok, c2_ok, line, extra, rec = run_case(mode, M, N, K, warps, kind, rng, args.device, sm_scale)
                    records.append(rec)
                    n_cases += 1
                    n_fail += not ok
                    n_c2 += not c2_ok
                    ok_all &= ok and c2_ok
                    per_mode[mode] = [per_mode.get(mode, [0, 0])[0] + ok, per_mode.get(mode, [0, 0])[1] + 1]
                    print(line, flush=True)
                    for e in extra:
                        print("    " + e, flush=True)
    print(f"\n{n_cases - n_fail} / {n_cases} cases bit-exact with the ascending fp32 FMA chain (judged with the "
          "kernel's own qk_scale2); per pattern: "
          + ", ".join(f"{m} {a}/{n}" for m, (a, n) in per_mode.items()))
    print(f"qk_scale2 = fl32(fl32(sm_scale) * fl32(log2 e)) in {n_cases - n_c2} / {n_cases} cases")
    ops = sorted({op for r in records for op in r["ptx_f32_ops"]})
    if ops:
        print("fp32 instructions in the probe kernels' PTX:", ", ".join(ops))
    print("RESULT:", "ALL BIT-EXACT" if ok_all else "MISMATCHES")
    if args.out:
        write_report(args.out, args.device, hypothesis="ascending fp32 FMA chain from 0 over the padded head dim; "
                     "qk_scale2 = fl32(fl32(sm_scale) * fl32(log2 e))", seed=args.seed, quick=args.quick,
                     all_bit_exact=n_fail == 0, qk_scale2_as_stated=n_c2 == 0, cases=records, ptx_f32_ops=ops)
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())

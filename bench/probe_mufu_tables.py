"""Is the GPU's ex2.approx (and lg2.approx) a table of its argument's fixed-point fraction? (issue 8: P~ known)

The fp32 bounds charge tl.math.exp2 its measured relative error (proofs/measurements/h100.json, 1.22 ulp) on every
key, so the P.V chain's roundings stay uncertain wherever P~'s interval holds a rounding boundary (bounds.md
sec. 6, "The FMA chain's roundings on the data"). If the special-function unit computes ex2(x) = 2^I g(k), with
x = I + k 2^-F (I an integer, 0 <= k < 2^F) after converting x to a fixed-point number with F fraction bits
(rounding `mode`: floor, nearest-even or toward zero), then ex2 is known bit for bit from a table of 2^F values.

This probe (GPU; on the CPU under TRITON_INTERPRET=1 it runs small ranges and measures NumPy):
  1. tabulates T[k] = tl.math.exp2(k 2^-24), k < 2^24 (every such argument is an fp32; T in [1, 2)),
  2. checks every hypothesis (F in {23, 24}) x (floor, nearest, toward zero): pred(x) = T[k 2^(24-F)] 2^I,
     flushed to 0 below 2^-126 (ftz), against tl.math.exp2 on EVERY fp32 x in [-150, 8] (the range
     proofs/hardware_probe.py measures), counting the mismatches per region,
  3. the same for lg2: lg2(2^e m) =? RN32(e + L[m]), L[m] = tl.math.log2(m), m in [1, 2) (2^23 values),
     on every positive normal fp32,
and writes --out DIR: mufu_tables.json (the counts, first mismatches, versions) and mufu_tables.npz (T and L as
int8 deltas in ulps from numpy's float64 exp2 / log2 rounded to fp32 on the host that ran the probe, with the
sha256 of the fp32 tables, so a loader can check its reconstruction bit for bit).

    PYTHONPATH=. python3 bench/probe_mufu_tables.py --out $OUT
    PYTHONPATH=. python3 bench/probe_mufu_tables.py --out $OUT \
        --lg2-model bench/results/h100-2026-11-26e/mufu/lg2_model_candidate.npz    # lg2's rule, every normal fp32
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time

import numpy as np
import torch
import triton
import triton.language as tl

from flashcheck.proofs.hardware_probe import _bits_range as bits_range
from flashcheck.proofs.hardware_probe import _f32_bits as f32_bits
from flashcheck.proofs.hardware_probe import _unary_eval

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
DEV = "cpu" if INTERPRET else "cuda"


@triton.jit
def _eval_values(x_ptr, y_ptr, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    valid = offs < n
    x = tl.load(x_ptr + offs, mask=valid, other=1.0)
    if OP == 0:
        y = tl.math.exp2(x)
    else:
        y = tl.math.log2(x)
    tl.store(y_ptr + offs, y, mask=valid)


def op_bits(op: int, a: int, n: int) -> torch.Tensor:
    """op on the fp32 values of bit patterns a .. a+n-1 (proofs/hardware_probe.py's kernel: 0 exp2, 1 log2)."""
    y = torch.empty(n, dtype=torch.float32, device=DEV)
    _unary_eval[(triton.cdiv(n, 1024),)](y, a, n, OP=op, BLOCK=1024)
    return y


def op_values(op: int, x: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    _eval_values[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), OP=op, BLOCK=1024)
    return y


def ulp_deltas(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """got - ref in units of the last place, as int8 (both fp32, same sign, same or adjacent binades)."""
    d = got.view(np.int32).astype(np.int64) - ref.view(np.int32).astype(np.int64)
    assert np.abs(d).max() < 127, "a table entry is more than 126 ulps off the float64 value"
    return d.astype(np.int8)


def tables(quick: bool):
    """T[k] = exp2(k 2^-24) (k < 2^24) and L[m] = log2(1 + m 2^-23) (m < 2^23) from the GPU, fp32."""
    nT, nL = (1 << 24, 1 << 23) if not quick else (1 << 12, 1 << 11)
    kT = torch.arange(nT, dtype=torch.float64, device=DEV) * 2.0**-24
    T = op_values(0, kT.float())
    N = op_values(0, -kT.float())  # the negative arguments take their own path (first probe: 2026-11-26e)
    kL = 1.0 + torch.arange(nL, dtype=torch.float64, device=DEV) * 2.0**-23
    L = op_values(1, kL.float())
    return T, N, L


def ftz(y: torch.Tensor) -> torch.Tensor:
    return torch.where(y.abs() < 2.0**-126, torch.zeros_like(y), y)


EX2_HYP = [(F, mode) for F in (23, 24) for mode in ("floor", "nearest", "zero", "signmag", "signmag_rn")]


def ex2_pred(x: torch.Tensor, T: torch.Tensor, N: torch.Tensor, F: int, mode: str) -> torch.Tensor:
    """floor / nearest / zero: x = I + k 2^-F (two's complement fixed point), ex2 = 2^I T[k].
    signmag (truncated) / signmag_rn (rounded): |x| = I + k 2^-F, ex2 = 2^I T[k] for x >= 0, 2^-I N[k] for x < 0
    (N[k] = ex2(-k 2^-24), T[k] = ex2(k 2^-24) as measured)."""
    if mode.startswith("signmag"):
        A = x.double().abs() * float(2**F)
        K = (torch.round(A) if mode == "signmag_rn" else torch.floor(A)).to(torch.int64)
        I = torch.div(K, 2**F, rounding_mode="floor")
        k = ((K - I * 2**F) * 2 ** (24 - F)).clamp(0, T.numel() - 1)
        neg = x < 0
        tab = torch.where(neg, N[k], T[k]).double()
        return ftz((tab * torch.exp2(torch.where(neg, -I, I).double())).float())
    X = x.double() * float(2**F)  # exact
    K = {"floor": torch.floor, "nearest": torch.round, "zero": torch.trunc}[mode](X).to(torch.int64)
    I = torch.div(K, 2**F, rounding_mode="floor")
    k = (K - I * 2**F) * 2 ** (24 - F)
    k = k.clamp(0, T.numel() - 1)  # quick mode: the table is short (then the counts measure nothing)
    return ftz((T[k].double() * torch.exp2(I.double())).float())


def lg2_pred(x: torch.Tensor, L: torch.Tensor, mode: str) -> torch.Tensor:
    b = x.view(torch.int32).to(torch.int64)
    e = (b >> 23) - 127
    m = (b & ((1 << 23) - 1)).clamp(0, L.numel() - 1)
    g = L[m].double()
    s = e.double() + g  # exact in float64 (|e| < 2^8, g fp32 in [0, 1))
    if mode == "rn":
        return s.float()
    # toward zero
    f = s.float().double()
    over = f.abs() > s.abs()
    return torch.where(over, torch.nextafter(s.float(), torch.zeros_like(s.float())), s.float())


def check(op: int, lo: float, hi: float, hyps, pred, chunk: int, quick: bool):
    a, b = sorted((f32_bits(lo), f32_bits(hi)))
    if quick:
        b = min(b, a + (1 << 16))
    out = {str(h): dict(mismatch=0, first=[], by_region={}) for h in hyps}
    points = 0
    for s in range(a, b + 1, chunk):
        n = min(chunk, b + 1 - s)
        x = bits_range(s, n)
        y = op_bits(op, s, n)
        points += n
        for h in hyps:
            p = pred(x, h)
            bad = (p != y) & ~(torch.isnan(p) & torch.isnan(y))
            c = int(bad.sum())
            if c:
                r = out[str(h)]
                r["mismatch"] += c
                if len(r["first"]) < 12:
                    idx = torch.nonzero(bad).flatten()[:12 - len(r["first"])]
                    r["first"] += [dict(x=float(x[i]), got=float(y[i]), pred=float(p[i])) for i in idx.tolist()]
                xb = x[bad].double()
                key = "x<-126" if op == 0 else "x<1"
                for name, sel in ((key, xb < (-126 if op == 0 else 1)),
                                  ("[-126,-1)" if op == 0 else "[1,2)", (xb >= -126) & (xb < -1) if op == 0 else (xb >= 1) & (xb < 2)),
                                  ("[-1,0)" if op == 0 else "x>=2", (xb >= -1) & (xb < 0) if op == 0 else xb >= 2),
                                  ("x>=0", xb >= 0) if op == 0 else ("-", xb != xb)):
                    r["by_region"][name] = r["by_region"].get(name, 0) + int(sel.sum())
    return points, out


def lg2_model_check(path: str, out: str, chunk: int, quick: bool) -> dict:
    """--lg2-model NPZ: is lg2(2^e (1 + m 2^-23)) = RN32(e + R[m]) below sqrt(2), RN32((e + 1) + R[m]) from sqrt(2)
    on (bench/lg2_rule.py, proofs/lg2_model.py), R[m] = lg2 of the reduced argument r_m in [sqrt(2)/2, sqrt(2))?
    Measures R on the GPU (2^23 values), compares it with the candidate table NPZ (its entries the offline data
    fixed, and those it filled by a fit), then checks the rule with the measured R and with the candidate R on EVERY
    positive normal fp32 (quick: a few windows). Writes lg2_model.json and lg2_table.npz (the measured R, as the
    candidate's layout: int8 steps from numpy's RN32(log2 r_m), threshold, sha256)."""
    n_m = 1 << 23
    with np.load(path) as z:
        T = int(z["threshold"])
        m = np.arange(n_m)
        r = np.where(m >= T, (1.0 + m * 2.0**-23) / 2, 1.0 + m * 2.0**-23)
        ref = np.log2(r).astype(np.float32)
        Rc = (ref.view(np.int32) + z["delta"].astype(np.int32)).view(np.float32)
        known = z["measured"].astype(bool)
        sha_c = str(z["sha256"])
    if hashlib.sha256(Rc.tobytes()).hexdigest() != sha_c:
        raise RuntimeError(f"{path}: the candidate table does not reconstruct to its sha256 (numpy's log2 differs?)")
    lo_b, hi_b = f32_bits(2.0**-126), f32_bits(3.4028234663852886e38)
    if quick:  # windows: the bottom binade, around 1, around sqrt(2), a large binade around 2^20 sqrt(2)
        wins = [(lo_b, 1 << 12), (f32_bits(1.0) - (1 << 12), 1 << 13), (f32_bits(1.4142135) - (1 << 12), 1 << 13),
                (f32_bits(2.0**20 * 1.4142135) - (1 << 12), 1 << 13)]
        need = np.unique(np.concatenate([np.arange(a, a + n) & (n_m - 1) for a, n in wins]))
    else:
        wins = [(s, min(chunk, hi_b + 1 - s)) for s in range(lo_b, hi_b + 1, chunk)]
        need = m
    Rg = np.full(n_m, np.nan, np.float32)
    Rg[need] = op_values(1, torch.from_numpy(r[need].astype(np.float32)).to(DEV)).cpu().numpy()
    tab = dict(entries=int(need.size),
               differ_known=int((Rg[need] != Rc[need])[known[need]].sum()),
               differ_filled=int((Rg[need] != Rc[need])[~known[need]].sum()), filled=int((~known[need]).sum()))
    Rg_t, Rc_t = torch.from_numpy(Rg).to(DEV), torch.from_numpy(Rc).to(DEV)
    res = {name: dict(mismatch=0, by_exponent={}, first=[]) for name in ("measured_R", "candidate_R")}
    points = 0
    for s, n in wins:
        x = bits_range(s, n)
        y = op_bits(1, s, n)
        points += n
        b = x.view(torch.int32).to(torch.int64)
        e = (b >> 23) - 127
        mm = b & (n_m - 1)
        a = (e + (mm >= T).to(torch.int64)).double()
        for name, R in (("measured_R", Rg_t), ("candidate_R", Rc_t)):
            p = (a + R[mm].double()).float()  # exact sum in float64 (or both roundings give a): one RN32
            bad = p.view(torch.int32) != y.view(torch.int32)
            c = int(bad.sum())
            if c:
                rr = res[name]
                rr["mismatch"] += c
                for ee, cc in zip(*[v.tolist() for v in torch.unique(e[bad], return_counts=True)]):
                    rr["by_exponent"][str(ee)] = rr["by_exponent"].get(str(ee), 0) + cc
                if len(rr["first"]) < 12:
                    idx = torch.nonzero(bad).flatten()[:12 - len(rr["first"])]
                    rr["first"] += [dict(x=float(x[i]), got=float(y[i]), pred=float(p[i])) for i in idx.tolist()]
    rep = dict(what="lg2 = RN32(e + R[m]) below sqrt(2), RN32((e+1) + R[m]) above (bench/lg2_rule.py)",
               candidate=path, threshold=T, points=points, table=tab, **res)
    if not quick:
        d = Rg.view(np.int32).astype(np.int64) - ref.view(np.int32)
        if np.abs(d).max() < 127:
            np.savez_compressed(os.path.join(out, "lg2_table.npz"), delta=d.astype(np.int8), measured=np.ones(n_m, bool),
                                threshold=np.int64(T), sha256=np.array(hashlib.sha256(Rg.tobytes()).hexdigest()))
        rep["table"]["sha256"] = hashlib.sha256(Rg.tobytes()).hexdigest()
    return rep


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true", help="short tables and ranges (a debugging run)")
    ap.add_argument("--chunk", type=int, default=1 << 26)
    ap.add_argument("--lg2-dump", type=int, nargs="*", default=[],
                    help="also store, for each binade e given, lg2((1 + m 2^-23) 2^e) for every m as int8 steps from "
                         "RN32(e + L[m]) (mufu_lg2_dump.npz: the data to find lg2's rule offline)")
    ap.add_argument("--lg2-model", metavar="NPZ", default=None,
                    help="only check lg2's rule (bench/lg2_rule.py) with the candidate table NPZ and with R measured "
                         "here, on every positive normal fp32 (lg2_model.json, lg2_table.npz)")
    a = ap.parse_args(argv)
    quick = a.quick or INTERPRET
    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    if a.lg2_model:
        rep = lg2_model_check(a.lg2_model, a.out, a.chunk, quick)
        rep.update(seconds=time.time() - t0, quick=quick, interpreter=INTERPRET,
                   versions=dict(torch=torch.__version__, triton=triton.__version__, numpy=np.__version__,
                                 device=torch.cuda.get_device_name() if DEV == "cuda" else "cpu (interpreter)"))
        with open(os.path.join(a.out, "lg2_model.json"), "w") as f:
            json.dump(rep, f, indent=1)
        print(json.dumps({k: rep[k] for k in ("points", "table", "measured_R", "candidate_R", "seconds")}, indent=1))
        return 0
    T, N, L = tables(quick)
    torch.cuda.synchronize() if DEV == "cuda" else None
    rep = dict(versions=dict(torch=torch.__version__, triton=triton.__version__, numpy=np.__version__,
                             device=torch.cuda.get_device_name() if DEV == "cuda" else "cpu (interpreter)"),
               quick=quick, interpreter=INTERPRET)
    ex2 = {}
    pts = 0
    for lo, hi in ((-150.0, -0.0), (0.0, 8.0)):  # the two signs' bit patterns apart (as hardware_probe.py)
        p, part = check(0, lo, hi, EX2_HYP, lambda x, h: ex2_pred(x, T, N, *h), a.chunk, quick)
        pts += p
        for h, r in part.items():
            acc = ex2.setdefault(h, dict(mismatch=0, first=[], by_region={}))
            acc["mismatch"] += r["mismatch"]
            acc["first"] = (acc["first"] + r["first"])[:12]
            for k2, c in r["by_region"].items():
                acc["by_region"][k2] = acc["by_region"].get(k2, 0) + c
    rep["ex2"] = dict(points=pts, range=[-150.0, 8.0], hypotheses=ex2, seconds=time.time() - t0)
    print("ex2", pts, {h: r["mismatch"] for h, r in ex2.items()}, flush=True)
    pts, lg2 = check(1, 2.0**-126, 3.4028234663852886e38, ["rn", "zero"], lambda x, h: lg2_pred(x, L, h),
                     a.chunk, quick)
    rep["lg2"] = dict(points=pts, hypotheses=lg2, seconds=time.time() - t0)
    print("lg2", pts, {h: r["mismatch"] for h, r in lg2.items()}, flush=True)
    if a.lg2_dump:
        dump = {}
        for e in a.lg2_dump:
            x = ((1.0 + torch.arange(L.numel(), dtype=torch.float64, device=DEV) * 2.0**-23) * 2.0**e).float()
            y = op_values(1, x)
            ref = lg2_pred(x, L, "rn")
            dump[f"e{e}".replace("-", "m")] = (y.view(torch.int32).long() - ref.view(torch.int32).long()).clamp(-127, 127).to(torch.int8).cpu().numpy()
        np.savez_compressed(os.path.join(a.out, "mufu_lg2_dump.npz"), **dump)
        rep["lg2_dump"] = {k: {int(v): int(c) for v, c in zip(*np.unique(d, return_counts=True))} for k, d in dump.items()}
    Tn, Nn, Ln = T.cpu().numpy(), N.cpu().numpy(), L.cpu().numpy()
    kT = np.arange(Tn.size, dtype=np.float64) * 2.0**-24
    dN = ulp_deltas(Nn, np.exp2(-kT).astype(np.float32))
    kL = 1.0 + np.arange(Ln.size, dtype=np.float64) * 2.0**-23
    dT = ulp_deltas(Tn, np.exp2(kT).astype(np.float32))
    dL = ulp_deltas(Ln, np.log2(kL).astype(np.float32)) if Ln.size else np.zeros(0, np.int8)
    np.savez_compressed(os.path.join(a.out, "mufu_tables.npz"), ex2_delta=dT, ex2_neg_delta=dN, lg2_delta=dL)
    rep["tables"] = dict(ex2=dict(n=int(Tn.size), sha256=hashlib.sha256(Tn.tobytes()).hexdigest(),
                                  delta_hist={int(v): int(c) for v, c in zip(*np.unique(dT, return_counts=True))}),
                         ex2_neg=dict(n=int(Nn.size), sha256=hashlib.sha256(Nn.tobytes()).hexdigest(),
                                      delta_hist={int(v): int(c) for v, c in zip(*np.unique(dN, return_counts=True))}),
                         lg2=dict(n=int(Ln.size), sha256=hashlib.sha256(Ln.tobytes()).hexdigest(),
                                  delta_hist={int(v): int(c) for v, c in zip(*np.unique(dL, return_counts=True))}))
    rep["seconds"] = time.time() - t0
    with open(os.path.join(a.out, "mufu_tables.json"), "w") as f:
        json.dump(rep, f, indent=1)
    print(json.dumps({k: rep[k] for k in ("tables", "seconds")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

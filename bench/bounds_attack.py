"""Attack proofs/bounds with the structured input families (issue 8): observed error vs both
bounds, elementwise, for O, LSE, dQ, dK, dV.

Sources: "emulation" (proofs/emulation.py, CPU), "kernel" (our Triton kernel: on CUDA, or on the CPU
through TRITON_INTERPRET=1). Each case writes one JSON line as soon as it is done (a kill at a time
limit still leaves every finished case), and the run ends with a markdown table.

    python bench/bounds_attack.py --source emulation --nk 512 2048 --out /tmp/attack.jsonl
    python bench/bounds_attack.py --source kernel --device cuda --nk 512 4096 16384 65536 --out $OUT/a.jsonl

The exact values are the float64 references (flashcheck.reference.attention, flashcheck.reference.backward.attention_backward
from the exact O and LSE: O(Nq Nk d), so Nk = 65536 stays cheap at Nq = 64); their own error (~1e-16
relative) is far below every bound checked here.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np

PRECISIONS = (("float32", "ieee"), ("float32", "tf32"), ("float16", "fp16"), ("bfloat16", "bf16"))
QUANTITIES = ("O", "LSE", "dQ", "dK", "dV")
KINDS = ("worst_case", "probabilistic")


@dataclass(frozen=True)
class Ratio:
    """bound / observed over the entries with a nonzero error: its minimum (must be >= 1), median,
    the number of entries over the bound and the entries compared."""

    quantity: str
    kind: str
    min: float
    median: float
    over: int
    compared: int
    max_err: float


@dataclass(frozen=True)
class Case:
    source: str
    dtype: str
    dot: str
    family: str
    nk: int
    nq: int
    h: int
    d: int
    seed: int
    seconds: float
    ratios: tuple
    causal: str = "none"  # the masking (CAUSALS): "none", "top_left", "bottom_right"


# --causal: the kernel's causal argument for each spelling
CAUSALS = {"none": False, "top_left": True, "bottom_right": "bottom_right"}


def ratio(quantity: str, kind: str, err, bound) -> Ratio:
    err = np.asarray(err, dtype=np.float64).ravel()
    bound = np.asarray(bound, dtype=np.float64).ravel()
    nan = np.isnan(err)  # NaN is never agreement: counted as over the bound
    hit = nan | (err > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(nan[hit], 0.0, bound[hit] / np.where(nan[hit], 1.0, err[hit]))
    return Ratio(quantity, kind, float(r.min()) if r.size else math.inf,
                 float(np.median(r)) if r.size else math.inf, int((r < 1.0).sum()), int(r.size),
                 float(np.max(np.where(nan, np.inf, err))) if err.size else 0.0)


def inputs(family: str, dtype: str, nq: int, nk: int, h: int, d: int, seed: int):
    from flashcheck.structured import structured_inputs
    from flashcheck.proofs.emulation import round_to

    rng = np.random.default_rng(seed)
    if family == "random":
        xs = [rng.standard_normal(s) for s in ((1, h, nq, d), (1, h, nk, d), (1, h, nk, d), (1, h, nq, d))]
    else:
        x = structured_inputs(family, 1, h, h, nq, nk, d, rng)
        xs = [x.q, x.k, x.v, x.do]
    return [round_to(a, dtype) for a in xs]  # reference and bounds see exactly what the kernel saw


def delta_claim(dtype: str, dot: str, head_dim: int) -> dict:
    """Precision.delta_depth and delta_trees as the installed Triton's compiled-code record states them for our
    preprocess kernel at this head dim (flashcheck.adapters, "delta" for delta_from "fp32"), {} without a record: the
    emulation then computes the first (the dense, aligned call's: fa2_backward(delta_tree=...))."""
    from flashcheck.adapters import _compiled_record, _delta_claim

    return _delta_claim(_compiled_record(dtype, dot, head_dim, "default", None), "fp32")


def run_source(source: str, device: str, dtype: str, dot: str, q, k, v, do, mma=None, causal=False, mask=None,
               window=None, block_mask=None, fused_dq: bool = False):
    """(o, lse, dq, dk, dv) as float64 arrays, and the Precision the bounds use for this source.
    mma="h100": the emulation's forward tensor-core dots through the H100's measured truncating steps.
    causal, window, mask (a bool array broadcastable to (B, Hq, Nq, Nk), True = attend): as the kernel's attention();
    block_mask (a flashcheck.kernels BlockSparseMask, in place of them): its lists and tiles (the bounds then read its
    masking as causal=block_mask.causal, window=block_mask.window, mask=block_mask.dense). fused_dq (the kernel, head
    dim 64, fp16 / bf16): tiles that run the fused backward (kernels/gluon_bwd_fused.py) on every unbanded call, and
    the Precision they state (FusedDq from one query and key on)."""
    if source == "emulation":
        from flashcheck.proofs.bounds import Precision
        from flashcheck.proofs.emulation import fa2_backward, fa2_forward

        # as our kernel: l in fp64 (Arithmetic.l_accumulate), Delta from the fp32 O (delta_from="fp32")
        # fp32 ieee: the logits as the ascending fp32 FMA chains our kernel computes on the GPU (Precision.ieee_fma_chain,
        # bench/probe_fma_dot.py), unless FLASHCHECK_IEEE_MATMUL=1 (a torch fp32 matmul, the claim off)
        fma = (dtype, dot) == ("float32", "ieee") and os.environ.get("FLASHCHECK_IEEE_MATMUL", "0") in ("", "0")
        # the tile's rowsum a pairwise tree (the compiled kernel's shape, depth log2 64 = 6: Precision.rowsum_depth)
        # with the chains, the emulation computes the exponent arguments in our kernel's compiled forms (fused on full
        # tiles, product then subtraction on the masked tile): claimed (Precision.exp_argument "fma") unless
        # FLASHCHECK_EXP_ARGUMENT=unknown (the same arithmetic, the argument's roundings charged worst case)
        exp_argument = os.environ.get("FLASHCHECK_EXP_ARGUMENT", "fma") if fma else "unknown"
        # with the arguments known, the forward's ex2 through the H100's measured table (Precision.ex2_known) unless
        # FLASHCHECK_EX2=torch (torch.exp2, the values' errors charged)
        ex2_known = exp_argument == "fma" and os.environ.get("FLASHCHECK_EX2", "h100") == "h100"
        # and lg2 through the H100's measured rule (Precision.lg2_known) unless FLASHCHECK_LG2=torch
        lg2_known = ex2_known and os.environ.get("FLASHCHECK_LG2", "h100") == "h100"
        # and the backward's P~ in our kernel's compiled form through the table (Precision.bwd_p_known) unless
        # FLASHCHECK_BWD_EX2=torch (torch.exp2 of two roundings, P's error charged)
        bwd_p = ex2_known and os.environ.get("FLASHCHECK_BWD_EX2", "h100") == "h100"
        # Delta's fp32 dot in the preprocess kernel's tree read off this Triton's PTX for this head dim (Precision.
        # delta_depth, delta_trees: our tensors are dense and aligned, the first tree) unless FLASHCHECK_DELTA=torch
        # (torch's sum, the dot's roundings modelled)
        delta = delta_claim(dtype, dot, q.shape[-1]) if os.environ.get("FLASHCHECK_DELTA", "tree") == "tree" else {}
        # the backward kernels' outer blocks (64 rows, 64 keys: each walks its own tiles, partial ones first), stated:
        # the chains of heads with masked entries follow them (Precision.block_q_dq, block_k_dkdv); a block mask's
        # tiles are every kernel's, its lists decide the partial tiles (tile_lists "lists")
        bq, bk = (64, 64) if block_mask is None else (block_mask.block_q, block_mask.block_k)
        tiles = {} if block_mask is None else dict(block_k=bk, block_q=bq, block_k_dq=bk, tile_lists="lists")
        pr = Precision(dtype, dot, exp="libm", l_accumulate="float64", delta_from="fp32", ieee_fma_chain=fma,
                       exp_argument=exp_argument, rowsum_depth=6, ex2_known=ex2_known, lg2_known=lg2_known,
                       bwd_p_known=bwd_p, block_q_dq=bq, block_k_dkdv=bk, block_q_fwd=bq, **tiles, **delta)
        # the forward's query blocks too (bq rows, fa2_forward(block_q=) below): its chains on heads with masked entries
        # follow each block's order (Precision.block_q_fwd)
        # the emulation's tiles are those the precision states: the forward's keys, the dQ loop's keys, dK/dV's queries
        masks = {"causal": causal, "window": window, "mask": mask, "block_mask": block_mask}
        o, lse, o32 = fa2_forward(q, k, v, dtype=dtype, dot=dot, mma=mma, l_accumulate="float64",
                                  return_fp32_o=True, ieee_fma_chain=fma, rowsum="tree", block_k=pr.block_k,
                                  ex2="h100" if ex2_known else "torch", lg2="h100" if lg2_known else "torch",
                                  block_q=bq, **masks)
        g = fa2_backward(q, k, v, o, lse, do, dtype=dtype, dot=dot, delta_o=o32, ieee_fma_chain=fma,
                         block_k_dq=pr.dq_key_tile, block_q=pr.block_q, ex2="h100" if bwd_p else "torch",
                         block_q_dq=pr.block_q_dq, block_k_dkdv=pr.block_k_dkdv,
                         delta_tree=pr.delta_trees[0] if pr.delta_trees else None, **masks)
        return (o, lse, *g), pr
    import torch

    from flashcheck.adapters import ours_precision
    from flashcheck.kernels.attention import attention

    tdt = getattr(torch, dtype)
    dp = dot if dtype == "float32" else None
    t = [torch.as_tensor(a).to(device=device, dtype=tdt).requires_grad_(i < 3) for i, a in enumerate((q, k, v, do))]
    tm = block_mask if block_mask is not None else (
        None if mask is None else torch.as_tensor(np.asarray(mask, dtype=bool), device=device))
    tiles = None
    if fused_dq:
        from flashcheck.kernels.attention import KernelConfig, TileConfig, kernel_config

        g = kernel_config(q.shape[-1], tdt, interpret=False, engine="gluon")
        tiles = KernelConfig(g.fwd, g.dkdv, TileConfig(128, 128, 8, 2, gluon=True, fused=True))
    o, lse = attention(t[0], t[1], t[2], return_lse=True, dot_precision=dp, causal=causal, window=window,
                        mask=tm, tiles=tiles)
    o.backward(t[3])
    out = [x.detach().double().cpu().numpy() for x in (o, lse, t[0].grad, t[1].grad, t[2].grad)]
    pr = ours_precision(tdt, dp, head_dim=q.shape[-1], interpret=device == "cpu", block_mask=block_mask, tiles=tiles)
    if fused_dq and pr.fused_dq is None:
        raise ValueError(f"--fused-dq: tiles {tiles} do not run the fused backward at d = {q.shape[-1]}, {dtype}")
    return out, pr


def judge(source, dtype, dot, family, nk, nq, h, d, seed, xs, got, precision, seconds, forward_only=False,
          causal: str = "none") -> Case:
    """The float64 references, both bounds and the ratios for one case (no GPU: runs in a worker);
    forward_only: O and LSE alone (the backward bound costs ~10x the forward's at long N_k); causal: CAUSALS."""
    from flashcheck.proofs.bounds import backward_bound, forward_bound
    from flashcheck.reference.attention import attention
    from flashcheck.reference.backward import attention_backward

    t0 = time.time()
    q, k, v, do = xs
    c = CAUSALS[causal]
    O, L = attention(q, k, v, causal=c)
    exact = (O, L) if forward_only else (O, L, *attention_backward(q, k, v, O, L, do, causal=c))
    errs = [np.abs(g - e) for g, e in zip(got, exact)]
    out = []
    for kind in KINDS:
        fb = forward_bound(q, k, v, precision=precision, kind=kind, causal=c)
        bounds = (fb.o, fb.lse)
        if not forward_only:
            bb = backward_bound(q, k, v, do, precision=precision, kind=kind, causal=c)
            bounds += (bb.dq, bb.dk, bb.dv)
        for name, err, b in zip(QUANTITIES, errs, bounds):
            out.append(ratio(name, kind, err, b))
    return Case(source, dtype, dot, family, nk, nq, h, d, seed, seconds + time.time() - t0, tuple(out), causal)


def produce(source, device, dtype, dot, family, nk, nq, h, d, seed, mma=None, causal: str = "none",
            fused_dq: bool = False):
    """Arguments of `judge` for one case: the inputs and what the source computed from them."""
    t0 = time.time()
    xs = inputs(family, dtype, nq, nk, h, d, seed)
    got, precision = run_source(source, device, dtype, dot, *xs, mma=mma, causal=CAUSALS[causal], fused_dq=fused_dq)
    label = source + ("-fused" if fused_dq else "")
    return (label if mma is None else f"{label}-{mma}", dtype, dot, family, nk, nq, h, d, seed, xs, got, precision, time.time() - t0)


def attack(source: str, device: str, dtype: str, dot: str, family: str, nk: int, nq: int, h: int, d: int,
           seed: int, mma=None, forward_only=False, causal: str = "none", fused_dq: bool = False) -> Case:
    return judge(*produce(source, device, dtype, dot, family, nk, nq, h, d, seed, mma, causal, fused_dq),
                 forward_only=forward_only, causal=causal)


def check_exp2(device: str) -> dict:
    """The hypothesis HardwareConstants.ex2_exact_at_zero (an unchanged running max rescales by exactly
    1) and, as a data point beside the "hw" probes, tl.math.exp2's largest relative error on the
    arguments a softmax feeds it ([-126, 0], fp32)."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _exp2(X, Y, N, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(X + offs, mask=offs < N, other=0.0)
        tl.store(Y + offs, tl.math.exp2(x), mask=offs < N)

    def run(x):
        y = torch.empty_like(x)
        _exp2[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y

    zeros = torch.tensor([0.0, -0.0] * 512, dtype=torch.float32, device=device)
    n = 1 << (22 if device != "cpu" else 12)
    gen = torch.Generator(device="cpu").manual_seed(0)
    x = torch.cat([-126.0 * torch.rand(n, generator=gen), -torch.rand(n, generator=gen)]).to(device)
    y = run(x).double().cpu().numpy()
    exact = np.exp2(x.double().cpu().numpy())
    rel = np.abs(y - exact) / exact
    return {"device": device, "exp2_zero_is_one": bool((run(zeros) == 1.0).all().item()),
            "exp2_max_rel_error": float(rel.max()), "exp2_max_rel_error_over_2^-22": float(rel.max() / 2.0**-22),
            "samples": int(x.numel())}


def table(cases) -> str:
    """Markdown: per (dtype, dot, quantity): min bound/observed per kind over every case, and the
    median (probabilistic) on random inputs; the family/N_k where the minimum occurs."""
    lines = ["| source | dtype | dot | quantity | min wc (where) | min prob (where) | median prob, random | over |",
             "|---|---|---|---|---|---|---|---|"]
    keys = sorted({(c.source, c.dtype, c.dot, c.causal) for c in cases})
    for src, dt, dot, causal in keys:
        cs = [c for c in cases if (c.source, c.dtype, c.dot, c.causal) == (src, dt, dot, causal)]
        dot = dot if causal == "none" else f"{dot}, causal {causal}"
        for qn in QUANTITIES:
            cell = {}
            over = 0
            for kind in KINDS:
                best = (math.inf, "")
                for c in cs:
                    for r in c.ratios:
                        if r.quantity == qn and r.kind == kind:
                            over += r.over
                            if r.min < best[0]:
                                best = (r.min, f"{c.family} {c.nk}")
                cell[kind] = best
            meds = [r.median for c in cs if c.family == "random" for r in c.ratios
                    if r.quantity == qn and r.kind == "probabilistic" and math.isfinite(r.median)]
            med = f"{np.median(meds):.3g}" if meds else "-"
            lines.append(f"| {src} | {dt} | {dot} | {qn} | {cell['worst_case'][0]:.3g} ({cell['worst_case'][1]}) "
                         f"| {cell['probabilistic'][0]:.3g} ({cell['probabilistic'][1]}) | {med} | {over} |")
    return "\n".join(lines)


def table_by_size(cases) -> str:
    """Markdown: one row per (N_k, N_q, precision): cases, entries compared, entries over each bound, the
    minimum of bound / observed over every family (and where), and the medians of probabilistic bound /
    observed on random inputs per quantity (the tightness the issue measures per N_k)."""
    lines = ["| N_k | N_q | precision | cases | entries | over wc | over prob | min wc/obs (where) "
             "| min prob/obs (where) | median prob/obs, random: O, LSE, dQ, dK, dV |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    keys = sorted({(c.nk, c.nq, c.dtype, c.dot, c.source, c.causal) for c in cases})
    for nk, nq, dt, dot, src, causal in keys:
        cs = [c for c in cases if (c.nk, c.nq, c.dtype, c.dot, c.source, c.causal) == (nk, nq, dt, dot, src, causal)]
        dot = dot if causal == "none" else f"{dot}, causal {causal}"
        n = sum(r.compared for c in cs for r in c.ratios)
        over = {k: sum(r.over for c in cs for r in c.ratios if r.kind == k) for k in KINDS}
        mins = {}
        for k in KINDS:
            m = min(((r.min, f"{r.quantity}, {c.family}") for c in cs for r in c.ratios if r.kind == k),
                    default=(math.inf, "-"))
            mins[k] = f"{m[0]:.3g} ({m[1]})"
        meds = []
        for qn in QUANTITIES:
            x = [r.median for c in cs if c.family == "random" for r in c.ratios
                 if r.quantity == qn and r.kind == "probabilistic" and math.isfinite(r.median)]
            meds.append(f"{np.median(x):.3g}" if x else "-")
        lines.append(f"| {nk} | {nq} | {dt} {dot}{'' if src == 'kernel' else ' (' + src + ')'} | {len(cs)} | {n} "
                     f"| {over['worst_case']} | {over['probabilistic']} | {mins['worst_case']} "
                     f"| {mins['probabilistic']} | {', '.join(meds)} |")
    return "\n".join(lines)


def explain(source: str, device: str, precisions, nk: int, nq: int, h: int, d: int, seed: int) -> str:
    """Markdown: on random inputs, per precision, the probabilistic O and LSE bounds split into their
    terms (flashcheck.proofs.bounds.forward.forward_terms): each cell is the median over entries of term / observed
    error (entries with a nonzero error), so a row shows how many observed errors that term alone costs;
    'bound' is the median of bound / observed (what the tightness table reports)."""
    import dataclasses

    from flashcheck.proofs.bounds.forward import forward_terms
    from flashcheck.reference.attention import attention

    cols, rows = [], {}
    for pr in precisions:
        dt, dot = pr.split(":")
        q, k, v, do = inputs("random", dt, nq, nk, h, d, seed)
        got, precision = run_source(source, device, dt, dot, q, k, v, do)
        O, L = attention(q, k, v)
        t = forward_terms(q, k, v, precision=precision)
        for qn, err, bound, terms, capped in (("O", np.abs(got[0] - O), t.bound.o, t.o, t.o_capped),
                                               ("LSE", np.abs(got[1] - L), t.bound.lse, t.lse, t.lse_capped)):
            col = f"{qn} {dt}/{dot}"
            cols.append(col)
            hit = err > 0
            rows.setdefault("bound", {})[col] = float(np.median(bound[hit] / err[hit]))
            rows.setdefault("(capped by worst case, share)", {})[col] = float(np.mean(capped[hit]))
            for f in dataclasses.fields(terms):
                x = getattr(terms, f.name)
                if x is not None:
                    rows.setdefault(f.name, {})[col] = float(np.median(np.broadcast_to(x, err.shape)[hit] / err[hit]))
    lines = ["| term | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for name, vals in rows.items():
        lines.append(f"| {name} | " + " | ".join(f"{vals[c]:.3g}" if c in vals else "-" for c in cols) + " |")
    return "\n".join(lines)


def load(path: str) -> list:
    cases = []
    with open(path) as f:
        for line in f:
            c = json.loads(line)
            c["ratios"] = tuple(Ratio(**r) for r in c["ratios"])
            cases.append(Case(**c))
    return cases


def main(argv=None):
    from flashcheck.structured import FAMILIES

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", choices=("emulation", "kernel"), default="emulation")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--nk", type=int, nargs="+", default=[512])
    ap.add_argument("--nq", type=int, default=64)
    ap.add_argument("--h", type=int, default=1)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--precisions", nargs="+", default=[f"{a}:{b}" for a, b in PRECISIONS])
    ap.add_argument("--families", nargs="+", default=list(FAMILIES) + ["random"])
    ap.add_argument("--workers", type=int, default=1, help="processes for the references and bounds")
    ap.add_argument("--check-exp2", default=None, help="write check_exp2's JSON here first")
    ap.add_argument("--table-from", default=None, help="only print the table of this JSONL file")
    ap.add_argument("--mma", choices=("h100",), default=None,
                    help="emulation: the forward's tensor-core dots through the H100's measured truncating steps")
    ap.add_argument("--explain", action="store_true",
                    help="only print the terms of the probabilistic O/LSE bounds on random inputs (first N_k, seed)")
    ap.add_argument("--forward-only", action="store_true", help="judge O and LSE alone")
    ap.add_argument("--causal", choices=tuple(CAUSALS), default="none",
                    help="every case under this causal mask (bottom_right: with N_q < N_k each row sees nearly every "
                         "key; top_left sees the first N_q)")
    ap.add_argument("--fused-dq", action="store_true",
                    help="the kernel through the fused backward's tiles (head dim 64), on every unbanded call")
    ap.add_argument("--out", default=None)
    ap.add_argument("--table", default=None, help="write the markdown table here as well")
    a = ap.parse_args(argv)
    if a.table_from:
        cases = load(a.table_from)
        print(table(cases) + "\n\n" + table_by_size(cases))
        return 0
    if a.explain:
        print(explain(a.source, a.device, a.precisions, a.nk[0], a.nq, a.h, a.d, a.seeds[0]))
        return 0
    if not a.out:
        ap.error("--out is required")
    if a.check_exp2:
        res = check_exp2(a.device)
        print(json.dumps(res), flush=True)
        with open(a.check_exp2, "w") as f:
            json.dump(res, f, indent=1)
    cases = []
    jobs = [(nk, pr, fam, seed) for nk in a.nk for pr in a.precisions for fam in a.families for seed in a.seeds]
    # the longest cases first, so that a time limit cuts the short ones and the pool ends together: the bounds'
    # cost grows with N_k and is highest in fp32 ieee (every step of the FMA chain), then tf32 (H100, 2026-11-24)
    cost = {"float32:ieee": 0, "float32:tf32": 1, "float16:fp16": 2, "bfloat16:bf16": 3}
    jobs.sort(key=lambda j: (-j[0], cost.get(j[1], 4)))

    def report(c, f):
        cases.append(c)
        f.write(json.dumps(asdict(c)) + "\n")
        f.flush()
        worst = min(c.ratios, key=lambda r: r.min)
        print(f"{c.source} {c.dtype}/{c.dot} {c.family:16s} nk={c.nk:6d} seed={c.seed} causal={c.causal} "
              f"{c.seconds:6.1f}s "
              f"min {worst.min:.3g} ({worst.quantity} {worst.kind}) over={sum(r.over for r in c.ratios)}",
              flush=True)

    with open(a.out, "a") as f:
        if a.workers <= 1:
            for nk, pr, fam, seed in jobs:
                dt, dot = pr.split(":")
                report(attack(a.source, a.device, dt, dot, fam, nk, a.nq, a.h, a.d, seed, a.mma, a.forward_only,
                              a.causal, a.fused_dq), f)
        else:  # the source runs here (one GPU), the references and bounds in worker processes
            import multiprocessing as mp
            from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

            # one BLAS/OpenMP thread per worker unless the caller says otherwise (spawned workers read the environment
            # at import): 14 workers x 16 threads each ran the tensor-core precisions' cases 10x slower (H100 host,
            # 2026-11-27c)
            os.environ.setdefault("OMP_NUM_THREADS", "1")
            with ProcessPoolExecutor(a.workers, mp_context=mp.get_context("spawn")) as pool:
                pending = set()
                for nk, pr, fam, seed in jobs:
                    dt, dot = pr.split(":")
                    pending.add(pool.submit(judge, *produce(a.source, a.device, dt, dot, fam, nk, a.nq, a.h,
                                                            a.d, seed, a.mma, a.causal, a.fused_dq),
                                                    forward_only=a.forward_only,
                                            causal=a.causal))
                    while len(pending) > 2 * a.workers:  # keep the inputs in flight bounded
                        done, pending = wait(pending, return_when=FIRST_COMPLETED)
                        for fut in done:
                            report(fut.result(), f)
                for fut in pending:
                    report(fut.result(), f)
    t = table(cases)
    print(t)
    if a.table:
        with open(a.table, "w") as f:
            f.write(t + "\n")
    return 0 if all(r.over == 0 for c in cases for r in c.ratios) else 1


if __name__ == "__main__":
    sys.exit(main())

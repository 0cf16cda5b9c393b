"""Which term of the backward bound dominates (issue 8, bench/NOTES.md "backward bound terms").

For random inputs, per precision and gradient: the median over entries of bound/observed (observed =
the CPU emulation's error, proofs/emulation.py) and, for each named term of the probabilistic bound
(flashcheck.proofs.bounds.backward.backward_terms), the median over entries of term / bound. Variance terms
are shown as lam * sqrt(part) alone (they add in quadrature, so their shares can sum past 1).

    python bench/backward_terms.py --nk 512 4096
"""
from __future__ import annotations

import argparse

import numpy as np

PRECISIONS = (("float32", "ieee"), ("float32", "tf32"), ("float16", "fp16"), ("bfloat16", "bf16"))


def main(argv=None):
    from bench.bounds_attack import inputs, run_source
    from flashcheck.proofs.bounds.backward import backward_terms
    from flashcheck.reference.attention import attention
    from flashcheck.reference.backward import attention_backward

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nk", type=int, nargs="+", default=[512])
    ap.add_argument("--nq", type=int, default=64)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--precisions", nargs="+", default=[f"{a}:{b}" for a, b in PRECISIONS])
    a = ap.parse_args(argv)
    for nk in a.nk:
        for pr in a.precisions:
            dt, dot = pr.split(":")
            q, k, v, do = inputs("random", dt, a.nq, nk, 1, a.d, a.seed)
            # the emulation of our kernel and its Precision (l in fp64, Delta from the fp32 O), as bounds_attack
            (_, _, *got), precision = run_source("emulation", "cpu", dt, dot, q, k, v, do)
            O, L = attention(q, k, v)
            exact = attention_backward(q, k, v, O, L, do)
            bb, terms = backward_terms(q, k, v, do, precision=precision)
            print(f"\n### {dt}/{dot}, N_k = {nk}, N_q = {a.nq}, d = {a.d}, random (seed {a.seed})\n")
            for name, bound, g, e in zip(("dQ", "dK", "dV"), (bb.dq, bb.dk, bb.dv), got, exact):
                err = np.abs(g - e)
                hit = err > 0
                print(f"{name}: median bound/observed {np.median(bound[hit] / err[hit]):.3g}")
                rows = sorted(((float(np.median(t.value / bound)), t) for t in terms[name]), key=lambda x: -x[0])
                for share, t in rows:
                    if share > 0.005:
                        print(f"    {share:6.3f}  {t.kind:5s}  {t.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

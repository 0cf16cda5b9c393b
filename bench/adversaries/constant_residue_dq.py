"""An input built against the round-to-nearest probabilistic model of an accumulation (bench/NOTES.md,
"backward bound terms"): every product of the dQ accumulation has the SAME residue modulo the ulp of
the partial sum (p_j = r + m_j ulp, m_j random integers, so the products are distinct) after a first
product that puts the partial sum in [1, 2); every step then rounds the same way. The errors are
coherent, which no independence model over distinct operations covers.

    PYTHONPATH=$PWD python bench/adversaries/constant_residue_dq.py [--n 4096 16384] [--spread 5000] [--cancel]
        [--source kernel --device cuda]

--cancel ends with the opposite of the first product (R = dQ ~ 0, so nothing is charged along R).
Prints observed |dQ error| / bound for both kinds (fp32 ieee; the CPU emulation = the GPU's FMA order, with every
claim bench/bounds_attack.py makes; --source kernel: our kernel with ours_precision's claims).
"""
from __future__ import annotations

import argparse

import numpy as np


def coherent_terms(n: int, spread: int, cancel: bool, seed: int = 0):
    """The n summands: t_0 = 1.5 (the partial sum in [1, 2)), then t_j = (2^-24 - 2^-31) + m_j 2^-23 (m_j random,
    centred in each half): distinct, each with a residue just under half an ulp of [1, 2), so every addition rounds
    down; with cancel the last is -1.5 (the sum ~ 0)."""
    rng = np.random.default_rng(seed)
    m = rng.integers(-spread, spread + 1, n)
    m[: n // 2] -= int(round(m[: n // 2].mean()))
    m[n // 2:] -= int(round(m[n // 2:].mean()))
    t = (2.0**-24 - 2.0**-31) + m * 2.0**-23
    t[0] = 1.5
    if cancel:
        t[-1] = -1.5
    return t


def build(n: int, d: int, spread: int, cancel: bool, seed: int = 0):
    """(q, k, v, do) in float32 values: uniform rows (q = 0), V's column 0 = +1 then -1 (dS_j = +-1/n
    exactly), K's column 0 chosen so that dS_j k_j = t_j (coherent_terms)."""
    q = np.zeros((1, 1, 1, d))
    v = np.zeros((1, 1, n, d))
    v[..., : n // 2, 0], v[..., n // 2:, 0] = 1.0, -1.0
    dS = np.where(np.arange(n) < n // 2, 1.0, -1.0) / n
    t = coherent_terms(n, spread, cancel, seed)
    k = np.zeros((1, 1, n, d))
    k[..., 0] = t / dS
    do = np.zeros((1, 1, 1, d))
    do[..., 0] = 1.0
    return q, k, v, do


def main(argv=None):
    from bench.bounds_attack import run_source
    from flashcheck.proofs.bounds import backward_bound
    from flashcheck.proofs.emulation import round_to
    from flashcheck.reference.attention import attention
    from flashcheck.reference.backward import attention_backward

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[4096])
    ap.add_argument("--d", type=int, default=16)
    ap.add_argument("--spread", type=int, default=5000)
    ap.add_argument("--cancel", action="store_true")
    ap.add_argument("--source", choices=("emulation", "kernel"), default="emulation",
                    help="the emulation of our fp32 ieee kernel with every claim bounds_attack makes, or the kernel "
                         "itself with ours_precision's claims")
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args(argv)
    for n in a.n:
        q, k, v, do = build(n, a.d, a.spread, a.cancel)
        assert np.array_equal(round_to(k, "float32"), k)
        (_, _, dq, _, _), precision = run_source(a.source, a.device, "float32", "ieee", q, k, v, do)
        O, L = attention(q, k, v)
        exact = attention_backward(q, k, v, O, L, do)
        err = np.abs(dq - exact[0])
        for kind in ("probabilistic", "worst_case"):
            b = backward_bound(q, k, v, do, precision=precision, kind=kind).dq
            print(f"{a.source} N_k={n} cancel={a.cancel} {kind:13s} dQ: max error/bound {np.max(err / b):.9f} "
                  f"(dQ[0,0]: error {err[0, 0, 0, 0]:.3g}, bound {b[0, 0, 0, 0]:.3g})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""An input built against the round-to-nearest probabilistic model of an accumulation (bench/NOTES.md,
"backward bound terms"): every product of the dQ accumulation has the SAME residue modulo the ulp of
the partial sum (p_j = r + m_j ulp, m_j random integers, so the products are distinct) after a first
product that puts the partial sum in [1, 2); every step then rounds the same way. The errors are
coherent, which no independence model over distinct operations covers.

    PYTHONPATH=$PWD python bench/adversaries/constant_residue_dq.py [--n 4096 16384] [--spread 5000] [--cancel]
        [--masking none key window] [--balanced] [--source kernel --device cuda]

--cancel ends with the opposite of the first product (R = dQ ~ 0, so nothing is charged along R).
--masking puts a masked entry into the head while the attacked row sees every key (Masked): 63 zero rows (q = dO = 0:
their products are 0) come before it, and row 0 does not see the last key, through a dense mask ("key": the kernel
visits the key tiles in the unmasked order) or a window (right = N_k - 2, "window": the band makes the query block's
last key tile partial, visited first). The attacked row's forward bound is its own row block's (unmasked), so Delta
keeps its tight bound: before the chains were evaluated in the kernel's order on masked heads (bounds.md sec. 8),
dQ's accumulation there kept the grouped model.
Prints observed |dQ error| / bound for both kinds (fp32 ieee; the CPU emulation = the GPU's FMA order, with every
claim bench/bounds_attack.py makes; --source kernel: our kernel with ours_precision's claims).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Masked:
    """An adversary's inputs (float64 arrays of fp32 values) with the masking they run under."""
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    do: np.ndarray
    causal: bool | str = False
    mask: np.ndarray | None = None
    window: tuple | None = None

    def masks(self) -> dict:
        """The keyword arguments every attention, backward and bound call takes alike."""
        return {"causal": self.causal, "mask": self.mask, "window": self.window}


def coherent_terms(n: int, spread: int, cancel: bool, seed: int = 0, balanced: bool = False):
    """The n summands: t_0 = 1.5 (the partial sum in [1, 2)), then t_j = (2^-24 - 2^-31) + m_j 2^-23 (m_j random,
    centred in each half): distinct, each with a residue just under half an ulp of [1, 2), so every addition rounds
    down; with cancel the last is -1.5 (the sum ~ 0). balanced: the second half opens with another 1.5 (the partial
    sum in [2, 4)) and its terms are twice the first half's, (2^-23 - 2^-30) + m_j 2^-22 (just under half an ulp of
    [2, 4)): the signed sum of the two halves, what multiplies dQ's row-common Delta error (sum_j P_j k_j with
    dS_j = +-P_j), is then ~0 instead of ~1.5, while every step still rounds down."""
    rng = np.random.default_rng(seed)
    m = rng.integers(-spread, spread + 1, n)
    m[: n // 2] -= int(round(m[: n // 2].mean()))
    m[n // 2:] -= int(round(m[n // 2:].mean()))
    t = (2.0**-24 - 2.0**-31) + m * 2.0**-23
    t[0] = 1.5
    if balanced:
        t[n // 2:] *= 2.0
        t[n // 2] = 1.5
    if cancel:
        t[-1] = -1.5
    return t


def build(n: int, d: int, spread: int, cancel: bool, seed: int = 0, balanced: bool = False):
    """(q, k, v, do) in float32 values: uniform rows (q = 0), V's column 0 = +1 then -1 (dS_j = +-1/n
    exactly), K's column 0 chosen so that dS_j k_j = t_j (coherent_terms)."""
    q = np.zeros((1, 1, 1, d))
    v = np.zeros((1, 1, n, d))
    v[..., : n // 2, 0], v[..., n // 2:, 0] = 1.0, -1.0
    dS = np.where(np.arange(n) < n // 2, 1.0, -1.0) / n
    t = coherent_terms(n, spread, cancel, seed, balanced)
    k = np.zeros((1, 1, n, d))
    k[..., 0] = t / dS
    do = np.zeros((1, 1, 1, d))
    do[..., 0] = 1.0
    return q, k, v, do


MASKINGS = ("none", "key", "window")


def build_masked(n: int, d: int, spread: int, cancel: bool, masking: str, rows: int = 64,
                 balanced: bool = False) -> Masked:
    """The inputs of `build` under `masking` (module docstring); the attacked row is the last of `rows`."""
    q, k, v, do = build(n, d, spread, cancel, balanced=balanced)
    if masking == "none":
        return Masked(q, k, v, do)
    q, do = (np.concatenate([np.zeros((1, 1, rows - 1, d)), x], axis=2) for x in (q, do))
    if masking == "key":
        mask = np.ones((1, 1, rows, n), dtype=bool)
        mask[0, 0, 0, n - 1] = False
        return Masked(q, k, v, do, mask=mask)
    if masking == "window":
        return Masked(q, k, v, do, window=(None, n - 2))
    raise ValueError(f"masking must be one of {MASKINGS}, got {masking!r}")


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
    ap.add_argument("--masking", nargs="+", choices=MASKINGS, default=["none"])
    ap.add_argument("--balanced", action="store_true", help="coherent_terms(balanced=True)")
    ap.add_argument("--source", choices=("emulation", "kernel"), default="emulation",
                    help="the emulation of our fp32 ieee kernel with every claim bounds_attack makes, or the kernel "
                         "itself with ours_precision's claims")
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args(argv)
    for n, masking in ((n, m) for n in a.n for m in a.masking):
        x = build_masked(n, a.d, a.spread, a.cancel, masking, balanced=a.balanced)
        q, k, v, do, mk = x.q, x.k, x.v, x.do, x.masks()
        assert np.array_equal(round_to(k, "float32"), k)
        (_, _, dq, _, _), precision = run_source(a.source, a.device, "float32", "ieee", q, k, v, do, **mk)
        O, L = attention(q, k, v, **mk)
        exact = attention_backward(q, k, v, O, L, do, **mk)
        err = np.abs(dq - exact[0])
        for kind in ("probabilistic", "worst_case"):
            b = backward_bound(q, k, v, do, precision=precision, kind=kind, **mk).dq
            print(f"{a.source} N_k={n} masking={masking} cancel={a.cancel} balanced={a.balanced} {kind:13s} dQ: "
                  f"max error/bound {np.max(err / b):.9f} (dQ[0,0,-1,0]: error {err[0, 0, -1, 0]:.3g}, bound {b[0, 0, -1, 0]:.3g})",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

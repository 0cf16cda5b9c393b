"""An input built against Delta's bound where dQ reads it whole: every row's Delta dot rounds as far as a search can
push it within the preprocess kernel's tree (the first of Precision.delta_trees, the dense call's), and nothing else
of dQ is large.

q = 0 (uniform rows: P = 1/N_k exactly), every V row the same v0 (so O = v0 exactly and dP_ij = dO_i . v0 = Delta_i:
the exact g = dP - Delta is 0, and so is the exact dQ), K near 1 (sum_j P_ij k_j ~ 1, no cancellation). The kernel's
dS_ij = P_ij fl(dP^_ij - Delta^_i) is then the difference of two roundings of one number, the FMA chain's (known to the
bound, e_dp) and the tree's (bounded by _delta_tree_bound): dQ's whole error is Delta's rounding times sum_j P_ij k_j.
dO_i is chosen per row among `tries` candidates whose products share their low bits (odd multiples of 2^-23 in [1, 2)
times v0's 2^-23 mod 2^-16: equal residues, the tree's pair sums land on ties) for the largest tree error / tree bound.

    PYTHONPATH=$PWD python bench/adversaries/delta_tree_dq.py [--nk 512 4096] [--tries 3000] [--order tree|descending]
        [--family residues|one_large]

--order descending: the emulation's Delta summed from the last column to the first instead (a deeper tree than the
claim states, and not dP's ascending chain: what the bound must not be expected to cover; with one_large it loses every
small product, which dP's chain keeps). Prints |dQ error| / bound for both kinds (fp32 ieee, the emulation with every
claim of bench/bounds_attack.py, the Delta tree of the installed Triton's record at d = 64).
"""
from __future__ import annotations

import argparse

import numpy as np


def _exact_rows(do, o):
    """sum_c dO_c O_c exactly: every value a multiple of 2^-23 below 2^2 here, so the products are integers times 2^-46
    under 2^50 and 64 of them sum exactly in int64."""
    a, b = np.rint(do * 2.0**23).astype(np.int64), np.rint(o * 2.0**23).astype(np.int64)
    assert np.all(a * 2.0**-23 == do) and np.all(b * 2.0**-23 == o) and np.abs(a).max() < 2**25
    return (a * b).sum(-1).astype(np.float64) * 2.0**-46  # < 2^56: one rounding into float64, 2^-53 relative


def build(nk: int, nq: int = 16, d: int = 64, tries: int = 3000, seed: int = 0, family: str = "residues", tree=None):
    """(q, k, v, do) in float32 values and the tree (the record's for d, as bench/bounds_attack.py states it).
    family "residues": the search of the module docstring; "one_large": v0 = (values just under 2^-24, then 1), dO_i =
    (1, ..., 1, 1 + 2^-23 m_i): one product in [1, 2), the last, every other one under half its ulp, all positive (a sum
    from the last column loses each; the tree adds them among themselves first, and so does dP's ascending chain)."""
    import torch

    from bench.bounds_attack import delta_claim
    from flashcheck.proofs.bounds.backward import _delta_tree_bound
    from flashcheck.proofs.emulation import delta_dot

    trees = delta_claim("float32", "ieee", d).get("delta_trees") or (tuple(range(d)),)
    tree = tree or trees[0]
    rng = np.random.default_rng(seed)
    if family == "one_large":
        v0 = np.asarray(2.0**-24 * (1 - 2.0**-10 * rng.random(d)), dtype=np.float32).astype(np.float64)
        v0[-1] = 1.0
        do = np.ones((nq, d))
        do[:, -1] = 1 + rng.integers(0, 2**22, nq) * 2.0**-23
    else:
        v0 = 1 + rng.integers(0, 2**8, d) * 2.0**-16 + 2.0**-23
        rows = []
        for _ in range(nq):
            cand = 1 + (2 * rng.integers(0, 2**11, (tries, d)) + 1) * 2.0**-23
            o = np.broadcast_to(v0, cand.shape).copy()
            got = delta_dot(torch.from_numpy(cand).float(), torch.from_numpy(o).float(), tree).double().numpy()
            err = np.abs(got - _exact_rows(cand, v0))
            b = _delta_tree_bound(cand, o, np.zeros(cand.shape), 2.0**-24, len(tree).bit_length(), trees, "float32")
            rows.append(cand[np.argmax(err / b)])
        do = np.array(rows)
    q = np.zeros((1, 1, nq, d))
    k = np.asarray(1 + 0.01 * rng.standard_normal((1, 1, nk, d)), dtype=np.float32).astype(np.float64)
    v = np.broadcast_to(v0, (1, 1, nk, d)).copy()
    return q, k, v, do[None, None], tree


def descending(do, o, tree=None):
    """A planted Delta (emulation.delta_dot's signature, tree ignored): the products rounded, added from the last
    column to the first in fp32 (depth dv)."""
    s = (do[..., -1] * o[..., -1]).clone()
    for c in range(do.shape[-1] - 2, -1, -1):
        s = s + do[..., c] * o[..., c]
    return s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nk", type=int, nargs="+", default=[512, 4096])
    ap.add_argument("--tries", type=int, default=3000)
    ap.add_argument("--order", choices=["tree", "descending"], default="tree")
    ap.add_argument("--family", choices=["residues", "one_large"], default="residues")
    a = ap.parse_args()
    from unittest import mock

    from bench.bounds_attack import run_source
    from flashcheck.proofs import emulation
    from flashcheck.proofs.bounds import backward_bound
    from flashcheck.reference.attention import attention
    from flashcheck.reference.backward import attention_backward

    for nk in a.nk:
        q, k, v, do, tree = build(nk, tries=a.tries, family=a.family)
        with mock.patch.object(emulation, "delta_dot", descending if a.order == "descending" else emulation.delta_dot):
            (_, _, dq, _, _), precision = run_source("emulation", "cpu", "float32", "ieee", q, k, v, do)
        assert precision.delta_trees[0] == tree, "the emulation's tree is not the one the input was built for"
        O, L = attention(q, k, v)
        exact = attention_backward(q, k, v, O, L, do)[0]
        for kind in ("probabilistic", "worst_case"):
            b = backward_bound(q, k, v, do, precision=precision, kind=kind).dq
            r = np.abs(dq - exact) / b
            print(f"emulation N_k={nk} {a.family} order={a.order} {kind:13s} dQ: max error/bound {r.max():.4g}, median "
                  f"{np.median(r):.4g}")


if __name__ == "__main__":
    main()

"""Dump one audit case of our kernel on the GPU for an offline look at its bound: the rounded inputs, the kernel's
(O, LSE, dQ, dK, dV) through flashcheck's "ours" target (as `flashcheck audit` calls it) and the Precision it states.

    PYTHONPATH=. python3 bench/audit_case_dump.py --dtype float32 --N 16 --d 16 --distribution peaked_logits --out F.npz"""
from __future__ import annotations

import argparse

import numpy as np


def main(argv=None):
    import torch

    from flashcheck.adapters import resolve
    from flashcheck.audit_inputs import make_inputs
    from flashcheck.strategies import Shape

    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--N", type=int, default=16)
    ap.add_argument("--d", type=int, default=16)
    ap.add_argument("--distribution", default="peaked_logits")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    q, k, v, do = make_inputs(Shape(1, 1, 1, a.N, a.N, a.d), a.distribution, a.seed, 1.0)
    dt = getattr(torch, a.dtype)
    t = [torch.tensor(x, dtype=dt, device="cuda").requires_grad_(True) for x in (q, k, v)]
    do_t = torch.tensor(do, dtype=dt, device="cuda")
    kut = resolve("ours")
    o, lse = kut(*t)
    o.backward(do_t)
    pr = kut.precision_fn(dt, None, head_dim=a.d)
    np.savez(a.out, **{n: x.detach().double().cpu().numpy() for n, x in
                       (("q", t[0]), ("k", t[1]), ("v", t[2]), ("do", do_t), ("o", o), ("lse", lse),
                        ("dq", t[0].grad), ("dk", t[1].grad), ("dv", t[2].grad))}, precision=repr(pr))
    print(repr(pr))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

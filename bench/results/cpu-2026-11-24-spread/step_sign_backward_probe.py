# Probe (task spread): uniform rows, dO = +a over the first half of the query rows, -a(1+1e-3) over the second, times
# (1 + spread N(0,1)); fp32 ieee emulation vs both backward bounds.  PYTHONPATH=$PWD python3 THIS 4096 1e-6
import numpy as np, sys, time
from flashcheck.proofs.bounds import Precision, backward_bound
from flashcheck.proofs.emulation import fa2_backward, fa2_forward
from flashcheck.reference.attention import attention
from flashcheck.reference.backward import attention_backward
nq = int(sys.argv[1]); nk = 64; d = 64; eps = 1e-3
rng = np.random.default_rng(1)
a = (0.5 + rng.random(d)).astype(np.float32); b = (-(a * np.float32(1 + eps))).astype(np.float32)
do = np.concatenate([np.tile(a, (nq // 2, 1)), np.tile(b, (nq - nq // 2, 1))]).astype(np.float64); do = (do * (1 + float(sys.argv[2]) * rng.standard_normal(do.shape))).astype(np.float32).astype(np.float64)[None, None]
q = np.zeros((1, 1, nq, d)); k = rng.standard_normal((1, 1, nk, d)).astype(np.float32).astype(np.float64)
v = rng.standard_normal((1, 1, nk, d)).astype(np.float32).astype(np.float64)
t0 = time.time()
o, lse = fa2_forward(q, k, v, dtype="float32", dot="ieee")
g = fa2_backward(q, k, v, o, lse, do, dtype="float32", dot="ieee")
O, L = attention(q, k, v)
ex = attention_backward(q, k, v, O, L, do)
for kind in ("probabilistic", "worst_case"):
    bb = backward_bound(q, k, v, do, precision=Precision("float32", "ieee", exp="libm"), kind=kind)
    for name, got, e, bd in zip(("dQ", "dK", "dV"), g, ex, (bb.dq, bb.dk, bb.dv)):
        err = np.abs(got - e)
        with np.errstate(divide="ignore"):
            r = np.where(err > 0, bd / err, np.inf)
        print(nq, kind, name, "min bound/obs %.3g median %.3g over %d/%d" % (r.min(), np.median(r), (r < 1).sum(), r.size))
print("s", time.time() - t0)

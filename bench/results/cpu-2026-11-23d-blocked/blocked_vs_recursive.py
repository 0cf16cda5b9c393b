import sys, time
import numpy as np
sys.path.insert(0, "bench")
import bounds_attack as ba
from flashcheck.proofs.bounds import Precision, forward_bound
from flashcheck.proofs.emulation import fa2_forward
from flashcheck.reference.attention import attention
for nk in (512, 4096):
    for fam in ("random", "constant_v", "uniform_rows", "v_large_mean"):
        xs = ba.inputs(fam, "float32", 64, nk, 1, 64, 0)
        q, k, v, do = xs
        O, L = attention(q, k, v)
        row = []
        for acc in ("recursive", "blocked"):
            o, lse = fa2_forward(q, k, v, dtype="float32", dot="ieee", accumulation=acc)
            pr = Precision("float32", "ieee", exp="libm", accumulation=acc)
            err = np.abs(o - O)
            for kind in ("probabilistic", "worst_case"):
                b = forward_bound(q, k, v, precision=pr, kind=kind).o
                r = ba.ratio("O", kind, err, b)
                row.append(f"{acc[:3]} {kind[:4]} min {r.min:.3g} med {r.median:.3g} maxerr {r.max_err:.2e}")
        print(nk, fam, " | ".join(row), flush=True)

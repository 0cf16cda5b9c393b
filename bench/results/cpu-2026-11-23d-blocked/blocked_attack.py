import sys
import numpy as np
sys.path.insert(0, "bench")
import bounds_attack as ba
from flashcheck.proofs.bounds import Precision, forward_bound
from flashcheck.proofs.emulation import fa2_forward
from flashcheck.reference.attention import attention
from flashcheck.structured import FAMILIES
worst = {}
for nk in (512, 2048):
    for dt, dot in (("float32", "ieee"), ("float16", "fp16"), ("float32", "tf32")):
        for fam in list(FAMILIES) + ["random"]:
            for seed in (0, 1):
                q, k, v, do = ba.inputs(fam, dt, 64, nk, 1, 64, seed)
                O, L = attention(q, k, v)
                o, lse = fa2_forward(q, k, v, dtype=dt, dot=dot, accumulation="blocked")
                pr = Precision(dt, dot, exp="libm", accumulation="blocked")
                for kind in ("probabilistic", "worst_case"):
                    fb = forward_bound(q, k, v, precision=pr, kind=kind)
                    for name, err, b in (("O", np.abs(o - O), fb.o), ("LSE", np.abs(lse - L), fb.lse)):
                        r = ba.ratio(name, kind, err, b)
                        key = (dt, dot, kind)
                        if r.min < worst.get(key, (np.inf,))[0]:
                            worst[key] = (r.min, name, fam, nk, seed)
                        if r.over:
                            print("OVER", nk, dt, dot, fam, seed, kind, name, r.min, r.over, flush=True)
        print(nk, dt, dot, {k: v for k, v in worst.items() if k[:2] == (dt, dot)}, flush=True)

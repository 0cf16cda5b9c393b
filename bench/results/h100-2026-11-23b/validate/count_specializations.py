"""How many Triton specializations of `ours` the ci profile's property suite needs (bf16, full budget):
the warm-up's dry run (flashcheck.warmup: the suite on an exact float64 stand-in) records every call's
signature on the CPU; a forward specialization is (GQA group, head dim, band, mask and its broadcast,
grad) plus the divisibility class (== 1, % 16 == 0, other) of the integer arguments Triton specializes.

    PYTHONPATH=. python3 bench/results/h100-2026-11-23b/validate/count_specializations.py
"""
import os
import subprocess
import sys
import tempfile

from flashcheck.warmup import signatures


def cls(x):
    return 1 if x == 1 else 16 if x % 16 == 0 else 0


def key(s):
    B, Hq, Nq, d = s.q
    Hkv, Nk = s.k[1], s.k[2]
    flags = (Hq // Hkv, d, s.causal or s.window is not None, s.mask and tuple(x == 1 for x in s.mask),
             s.grad and s.dtype != "float32")
    return flags + tuple(cls(x) for x in (Nq, Nk, Hq, d, Nq * d, Hq * Nq * d, Nk * d, Hkv * Nk * d))


with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "signatures.jsonl")
    subprocess.run([sys.executable, "-m", "pytest", "-c", os.devnull, "-p", "flashcheck.pytest_plugin", "-p",
                    "no:cacheprovider", "--pyargs", "flashcheck.properties", "--kernel", "ours", "--device", "cpu",
                    "--dtype", "bfloat16", "--budget", "full", "--hypothesis-profile", "ci",
                    "--flashcheck-dry-run", path, "-q", "-n", "2"],
                   env=dict(os.environ, FLASHCHECK_PROFILE="ci"), check=True, stdout=subprocess.DEVNULL)
    sigs = signatures([path])
print(f"{len(sigs)} distinct calls; {len({key(s) for s in sigs})} forward and "
      f"{len({key(s) for s in sigs if s.grad})} backward specializations")

"""The committed compiled-code record of the installed Triton (proofs/measurements/forward_compiled_triton<version>
.json, bench/compile_forward.py --record) and a fresh compile to hold it against: the tests that a kernel change which
reshapes what the record states is re-recorded (test_rowsum_depth, test_bwd_exp_argument, test_delta_tree)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def committed_record() -> dict:
    """The record of the installed Triton version; the test is skipped where none is committed."""
    import triton

    from flashcheck.proofs.hardware import MEASUREMENTS

    path = MEASUREMENTS / f"forward_compiled_triton{triton.__version__}.json"
    if not path.exists():
        pytest.skip(f"no compiled-code record for Triton {triton.__version__}")
    return json.loads(path.read_text())


def compiled(script: str, *args) -> dict:
    """The JSON that `script` prints last, run with `args` in a process of its own without TRITON_INTERPRET (the
    interpreter's kernels do not compile), under the triton engine (kernel_config's tiles for triton_fwd)."""
    # the records are triton_fwd's / triton_bwd's (gluon_fwd's own entries: test_gluon_forward): their tiles
    env = dict(os.environ, TRITON_INTERPRET="0", FLASHCHECK_FORWARD_ENGINE="triton")
    out = subprocess.run([sys.executable, "-c", script, *map(str, args)], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])

"""The property suite catches bugs: `flashcheck validate --profile ci` fails every kernel of the catalog
(tests/buggy_kernels/) and passes every correct one: correct kernels with a declared restricted
domain pass, correct kernels that raise on part of the domain pass with their refusals listed, and
the planted bugs in restricted or refusing kernels still fail.

One test, one validation (a subprocess): pytest-xdist spreads them over its workers. (A module fixture
validating the whole catalog ran once in every worker that drew one of these tests: three times over
under -n 14 on the H100, the suite's longest path.) Buggy kernels stop at their first failing property (-x).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.buggy_kernels import ARGS, BUGGY, CORRECT, REFUSES, target

ROOT = Path(__file__).resolve().parent.parent


def validate(name: str, tmp: Path) -> dict:
    out = os.path.join(tmp, f"{name}.json")
    cmd = [sys.executable, "-m", "flashcheck", "validate", target(name), "--profile", "ci", "--device", "cpu",
           "--json", out, "-q", *ARGS.get(name, ())]
    if name in BUGGY:
        cmd.append("-x")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    result = json.load(open(out)) if os.path.exists(out) else {}
    return {"code": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr, "json": result}


def failed_properties(v) -> list[str]:
    return [r["property"] for r in v["json"].get("results", []) if r["outcome"] == "failed"]


@pytest.mark.parametrize("name", BUGGY)
def test_validate_fails_buggy_kernel(name, tmp_path):
    v = validate(name, tmp_path)
    assert v["code"] == 1, (f"{name}: validate exited {v['code']} (expected 1: a property fails)\n"
                            f"{v['stdout'][-3000:]}\n{v['stderr'][-2000:]}")
    assert failed_properties(v), f"{name}: exit 1 but no failed property in the JSON"


@pytest.mark.parametrize("name", CORRECT)
def test_validate_passes_correct_kernel(name, tmp_path):
    v = validate(name, tmp_path)
    assert v["code"] == 0, (f"{name}: validate exited {v['code']} (expected 0: every property holds)\n"
                            f"{v['stdout'][-4000:]}\n{v['stderr'][-2000:]}")
    results = v["json"]["results"]
    least = 5 if "--supports" in ARGS.get(name, ()) else 10
    assert sum(r["outcome"] == "passed" for r in results) >= least, f"{name}: too few properties ran: {results}"
    refused = " | ".join(part["words"] for part in v["json"]["refused_domain"])
    if name in REFUSES:
        assert REFUSES[name] in refused and "refuses" in v["stdout"], f"{name}: refusals not listed: {refused!r}"
    else:
        assert not refused, f"{name}: refused {refused!r} inside its declared domain"

"""The project's tests: GPU tests skip cleanly without CUDA. The hypothesis profiles and the kernel
options come from the flashcheck plugin (loaded by pytest's addopts `-p flashcheck.pytest_plugin`)."""
import faulthandler
import os
import signal

import pytest

# torch.compile (inductor: the compile tests, FlexAttention) compiles in a pool of one subprocess per
# core by default. Under pytest-xdist every worker starts its own pool, and the pools' shutdown at
# interpreter exit can wait minutes (pytorch/pytorch#162199): the suite hung after its last test on
# the H100. One compile thread skips the pool. Set before torch._inductor reads its config.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

# FLASHCHECK_STACKS=DIR: on SIGUSR1 every pytest process (controller and xdist workers) writes the stacks
# of all its threads to DIR/stacks-PID.txt; `timeout -s USR1` then shows where a hung run waits.
if os.environ.get("FLASHCHECK_STACKS"):
    os.makedirs(os.environ["FLASHCHECK_STACKS"], exist_ok=True)
    _stacks = open(os.path.join(os.environ["FLASHCHECK_STACKS"], f"stacks-{os.getpid()}.txt"), "w")
    faulthandler.register(signal.SIGUSR1, file=_stacks, all_threads=True, chain=False)


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the device machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)

"""The project's tests: GPU tests skip cleanly without CUDA. The hypothesis profiles and the kernel
options come from the flashcheck plugin (loaded by pytest's addopts `-p flashcheck.pytest_plugin`)."""
import pytest


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

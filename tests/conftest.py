"""Shared pytest set-up: hypothesis profiles, the GPU marker, and the flashcheck plugin options."""
import os

import pytest
from hypothesis import HealthCheck, settings

pytest_plugins = ["flashcheck.pytest_plugin"]

# `ci` extends hypothesis's built-in ci profile (auto-loaded when CI is set): derandomized, no deadline.
settings.register_profile(
    "ci",
    parent=settings.get_profile("ci"),
    max_examples=10,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("dev", max_examples=50, deadline=None)
settings.register_profile(
    "thorough", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
_profile = os.environ.get("FLASHCHECK_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
settings.load_profile(_profile)


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the device machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)

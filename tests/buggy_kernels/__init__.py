"""The catalog of planted bugs: small blocked online-softmax kernels in plain torch (CPU), each wrong
in one realistic way, and correct ones. tests/test_catalog.py asserts that
`flashcheck validate --profile ci` fails every buggy kernel and passes every correct one.

Each module exports `attention(q, k, v, **kw) -> (O, LSE)` with `attention.supports` (and
`attention.layout` where it is not bhnd); the module docstring names the bug.
"""
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORRECT = ("blocked", "correct_small_tiles", "correct_naive")
BUGGY = (
    "no_rescale",
    "causal_off_by_one",
    "drop_partial_tile",
    "stale_max",
    "relative_bias",
    "gqa_head_mapping",
    "lse_base2",
    "bf16_accumulation",
    "wrong_delta",
    "dk_missing_scale",
    "unsafe_masked_rows",
    "ignores_scale",
    "window_off_by_one",
)


def target(name: str) -> str:
    """The `flashcheck validate` target of a catalog kernel."""
    return f"{HERE / (name + '.py')}:attention"

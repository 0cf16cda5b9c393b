"""The catalog of planted bugs: small blocked online-softmax kernels in plain torch (CPU), each wrong
in one realistic way, and correct ones. tests/test_catalog.py asserts that
`flashcheck validate --profile ci` fails every buggy kernel and passes every correct one.

Each module exports `attention(q, k, v, **kw) -> (O, LSE)` with `attention.supports` (and
`attention.layout` where it is not bhnd, the declared domain where it is restricted); the module
docstring names the bug. Some kernels raise on part of their domain (tests/buggy_kernels/restricted.py):
declared, so the suite generates inside it, or undeclared, so it records refusals; their buggy twins
must still fail. `ARGS` holds the validate options a kernel is run with (what its user would declare).
"""
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORRECT = ("blocked", "correct_small_tiles", "correct_naive", "correct_top_left", "correct_bottom_right",
           "correct_multiple_128", "correct_head_dims", "correct_fp16_only", "correct_no_single_token",
           "correct_refuses_small_n", "correct_refuses_nonsquare")
# kernels that raise on part of the domain without declaring it: exit 0 with these refusals listed
REFUSES = {"correct_refuses_small_n": "N <= ", "correct_refuses_nonsquare": "Nq != Nk"}
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
    # planted bugs in restricted-domain kernels and in kernels that also refuse part of the domain
    "multiple_128_no_rescale",
    "head_dims_dk_missing_scale",
    "fp16_only_stale_max",
    "no_single_token_drop_partial_tile",
    "bottom_right_causal_off_by_one",
    "refuses_small_n_relative_bias",
    "refuses_nonsquare_wrong_delta",
    "top_left_means_bottom_right",
)
ARGS = {"correct_top_left": ("--supports", "causal,scale"),
        "top_left_means_bottom_right": ("--supports", "causal,scale")}


def target(name: str) -> str:
    """The `flashcheck validate` target of a catalog kernel."""
    return f"{HERE / (name + '.py')}:attention"

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


# The GPU suite's longest tests (>= 40 s each on the H100, 16 workers; durations of
# bench/results/h100-2026-11-24/suite/suite.log, longest first). Under xdist they go out first, one or two
# per worker (`make test-gpu`: --dist load --maxschedchunk 1; _alternate_long_and_short), so no worker starts a
# 200 s test near the end:
# the run of 2026-11-24 (worksteal, collection order) was cut at 500 s with two such tests still running,
# while its 820 tests add up to ~4700 worker-seconds (~300 s on 16 workers). Order only: nothing is skipped.
GPU_LONGEST_FIRST = (
    "tests/test_hardware.py::test_fma_chain_claim_still_holds",  # 222 s on the H200 (2026-11-29)
    "flashcheck/properties/test_finite.py::test_no_nan_or_inf_from_finite_inputs",
    "flashcheck/properties/test_backward_dk.py::test_dk_within_bound",
    "flashcheck/properties/test_determinism.py::test_backward_is_bitwise_deterministic",
    "tests/test_kernel_gpu.py::test_gpu_forward_backward_within_bound",
    "flashcheck/properties/test_backward_dq.py::test_dq_within_bound",
    "tests/test_kernel_backward.py::test_backward_matches_reference_within_bound",
    # 34-116 s a case (H200, 2026-11-29; six cases since 2026-11-29f, two of them at N_k 2048 / 2100): cut by the
    # first half's limit in 2026-11-29 and 2026-11-29f
    "tests/test_gluon_forward.py::test_auto_runs_the_gluon_kernels_on_long_d64_calls_within_bound",
    "flashcheck/properties/test_backward_dv.py::test_dv_within_bound",
    "tests/test_audit.py::test_gpu_audit_puts_every_backend_side_by_side_and_ours_within_its_bound",
    "flashcheck/properties/test_mask_removal.py::test_masking_a_key_equals_removing_it",
    "tests/test_catalog.py::test_validate_passes_correct_kernel",
    "flashcheck/properties/test_gqa.py::test_gqa_equals_repeated_kv_heads",
    "flashcheck/properties/test_split_merge.py::test_split_keys_and_merge_equals_whole",
    "flashcheck/properties/test_forward_o.py::test_o_within_bound",
    "tests/test_validate_cli.py::test_torch_sdpa_cpu_backends_hold",
    "flashcheck/properties/test_masked_rows.py::test_fully_masked_rows_give_zero_output",
    "tests/test_kernel_forward.py::test_forward_matches_reference_within_bound",
    "flashcheck/properties/test_convex_hull.py::test_output_rows_in_convex_hull_of_attended_values",
    "tests/test_kernel_gpu.py::test_gpu_every_head_dim",
    "tests/test_kernel_forward.py::test_forward_pipelined_qk_changes_nothing",
    "tests/test_validate_cli.py::test_the_warm_up_dry_run_records_the_calls_the_suite_makes",
    "flashcheck/properties/test_shift_invariance.py::test_per_row_logit_shift_leaves_o_unchanged",
    "flashcheck/properties/test_permutation.py::test_permuting_keys_and_values_leaves_o_unchanged",
    "tests/test_catalog.py::test_validate_fails_buggy_kernel",
    "flashcheck/properties/test_forward_lse.py::test_lse_within_bound",
)


def _longest_first_rank(item) -> int:
    name = item.nodeid.split("[", 1)[0]
    for rank, prefix in enumerate(GPU_LONGEST_FIRST):
        if name.endswith(prefix):
            return rank
    return len(GPU_LONGEST_FIRST)


def _record_collection(items):
    """FLASHCHECK_COLLECTED=PATH: the node ids in run order, one per line (bench/validate_gpu.sh lists those a time
    limit left unfinished). Every xdist worker collects the same list; each writes it whole, then renames. The
    variable is then dropped from this process's environment: a test that runs pytest again (flashcheck validate on
    the property suite) would otherwise overwrite the list with its own 15 items (the suite of 2026-11-26 named two
    tests unfinished from such a list)."""
    path = os.environ.pop("FLASHCHECK_COLLECTED", None)
    if path:
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "w") as f:
            f.writelines(item.nodeid + "\n" for item in items)
        os.replace(tmp, path)


def _alternate_long_and_short(items):
    """The ranked items longest first, each followed by one of the rest. xdist's load scheduler (--maxschedchunk 1)
    keeps two items on a worker: the one running and the next, sent when the one before it started (its first
    hand-out is items 2i, 2i+1 to worker i). Longest first alone queued long tests behind long tests on one
    worker while others ran short ones: the run of 2026-11-25 (H100, 16 workers) was cut at 480 s with 22 tests
    not started or unfinished, dq -> dk (198 s + 216 s) on one worker. Alternating puts a short test behind each
    long one, so a long test waits at most one short test."""
    rank = {id(it): _longest_first_rank(it) for it in items}
    ranked = sorted((it for it in items if rank[id(it)] < len(GPU_LONGEST_FIRST)), key=lambda it: rank[id(it)])
    rest = [it for it in items if rank[id(it)] == len(GPU_LONGEST_FIRST)]
    out = []
    for i, it in enumerate(ranked):
        out.append(it)
        if i < len(rest):
            out.append(rest[i])
    return out + rest[len(ranked):]


@pytest.hookimpl(trylast=True)  # after flashcheck.pytest_plugin's, which groups the property tests by their rank
def pytest_collection_modifyitems(config, items):
    if _cuda_available():
        items[:] = _alternate_long_and_short(items)  # stable within each part: collection order otherwise
        _record_collection(items)
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the device machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)

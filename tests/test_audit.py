"""`flashcheck audit`: a tiny sweep produces the report files with the documented JSON fields, and a
planted bug (O shifted by 1e-3) shows error/bound > 1 while the correct kernel stays below 1."""
import json

import pytest
import torch


def shifted_output_kernel(q, k, v):
    """Planted bug: the correct attention plus 1e-3 on every output entry."""
    return torch.nn.functional.scaled_dot_product_attention(q, k, v) + 1e-3


def _quick_audit(tmp_path, targets, device="cpu", **sweep_changes):
    from dataclasses import replace

    from flashcheck.audit import QUICK_SWEEP, run_audit

    sweep = replace(QUICK_SWEEP, **sweep_changes)
    report = run_audit(targets, device=device, sweep=sweep, out=tmp_path,
                       progress_stream=open("/dev/null", "w"))
    return report, json.loads((tmp_path / "report.json").read_text())


@pytest.fixture(scope="module")
def math_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("audit")
    return out, *_quick_audit(out, ["torch-sdpa-math"])


def test_audit_writes_markdown_json_and_plots(math_report):
    out, _, data = math_report
    assert (out / "report.md").read_text().startswith("# flashcheck audit")
    pngs = sorted(p.name for p in (out / "plots").glob("*.png"))
    assert any(n.startswith("error_vs_N_") for n in pngs), pngs
    assert any(n.startswith("error_vs_logit_scale_") for n in pngs), pngs
    assert {"command", "device", "torch", "triton", "components", "sweep"} <= set(data["header"])


def test_audit_json_has_errors_and_bound_ratios_per_quantity(math_report):
    _, _, data = math_report
    assert {"results", "masked_rows", "skipped"} <= set(data)
    sweeps = {r["case"]["sweep"] for r in data["results"]}
    assert sweeps == {"N", "logit_scale"}
    assert {r["case"]["distribution"] for r in data["results"]} == {"normal", "outliers",
                                                                     "peaked_logits"}
    for r in data["results"]:
        assert r["error"] is None, r["error"]
        assert {"o", "dq", "dk", "dv"} <= set(r["quantities"]), r["case"]
        for s in r["quantities"].values():
            assert {"rel_err", "max_abs", "ratio", "bound_rel", "nonfinite"} <= set(s)


def test_audit_checks_fully_masked_rows(math_report):
    _, _, data = math_report
    assert data["masked_rows"] and all(m["ok"] is not None or m["skipped"]
                                       for m in data["masked_rows"])


def test_audit_correct_kernel_stays_within_its_bound(math_report):
    _, report, _ = math_report
    assert all(set(s["ratio"]) == {"probabilistic", "worst_case"}
               for r in report["results"] for s in r["quantities"].values())
    worst = max(v for r in report["results"] for s in r["quantities"].values()
                for v in s["ratio"].values())
    assert worst <= 1, f"torch-sdpa-math exceeds its bound: worst error/bound {worst:.3g}"


def test_audit_flags_a_planted_bug_above_its_bound(tmp_path):
    target = f"{__file__}:shifted_output_kernel"
    report, data = _quick_audit(tmp_path, [target], dtypes=("float32",), Ns=(16,),
                                distributions=("normal",), extra_scale_points=0)
    # At logit scale 1 (the N sweep); near the overflow edge the bound rightly allows far more.
    ratios = [r["quantities"]["o"]["ratio"]["probabilistic"] for r in report["results"]
              if r["case"]["logit_scale"] == 1]
    assert ratios and min(ratios) > 1, f"O error/bound of the planted bug: {ratios}"
    assert "**" in (tmp_path / "report.md").read_text()  # ratios above 1 are shown in bold


def test_audit_published_figure_table_reports_output_and_dq_errors(tmp_path):
    report, _ = _quick_audit(tmp_path, ["torch-sdpa-math"], dtypes=("bfloat16",),
                             parts=("published",), published=True, published_shape=(1, 1, 32, 16))
    assert {(r["case"]["sweep"], r["case"]["distribution"]) for r in report["results"]} == {
        ("published", "normal"), ("published", "peaked_logits")}
    assert all(r["quantities"]["o"]["rel_err"] > 0 and r["quantities"]["dq"]["rel_err"] > 0
               for r in report["results"])
    md = (tmp_path / "report.md").read_text()
    assert "## bf16, N=32, d=16" in md and "| *published: FA2 / cuDNN (fused)* | 0.00225 |" in md


@pytest.mark.gpu
def test_gpu_audit_puts_every_backend_side_by_side_and_ours_within_its_bound(tmp_path):
    from dataclasses import replace

    from flashcheck.audit import GPU_TARGETS, QUICK_SWEEP, run_audit

    sweep = replace(QUICK_SWEEP, dtypes=("bfloat16", "float16", "float32"), parts=("N", "published"),
                    published=True, published_shape=(1, 1, 256, 128))
    report = run_audit(list(GPU_TARGETS), device="cuda", sweep=sweep, out=tmp_path,
                       progress_stream=open("/dev/null", "w"))
    seen = {(r["case"]["kernel"], r["case"]["dtype"]) for r in report["results"]}
    skipped = {(s["kernel"], s["dtype"]) for s in report["skipped"]}
    for kernel in GPU_TARGETS:
        for dtype in sweep.dtypes:
            assert (kernel, dtype) in seen | skipped, (kernel, dtype)
    for mode in ("ours", "ours-accurate"):
        ours = [r for r in report["results"] if r["case"]["kernel"] == mode
                and r["case"]["sweep"] == "N"]
        assert ours and not any(r["error"] for r in ours), [r["error"] for r in ours]
        worst = max(v for r in ours for s in r["quantities"].values() for v in s["ratio"].values())
        assert worst <= 1, f"{mode} exceeds its bound on the GPU: worst error/bound {worst:.3g}"


def _bench_module():
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "bench" / "run.py"
    spec = importlib.util.spec_from_file_location("bench_run", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_bench_dry_run_exercises_the_code_path_on_the_cpu(tmp_path, capsys):
    bench = _bench_module()
    assert bench.main(["--dry-run", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "bench.json").read_text())["rows"]
    assert rows and all(r["backend"] == "torch-sdpa-math" and r["fwd_tflops"] > 0
                        and r["bwd_tflops"] > 0 for r in rows), rows
    assert "| torch-sdpa-math |" in capsys.readouterr().out


def test_bench_rounds_interleave_every_backend(tmp_path):
    """--rounds R: every backend is timed once a round on each cell, and the reported ms are the medians."""
    import statistics

    bench = _bench_module()
    assert bench.main(["--dry-run", "--rounds", "3", "--dtype", "float16", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "bench.json").read_text())["rows"]
    for r in rows:
        assert len(r["rounds"]["fwd_ms"]) == len(r["rounds"]["bwd_ms"]) == 3, r
        assert r["fwd_ms"] == statistics.median(r["rounds"]["fwd_ms"]), r


def test_bench_refuses_to_run_without_cuda(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present: the real benchmark would run")
    assert _bench_module().main(["--out", str(tmp_path)]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err


def test_audit_ours_accurate_is_a_target_beside_ours_with_its_own_precision(tmp_path):
    """`ours-accurate` (precision="accurate") is audited beside `ours`, judged by its own
    precision model (p_split) and within its bound; the report puts the kernels side by side
    (a table of errors per kernel and a plot)."""
    import os

    # where the Triton kernel runs: on the GPU, else on the CPU through the interpreter (on a GPU machine
    # without TRITON_INTERPRET=1 the CPU has no kernel to audit: the report had no ours-accurate row)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("the Triton kernel needs CUDA or TRITON_INTERPRET=1")
    report, _ = _quick_audit(tmp_path, ["ours", "ours-accurate"], device=device, dtypes=("float16",), Ns=(16,),
                             distributions=("normal",), parts=("N",))
    accurate = [r for r in report["results"] if r["case"]["kernel"] == "ours-accurate"]
    assert accurate and not any(r["error"] for r in report["results"]), report["results"]
    assert all("p_split=True" in r["precision"] for r in accurate)
    worst = max(v for r in accurate for s in r["quantities"].values() for v in s["ratio"].values())
    assert worst <= 1, f"ours-accurate exceeds its bound: worst error/bound {worst:.3g}"
    md = (tmp_path / "report.md").read_text()
    assert "## float16: every kernel side by side" in md and "| distribution | N | ours | ours-accurate |" in md
    assert (tmp_path / "plots" / "kernels_side_by_side_float16.png").is_file()

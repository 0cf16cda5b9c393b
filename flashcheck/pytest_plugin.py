"""pytest options for choosing the kernel under test, and the bookkeeping `flashcheck validate` reads.

Options: ``--kernel TARGET`` (default ``ours``), ``--layout bhnd|bnhd``, ``--device cpu|cuda``,
``--dtype float32,float16,bfloat16``, ``--supports causal,scale,gqa,lse,backward,mask,window``,
``--head-dims 16,32,...`` (what the kernel accepts), ``--example-db DIR`` (hypothesis example database
shared between runs and machines; also ``FLASHCHECK_DB``), ``--flashcheck-report PATH`` (JSON with one
entry per test: outcome, worst error / bound, failure text).

Fixtures: ``kernel_under_test`` (session), ``flashcheck_options`` (session), and ``dtype``, by which
every property is parametrized. ``@pytest.mark.requires("lse", ...)`` skips a property, with the
reason, when the kernel does not declare the capability. Properties report their worst error / bound
with `record(...)`.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass

import pytest

REDUCED_EXAMPLES = 10
DTYPE_NAMES = ("float32", "float16", "bfloat16", "float64")
_current = {"item": None, "stats": None}
_options = {}


def pytest_addoption(parser):
    group = parser.getgroup("flashcheck", "flashcheck: the attention kernel under test")
    group.addoption("--kernel", default="ours", metavar="TARGET",
                    help="ours | torch-sdpa-math | torch-sdpa-flash | torch-sdpa-efficient | torch-sdpa-cudnn | "
                         "flex | package.module:function | path/to/file.py:function (default: ours)")
    group.addoption("--layout", default=None, choices=("bhnd", "bnhd"),
                    help="tensor layout the kernel takes and returns (default: the function's `layout` "
                         "attribute, else bhnd)")
    group.addoption("--device", default=None, choices=("cpu", "cuda"),
                    help="device the kernel runs on (default: cuda when available, else cpu)")
    group.addoption("--dtype", default=None, metavar="LIST",
                    help="comma-separated input dtypes (default: float32)")
    group.addoption("--supports", default=None, metavar="LIST",
                    help="capabilities the kernel declares: causal,scale,gqa,lse,backward,mask,window "
                         "(default: what a built-in kernel supports, a user function's `supports` attribute, else nothing)")
    group.addoption("--head-dims", default=None, metavar="LIST",
                    help="head dimensions the kernel accepts (default: any)")
    group.addoption("--example-db", default=os.environ.get("FLASHCHECK_DB"), metavar="DIR",
                    help="directory of the hypothesis example database, shareable between runs and "
                         "machines (default: $FLASHCHECK_DB, else the profile's)")
    group.addoption("--budget", default="auto", choices=("auto", "reduced", "full"),
                    help="reduced: small shapes (N <= 65, d <= 64), the canonical examples and at most "
                         f"{REDUCED_EXAMPLES} drawn ones per property; auto (default): reduced for 'ours' through the "
                         "Triton interpreter on the CPU, full otherwise")
    group.addoption("--flashcheck-progress", action="store_true",
                    help="print one machine-readable line per finished test (used by `flashcheck validate`)")
    group.addoption("--flashcheck-report", default=None, metavar="PATH",
                    help="write one JSON record per test (outcome, worst error / bound, failure)")


@dataclass(frozen=True)
class Options:
    target: str
    layout: str | None
    device: str
    dtypes: tuple
    supports: frozenset | None
    head_dims: frozenset | None
    example_db: str | None
    reduced: bool = False


def _split(value):
    return [x for x in (value or "").replace(" ", "").split(",") if x]


def options_from(config) -> Options:
    dtypes = tuple(_split(config.getoption("--dtype")) or ["float32"])
    bad = [d for d in dtypes if d not in DTYPE_NAMES]
    if bad:
        raise pytest.UsageError(f"--dtype: unknown {bad}; expected a comma-separated subset of {DTYPE_NAMES}")
    device = config.getoption("--device")
    if device is None:
        try:
            import torch

            device = "cuda" if torch.cuda.is_available() else "cpu"
        except ImportError:
            device = "cpu"
    supports = config.getoption("--supports")
    head_dims = config.getoption("--head-dims")
    try:
        head_dims = frozenset(int(x) for x in _split(head_dims)) if head_dims else None
    except ValueError:
        raise pytest.UsageError(f"--head-dims: expected comma-separated integers, got {head_dims!r}")
    target = config.getoption("--kernel")
    budget = config.getoption("--budget")
    if budget == "auto":
        budget = "reduced" if target == "ours" and device == "cpu" else "full"
    return Options(target=target, layout=config.getoption("--layout"), device=device,
                   dtypes=dtypes, supports=frozenset(_split(supports)) if supports is not None else None,
                   head_dims=head_dims, example_db=config.getoption("--example-db"), reduced=budget == "reduced")


def pytest_report_header(config):
    opts = _options.get("opts")
    if opts is None:
        return None
    line = (f"flashcheck: kernel={opts.target} device={opts.device} dtypes={','.join(opts.dtypes)} "
            f"layout={opts.layout or 'default'}")
    if opts.reduced:
        line += (f"; REDUCED property set (N <= 65, d <= 64, canonical examples + at most {REDUCED_EXAMPLES} "
                 "drawn per property; --budget full for all)")
    return line


def pytest_configure(config):
    config.addinivalue_line("markers", "requires(*capabilities): skip unless the kernel under test declares them")
    opts = options_from(config)
    _options["opts"] = opts
    _options["records"] = []
    _options["config"] = config
    worker = getattr(config, "workerinput", {}).get("workerid")
    if worker and opts.device == "cuda":  # one GPU per pytest-xdist worker (gw0 -> cuda:0, ...)
        import torch

        if torch.cuda.device_count() > 1:
            torch.cuda.set_device(int(worker[2:]) % torch.cuda.device_count())
    if opts.supports is not None:
        from kernels.adapters import parse_supports

        try:
            parse_supports(opts.supports)
        except ValueError as exc:
            raise pytest.UsageError(f"--{exc}")


def options() -> Options:
    """The configured options (defaults when the plugin was not configured, e.g. outside pytest)."""
    if "opts" not in _options:
        _options["opts"] = Options(target="ours", layout=None, device="cpu", dtypes=("float32",), supports=None,
                                   head_dims=None, example_db=os.environ.get("FLASHCHECK_DB"))
    return _options["opts"]


def hypothesis_settings():
    """Settings every property uses on top of the loaded profile: the shared example database."""
    from hypothesis import settings

    opts = _options.get("opts")
    kw = {}
    if opts is not None and opts.reduced:
        kw["max_examples"] = min(REDUCED_EXAMPLES, settings.default.max_examples)
    if opts is not None and opts.example_db:
        from hypothesis.database import DirectoryBasedExampleDatabase

        kw["database"] = DirectoryBasedExampleDatabase(opts.example_db)
    return settings(**kw)


@pytest.fixture(scope="session")
def flashcheck_options() -> Options:
    return options()


_kernels = {}


def kernel_for(opts: Options):
    key = (opts.target, opts.supports, opts.layout)
    if key not in _kernels:
        from kernels.adapters import resolve

        try:
            kut = resolve(opts.target, supports=opts.supports, layout=opts.layout)
        except ValueError as exc:
            raise pytest.UsageError(str(exc))
        if opts.head_dims is not None:
            kut.head_dims = opts.head_dims
        _kernels[key] = kut
    return _kernels[key]


@pytest.fixture(scope="session")
def kernel_under_test(flashcheck_options):
    return kernel_for(flashcheck_options)


def is_property(path) -> bool:
    return "/tests/properties/" in str(path).replace(os.sep, "/")


def pytest_generate_tests(metafunc):
    if "dtype" in metafunc.fixturenames and is_property(metafunc.definition.path):
        dtypes = options().dtypes
        metafunc.parametrize("dtype", dtypes, ids=list(dtypes))


# Forward properties first, so that a fail-fast run (-x) names the root cause rather than a gradient.
ORDER = ("forward_o", "forward_lse", "finite", "masked_rows", "convex_hull", "permutation", "shift_invariance",
         "gqa", "mask_removal", "split_merge", "determinism", "backward_dq", "backward_dk", "backward_dv")


def _rank(item) -> int:
    stem = item.path.stem.removeprefix("test_")
    return ORDER.index(stem) if stem in ORDER else len(ORDER)


def pytest_collection_modifyitems(config, items):
    props = [i for i in items if is_property(i.path)]
    if props:
        first = items.index(props[0])
        rest = [i for i in items if not is_property(i.path)]
        items[:] = rest[:first] + sorted(props, key=_rank) + rest[first:]


def pytest_runtest_setup(item):
    marks = list(item.iter_markers("requires"))
    if not marks:
        return
    kut = kernel_for(options())
    for mark in marks:
        missing = [c for c in mark.args if c not in kut.supports]
        if missing:
            pytest.skip(f"needs {', '.join(repr(c) for c in missing)}, which {kut.name} does not declare "
                        f"(declared: {', '.join(sorted(kut.supports)) or 'nothing'}; see --supports)")


def record(*, ratio: float | None = None, info: str | None = None, **facts):
    """Called by a property: keep the worst error / bound over its examples, and facts to report."""
    stats = _current["stats"]
    if stats is None:
        return
    if ratio is not None and (stats["worst"] is None or ratio > stats["worst"] or ratio != ratio):
        stats["worst"] = float(ratio)
        stats["worst_info"] = info
    stats["examples"] += 1
    for key, value in facts.items():  # a boolean fact holds only if it held in every example
        stats[key] = (stats.get(key, True) and value) if isinstance(value, bool) else value


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    _current["item"] = item
    _current["stats"] = {"worst": None, "worst_info": None, "examples": 0}
    try:
        yield
    finally:
        item.user_properties.append(("flashcheck", dict(_current["stats"])))
        _current["item"] = _current["stats"] = None


def pytest_runtest_logreport(report):
    if "records" not in _options:
        return
    if report.when != "call" and not (report.skipped or report.failed):
        return
    stats = dict(next((v for k, v in report.user_properties if k == "flashcheck"), {}))
    text = None
    if report.failed:
        text = report.longreprtext
    elif report.skipped and isinstance(report.longrepr, tuple):
        text = report.longrepr[2]
    rec = {"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
           "duration": report.duration, "text": text, **stats}
    _options["records"].append(rec)
    config = _options.get("config")
    if config is not None and config.getoption("--flashcheck-progress") and not hasattr(config, "workerinput"):
        brief = {k: rec.get(k) for k in ("nodeid", "outcome", "worst")}
        sys.stdout.write("\nFLASHCHECK-PROGRESS " + json.dumps(brief) + "\n")
        sys.stdout.flush()


def pytest_sessionfinish(session, exitstatus):
    path = session.config.getoption("--flashcheck-report")
    if not path or hasattr(session.config, "workerinput"):
        return
    with open(path, "w") as f:
        json.dump({"records": _options.get("records", []), "exitstatus": int(exitstatus)}, f, indent=1)

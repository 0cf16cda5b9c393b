"""The flashcheck pytest plugin: the hypothesis profiles, options choosing the kernel under test, and
the bookkeeping `flashcheck validate` reads. Registered through the `pytest11` entry point
(`flashcheck.pytest_plugin`); in a checkout without installation `-p flashcheck.pytest_plugin` (the
project's pytest addopts) loads it. Run the suite with `pytest --pyargs flashcheck.properties`.

Options: ``--kernel TARGET`` (default ``ours``), ``--layout bhnd|bnhd``, ``--device cpu|cuda``,
``--dtype float32,float16,bfloat16``, ``--supports causal,scale,gqa,lse,backward,mask,window,deterministic``,
the declared domain (``--causal-alignment``, ``--head-dims``, ``--seq-multiple``, ``--min-n``,
``--max-n``, ``--square-only``, ``--gqa-ratios``; each also a function attribute),
``--example-db DIR`` (hypothesis example database shared between runs and machines; also
``FLASHCHECK_DB``), ``--flashcheck-report PATH`` (JSON with one entry per test: outcome, worst
error / bound, refusals, failure text).

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
from hypothesis import HealthCheck, settings
from hypothesis.errors import Unsatisfiable

from flashcheck.refusals import Features

REDUCED_EXAMPLES = 10
MAX_KEPT = 300  # refused/accepted inputs kept per test for describing the refused domain

# `ci` extends hypothesis's built-in ci profile (auto-loaded when CI is set): derandomized, no deadline.
# filter_too_much is suppressed because refused and discarded inputs are counted and reported here.
PROFILES = ("ci", "dev", "thorough")
settings.register_profile("ci", parent=settings.get_profile("ci"), max_examples=10,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                 HealthCheck.filter_too_much])
settings.register_profile("dev", max_examples=50, deadline=None,
                          suppress_health_check=[HealthCheck.filter_too_much])
settings.register_profile("thorough", max_examples=1000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
# --hypothesis-profile (hypothesis's own plugin, configured later) overrides this default.
settings.load_profile(os.environ.get("FLASHCHECK_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))


def _no_source_constants() -> bool:
    """Keep the suite's draws independent of the source code imported so far; True where done.

    Hypothesis (6.155 here; since 2025) draws, with probability 0.05 per integer/float/string choice, a
    literal from the source of the *local* modules in `sys.modules` when it draws (not site-packages,
    stdlib or test files; for integers |v| >= 100). The suite's seeds
    (`st.integers(0, 2**32 - 1)`) are in range of every such literal, so which examples a derandomized
    property draws depended on flashcheck's own source (b8a1e45's new forward.py literals 126 and 1023
    changed them: the warm-up's dry run, which never imports the bounds, then drew others than the judged
    run), on the kernel file's, on the properties and modules run or imported before it (-k, xdist),
    and on whether flashcheck is installed in site-packages (then nothing is collected). The pool is
    made empty (hypothesis's own constants, e.g. 0 and 2**k +- 1, stay). Hypothesis internals: where they
    are not found, nothing is changed (tests/test_validate_cli.py's warm-up test then tells)."""
    try:
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal.constants_ast import Constants
    except ImportError:
        return False
    if not callable(getattr(providers, "_get_local_constants", None)):
        return False
    empty = Constants()
    providers._get_local_constants = lambda: empty
    cache = getattr(providers, "CONSTANTS_CACHE", None)
    if cache is not None:
        cache.cache.clear()
    return True


NO_SOURCE_CONSTANTS = _no_source_constants()
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
    group.addoption("--causal-alignment", default=None, choices=("top-left", "bottom-right"),
                    help="the diagonal causal=True means when Nq != Nk (default: the function's "
                         "`causal_alignment` attribute, else top-left, torch SDPA's convention)")
    group.addoption("--head-dims", default=None, metavar="LIST",
                    help="head dimensions the kernel accepts (default: its `head_dims` attribute, else any)")
    group.addoption("--seq-multiple", default=None, type=int, metavar="M",
                    help="Nq and Nk multiples of M (default: `seq_multiple` attribute, else 1)")
    group.addoption("--min-n", default=None, type=int, help="smallest Nq, Nk accepted (`min_n`)")
    group.addoption("--max-n", default=None, type=int, help="largest Nq, Nk accepted (`max_n`)")
    group.addoption("--square-only", action="store_true", default=None,
                    help="the kernel takes Nq = Nk only (`square_only`)")
    group.addoption("--gqa-ratios", default=None, metavar="LIST",
                    help="accepted Hq / Hkv ratios (`gqa_ratios`, default: any)")
    group.addoption("--example-db", default=os.environ.get("FLASHCHECK_DB"), metavar="DIR",
                    help="directory of the hypothesis example database, shareable between runs and "
                         "machines (default: $FLASHCHECK_DB, else the profile's)")
    group.addoption("--budget", default="auto", choices=("auto", "reduced", "full"),
                    help="reduced: small shapes (N <= 65, d <= 64), the canonical examples and at most "
                         f"{REDUCED_EXAMPLES} drawn ones per property; auto (default): reduced for 'ours' through the "
                         "Triton interpreter on the CPU, full otherwise")
    group.addoption("--flashcheck-progress", action="store_true",
                    help="print one machine-readable line per finished test (used by `flashcheck validate`)")
    group.addoption("--flashcheck-dry-run", default=None, metavar="PATH",
                    help="run the suite on an exact float64 stand-in for the kernel (same capabilities, domain, "
                         "precision model), judging nothing, and record each call's signature to PATH "
                         "(flashcheck.warmup)")
    group.addoption("--flashcheck-report", default=None, metavar="PATH",
                    help="write one JSON record per test (outcome, worst error / bound, failure)")


@dataclass(frozen=True)
class Options:
    target: str
    layout: str | None
    device: str
    dtypes: tuple | None  # None: the kernel's declared dtypes, else float32
    supports: frozenset | None
    domain: tuple  # (field, value) overrides of the kernel's declared Domain
    example_db: str | None
    reduced: bool = False
    dry_run: str | None = None  # record call signatures on a stand-in instead of running the kernel


def _split(value):
    return [x for x in (value or "").replace(" ", "").split(",") if x]


DOMAIN_OPTIONS = (("causal_alignment", "--causal-alignment"), ("head_dims", "--head-dims"),
                  ("seq_multiple", "--seq-multiple"), ("min_n", "--min-n"), ("max_n", "--max-n"),
                  ("square_only", "--square-only"), ("gqa_ratios", "--gqa-ratios"))


def options_from(config) -> Options:
    dtypes = tuple(_split(config.getoption("--dtype"))) or None
    bad = [d for d in dtypes or () if d not in DTYPE_NAMES]
    if bad:
        raise pytest.UsageError(f"--dtype: unknown {bad}; expected a comma-separated subset of {DTYPE_NAMES}")
    device = config.getoption("--device")
    if device is None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    supports = config.getoption("--supports")
    domain = tuple((name, config.getoption(flag)) for name, flag in DOMAIN_OPTIONS
                   if config.getoption(flag) is not None)
    target = config.getoption("--kernel")
    budget = config.getoption("--budget")
    if budget == "auto":
        budget = "reduced" if target in ("ours", "ours-accurate") and device == "cpu" else "full"
    return Options(target=target, layout=config.getoption("--layout"), device=device,
                   dtypes=dtypes, supports=frozenset(_split(supports)) if supports is not None else None,
                   domain=domain, example_db=config.getoption("--example-db"), reduced=budget == "reduced",
                   dry_run=config.getoption("--flashcheck-dry-run"))


def dtypes_of(opts: Options) -> tuple:
    """The dtypes the properties run in: --dtype, else the kernel's declared ones, else float32."""
    if opts.dtypes:
        return opts.dtypes
    declared = kernel_for(opts).domain.dtypes
    return ("float32",) if not declared or "float32" in declared else (declared[0],)


def pytest_report_header(config):
    opts = _options.get("opts")
    if opts is None:
        return None
    line = (f"flashcheck: kernel={opts.target} device={opts.device} dtypes={','.join(opts.dtypes or ('default',))} "
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
        from flashcheck.adapters import parse_supports

        try:
            parse_supports(opts.supports)
        except ValueError as exc:
            raise pytest.UsageError(f"--{exc}")
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped cleanly without one)")


def options() -> Options:
    """The configured options (defaults when the plugin was not configured, e.g. outside pytest)."""
    if "opts" not in _options:
        _options["opts"] = Options(target="ours", layout=None, device="cpu", dtypes=None, supports=None,
                                   domain=(), example_db=os.environ.get("FLASHCHECK_DB"))
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
    key = (opts.target, opts.supports, opts.layout, opts.device, opts.domain, opts.dry_run)
    if key not in _kernels:
        from flashcheck.adapters import resolve

        try:
            kernel = resolve(opts.target, supports=opts.supports, layout=opts.layout, device=opts.device,
                             **dict(opts.domain))
        except ValueError as exc:
            raise pytest.UsageError(str(exc))
        if opts.dry_run:
            from flashcheck.warmup import stand_in_for

            kernel = stand_in_for(kernel, opts.dry_run)
        _kernels[key] = kernel
    return _kernels[key]


@pytest.fixture(scope="session")
def kernel_under_test(flashcheck_options):
    return kernel_for(flashcheck_options)


def is_property(path) -> bool:
    return "/flashcheck/properties/" in str(path).replace(os.sep, "/")


def pytest_generate_tests(metafunc):
    if "dtype" in metafunc.fixturenames and is_property(metafunc.definition.path):
        dtypes = dtypes_of(options())
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


def record(*, ratio: float | None = None, info: str | None = None):
    """Called by a property: keep the worst error / bound over its examples."""
    stats = _current["stats"]
    if stats is None:
        return
    if ratio is not None and (stats["worst"] is None or ratio > stats["worst"] or ratio != ratio):
        stats["worst"] = float(ratio)
        stats["worst_info"] = info


def record_accepted(case, dtype: str, backward: bool = False):
    """The kernel ran on this input, its backward when `backward` (kept to tell the refused domain from the
    accepted one)."""
    stats = _current["stats"]
    if stats is None:
        return
    stats["examples"] += 1
    if len(stats["accepted"]) < MAX_KEPT:
        f = Features.of(case, dtype, backward).to_dict()
        if f not in stats["accepted"]:
            stats["accepted"].append(f)


def record_refusal(case, dtype: str, refusal, backward: bool = False):
    stats = _current["stats"]
    if stats is None:
        return
    stats["refused"] += 1
    if len(stats["refusals"]) < MAX_KEPT:
        error = str(refusal)[:400]
        stats["refusals"].append(Features.of(case, dtype, backward).to_dict() | {"error": error})


def record_discard(reason: str):
    stats = _current["stats"]
    if stats is None:
        return
    stats["discarded"][reason] = stats["discarded"].get(reason, 0) + 1


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    _current["item"] = item
    _current["stats"] = {"worst": None, "worst_info": None, "examples": 0, "refused": 0, "refusals": [],
                         "accepted": [], "discarded": {}}
    try:
        yield
    finally:
        item.user_properties.append(("flashcheck", dict(_current["stats"])))
        _current["item"] = _current["stats"] = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A property whose every input was refused (or discarded) ends in hypothesis's Unsatisfiable: that is
    the outcome 'refused' (or a skip saying why), never a pass and not a wrong answer."""
    outcome = yield
    report = outcome.get_result()
    if call.when != "call" or call.excinfo is None or not call.excinfo.errisinstance(Unsatisfiable):
        return
    stats = next((v for k, v in item.user_properties if k == "flashcheck"), None)
    if stats is None:
        return
    if stats["refused"] and stats["examples"]:
        # the explicit (canonical) examples ran and held; every drawn input was refused: a pass on
        # those examples, the refusals listed with it
        report.outcome, report.longrepr = "passed", None
        return
    if stats["refused"] and not stats["examples"]:
        stats["every_input_refused"] = True
        errors = sorted({r["error"] for r in stats["refusals"]})
        reason = f"refused: the kernel raised on all {stats['refused']} inputs drawn ({'; '.join(errors[:2])})"
    else:
        reason = ("every input drawn was discarded: " +
                  "; ".join(f"{n} x {why}" for why, n in stats["discarded"].items()) +
                  (f"; {stats['refused']} refused" if stats["refused"] else ""))
    report.outcome = "skipped"
    report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {reason}")


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
    outcome = "refused" if stats.get("every_input_refused") else report.outcome
    rec = {"nodeid": report.nodeid, "when": report.when, "outcome": outcome,
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

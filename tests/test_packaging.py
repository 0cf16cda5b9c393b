"""Packaging (issue 9): the installed flashcheck has one top-level import name, `flashcheck`, and
validates a kernel from any directory.

The checkout keeps its layout (reference/ kernels/ proofs/ beside flashcheck/): pyproject's package-dir
installs them as flashcheck.reference, flashcheck.kernels, flashcheck.proofs, and flashcheck/__init__.py
resolves the same names in a checkout. Checked from the files: the package configuration and the
import spelling. Checked by installing, each in a fresh virtualenv that sees this interpreter's packages
(no index, nothing downloaded), then running `flashcheck validate` from a directory outside the checkout:
a real wheel (~10 s, default suite) and an editable install (~10 s, slow tier):

    PYTHONPATH=$PWD .venv/bin/python -m pytest -q -m "slow or not slow" tests/test_packaging.py
"""
from __future__ import annotations

import ast
import fnmatch
import importlib.metadata
import importlib.util
import json
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("reference", "kernels", "proofs")
CODE_DIRS = ("flashcheck", *PARTS, "tests", "bench")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]
VERSION = PYPROJECT["project"]["version"]


def source_dir(package: str) -> Path:
    """The checkout directory setuptools installs `package` from (the longest package-dir prefix)."""
    mapping = SETUPTOOLS.get("package-dir", {})
    parts = package.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in mapping:
            return ROOT.joinpath(mapping[prefix], *parts[n:])
    return ROOT.joinpath(*parts)


# ---- the default suite: configuration and spelling, read from the files ------------------------------

def test_the_wheel_installs_one_top_level_import_name():
    """Nothing installed beside flashcheck: no `kernels` (Hugging Face's package has that name on the
    index), no `reference`, `proofs` or `tests` to shadow or be shadowed by another distribution."""
    assert {p.split(".")[0] for p in SETUPTOOLS["packages"]} == {"flashcheck"}, SETUPTOOLS["packages"]
    assert {p.split(".")[0] for p in SETUPTOOLS.get("package-dir", {})} <= {"flashcheck"}
    assert {f"flashcheck.{part}" for part in PARTS} <= set(SETUPTOOLS["packages"])


def test_every_package_directory_is_listed_and_its_data_shipped():
    """pyproject lists packages explicitly (package-dir cannot be combined with discovery): a package
    directory missing from the list would be missing from the wheel, and the measured hardware
    constants the bounds read must be package data."""
    listed = {p: source_dir(p) for p in SETUPTOOLS["packages"]}
    missing_dirs = {p: str(d) for p, d in listed.items() if not d.is_dir()}
    assert not missing_dirs, f"listed packages without a directory: {missing_dirs}"
    on_disk = {init.parent for top in ("flashcheck", *PARTS) for init in (ROOT / top).rglob("__init__.py")
               if "__pycache__" not in init.parts}
    unlisted = sorted(str(d.relative_to(ROOT)) for d in on_disk - set(listed.values()))
    assert not unlisted, f"package directories missing from pyproject's [tool.setuptools] packages: {unlisted}"

    from flashcheck.proofs.hardware import H100_JSON

    data = SETUPTOOLS.get("package-data", {})
    owner = max((p for p, d in listed.items() if H100_JSON.is_relative_to(d)), key=len)
    rel = H100_JSON.relative_to(listed[owner]).as_posix()
    assert any(fnmatch.fnmatch(rel, g) for g in data.get(owner, ())), \
        f"{H100_JSON.relative_to(ROOT)} is read by the bounds but not package data of {owner}: {data}"


def test_no_code_imports_a_directory_by_its_bare_name():
    """One module object per file: every import of a part spells flashcheck.<part> (a bare `kernels`
    would import a second copy in a checkout and fail in an installed flashcheck)."""
    bad = []
    for top in CODE_DIRS:
        for path in sorted((ROOT / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    names = [node.module]
                else:
                    continue
                bad += [f"{path.relative_to(ROOT)}:{node.lineno}: {n}" for n in names if n.split(".")[0] in PARTS]
    assert not bad, "imports of bare part names (write flashcheck.<part>):\n" + "\n".join(bad)


@pytest.mark.parametrize("part", PARTS)
def test_a_bare_directory_name_refuses_to_load(part):
    """In a checkout the repository root is on sys.path, so `import kernels` would find kernels/ as a
    second module; the part refuses, naming the import to write."""
    proc = subprocess.run([sys.executable, "-c", f"import {part}"], cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=60)
    assert proc.returncode != 0 and f"ImportError: import flashcheck.{part}, not {part}" in proc.stderr, proc.stderr


# ---- the slow tier: a real wheel and an editable install, run outside the checkout --------------------

def clean_env() -> dict:
    """The environment of a user outside the checkout: no PYTHONPATH pointing into it."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    return dict(env, OMP_NUM_THREADS="1", PIP_DISABLE_PIP_VERSION_CHECK="1")


def run(cmd, *, cwd, timeout=300) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=clean_env(), capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n" \
                                 f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture
def source(tmp_path) -> Path:
    """A copy of what the build reads (tests/ included: it must stay out of the wheel), so building
    leaves no build/ or egg-info in the checkout and no stale build/lib reaches the wheel."""
    for dist, least, why in (("setuptools", (64,), "the build backend, offline (--no-build-isolation)"),
                             ("pip", (22, 3), "pip --python: installs into a virtualenv without pip")):
        have = importlib.util.find_spec(dist) and importlib.metadata.version(dist)
        if not have or tuple(int(x) for x in have.split(".")[:len(least)]) < least:
            pytest.skip(f"needs {dist} >= {'.'.join(map(str, least))} ({why}); found {have or 'none'}")
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for name in ("flashcheck", *PARTS, "tests"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return src


def fresh_venv(path: Path) -> tuple[Path, Path]:
    """(python, site-packages) of a new virtualenv that sees this interpreter's installed packages
    (torch, triton, numpy, ...) after its own. Not `--system-site-packages`: where this interpreter is
    itself a virtualenv (the project's .venv), that would reach the base Python's packages, not these."""
    try:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, capture_output=True,
                       timeout=120)
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot create a virtualenv here: {exc.stderr.decode()[-300:]}")
    python = path / "bin" / "python"
    purelib = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                       cwd=path).stdout.strip())
    deps = [*site.getsitepackages(), *([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])]
    (purelib / "_flashcheck_test_deps.pth").write_text("\n".join(p for p in deps if os.path.isdir(p)) + "\n")
    return python, purelib


def pip_install(python: Path, *args, cwd: Path) -> None:
    # --no-index: nothing from the index; --ignore-installed: the dependency directories may hold
    # another flashcheck (the checkout's editable install), which is neither uninstalled nor reused
    run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index",
         "--ignore-installed", *args], cwd=cwd)


WHERE = """
import importlib.util, json, flashcheck
names = ["flashcheck.reference", "flashcheck.kernels", "flashcheck.proofs.bounds", "flashcheck.properties",
         "kernels", "reference", "proofs", "tests"]
specs = {n: importlib.util.find_spec(n) for n in names}
print(json.dumps({"path": list(flashcheck.__path__), **{n: s and s.origin for n, s in specs.items()}}))
"""


def resolved(python: Path, cwd: Path) -> dict:
    return json.loads(run([python, "-c", WHERE], cwd=cwd).stdout)


def validate(python: Path, cwd: Path) -> str:
    """The smallest real validate: torch's math backend on the CPU, one property."""
    cli = python.parent / "flashcheck"
    proc = run([cli, "validate", "torch-sdpa-math", "--device", "cpu", "-k", "o_within", "-q"], cwd=cwd)
    assert "1 passed, 0 failed" in proc.stdout, proc.stdout
    return proc.stdout


def assert_only_flashcheck_installed(where: dict, root: Path) -> None:
    """The three parts resolve under `root`; a bare name resolves to nothing of ours."""
    for name in ("flashcheck.reference", "flashcheck.kernels", "flashcheck.proofs.bounds"):
        assert where[name] and Path(where[name]).is_relative_to(root), (name, where[name], root)
    for name in ("kernels", "reference", "proofs", "tests"):
        assert where[name] is None or not Path(where[name]).is_relative_to(root), (name, where[name])


def test_a_wheel_installs_only_flashcheck_and_validates_from_any_directory(source, tmp_path):
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
         "-w", dist, source], cwd=tmp_path)
    (wheel,) = dist.glob("flashcheck-*.whl")
    files = zipfile.ZipFile(wheel).namelist()
    assert {f.split("/")[0] for f in files} == {"flashcheck", f"flashcheck-{VERSION}.dist-info"}
    for f in ("flashcheck/kernels/attention.py", "flashcheck/reference/attention.py",
              "flashcheck/proofs/bounds/__init__.py", "flashcheck/proofs/measurements/h100.json",
              "flashcheck/proofs/bounds.md", "flashcheck/properties/test_forward_o.py"):
        assert f in files, f
    entry_points = zipfile.ZipFile(wheel).read(f"flashcheck-{VERSION}.dist-info/entry_points.txt").decode()
    assert "[pytest11]" in entry_points and "flashcheck = flashcheck.cli:main" in entry_points, entry_points

    python, purelib = fresh_venv(tmp_path / "venv")
    pip_install(python, wheel, cwd=tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = resolved(python, elsewhere)
    assert where["path"] == [str(purelib / "flashcheck")], where["path"]  # installed: no checkout path
    assert_only_flashcheck_installed(where, purelib)
    validate(python, elsewhere)


@pytest.mark.slow
def test_an_editable_install_resolves_the_same_names_to_the_checkout(source, tmp_path):
    python, purelib = fresh_venv(tmp_path / "venv")
    pip_install(python, "--no-build-isolation", "-e", source, cwd=tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = resolved(python, elsewhere)
    assert where["flashcheck.kernels"] == str(source / "kernels" / "__init__.py"), where
    assert_only_flashcheck_installed(where, source)
    validate(python, elsewhere)

"""flashcheck: numerically verified FlashAttention (front door: `python -m flashcheck`)."""
import os as _os

__version__ = "0.1.0"

# One installed import name (issue 9). The wheel installs the checkout's reference/, kernels/ and
# proofs/ as flashcheck.reference, flashcheck.kernels, flashcheck.proofs (pyproject's package-dir), so
# nothing it installs can shadow or be shadowed by another distribution's `kernels` or `reference`. In
# a checkout (PYTHONPATH=repo root, or `pip install -e .`) those directories sit beside this package
# instead: the repository root joins this package's search path, so the same names resolve to the same
# files there. Nothing imports the bare top-level names (one module object per file; the parts'
# __init__ refuse to load under them). Stays light: `import flashcheck.reference` pulls in no torch.
_PARTS = ("reference", "kernels", "proofs")
_here = _os.path.dirname(_os.path.abspath(__file__))
_root = _os.path.dirname(_here)
if not any(_os.path.isdir(_os.path.join(_here, p)) for p in _PARTS) and \
        all(_os.path.isfile(_os.path.join(_root, p, "__init__.py")) for p in _PARTS):
    __path__.append(_root)
del _here, _root

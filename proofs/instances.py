"""Random and extreme instances for the lemmas' numeric checks, and mpmath comparisons at >= 50 digits.

Every `check_numeric()` evaluates both sides of its lemma in mpmath with DPS = 60 significant digits
and requires agreement to TOL = 10^-50 (relative to the size of the quantities), on random instances
and on extreme ones (logits of +-1e4 that overflow float64 exp, ties, a single dominant entry).
"""
from __future__ import annotations

import mpmath as mp
import numpy as np

DPS = 60
TOL = mp.mpf(10) ** -50


def logit_vectors(n: int, seed: int = 0, count: int = 4):
    """`count` random logit vectors of length n plus extreme ones, as lists of mpf."""
    rng = np.random.default_rng(seed)
    out = [list(rng.standard_normal(n) * s) for s in (1.0, 10.0)[: max(1, count // 2)]]
    out += [list(rng.standard_normal(n) * 3.0) for _ in range(max(0, count - len(out)))]
    out.append([1e4 + i for i in range(n)])  # overflows float64 exp
    out.append([-1e4 - 3.0 * i for i in range(n)])  # underflows float64 exp
    out.append([0.5] * n)  # ties
    out.append([0.0] * (n - 1) + [800.0])  # one dominant entry
    with mp.workdps(DPS):
        return [[mp.mpf(float(x)) for x in row] for row in out]


def value_rows(n: int, dv: int, seed: int = 1):
    """n value rows of width dv (random, one large outlier), as lists of lists of mpf."""
    rng = np.random.default_rng(seed)
    v = rng.standard_normal((n, dv))
    v[0, 0] = 1e3
    with mp.workdps(DPS):
        return [[mp.mpf(float(x)) for x in row] for row in v]


def close(a, b, scale=1) -> bool:
    """|a - b| <= TOL * max(1, |a|, |b|, scale), elementwise over nested lists."""
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(close(x, y, scale) for x, y in zip(a, b))
    with mp.workdps(DPS):
        a, b = mp.mpf(a), mp.mpf(b)
        if mp.isinf(a) or mp.isinf(b):
            return a == b
        return abs(a - b) <= TOL * max(1, abs(a), abs(b), abs(mp.mpf(scale)))


def assert_close(a, b, what: str, scale=1) -> None:
    if not close(a, b, scale):
        raise AssertionError(f"{what}: the two sides differ beyond 1e-50 (mpmath, {DPS} digits)")


def softmax(x):
    """Exact softmax of a list of mpf (the definition, no shift)."""
    e = [mp.exp(t) for t in x]
    s = mp.fsum(e)
    return [t / s for t in e]


def logsumexp(x):
    return mp.log(mp.fsum(mp.exp(t) for t in x))


def assert_symbolic_zero(expr, what: str) -> None:
    """sympy: expr simplifies to 0 (an identity in its symbols), else AssertionError."""
    import sympy as sp

    if sp.simplify(sp.expand(expr)) != 0 and sp.simplify(expr) != 0:
        raise AssertionError(f"{what}: not a symbolic identity, residual {sp.simplify(expr)}")


def _pull_constants(expr):
    """Each Sum(f, (j, lo, hi)) as sum_k c_k Sum(g_k): the factors of f not involving j taken out."""
    import sympy as sp

    def one(total):
        (j, lo, hi), = total.limits
        out = 0
        for term in sp.Add.make_args(sp.expand(sp.powsimp(total.function), power_exp=True, mul=True)):
            factors = sp.Mul.make_args(term)
            out += sp.Mul(*[f for f in factors if not f.has(j)]) * sp.Sum(sp.Mul(*[f for f in factors if f.has(j)]),
                                                                       (j, lo, hi))
        return out

    return expr.replace(lambda e: isinstance(e, sp.Sum), one)


def assert_sum_identity(expr, what: str) -> None:
    """expr, built from sums over index ranges of symbolic length, is 0 for every value of the summands:
    constants are taken out of each sum, then every distinct sum (its summand and range) becomes an
    independent positive symbol and the rest must simplify to 0. Stronger than needed (it ignores
    relations between the sums), so a pass is a proof; a range that overlaps or misses keys is a
    different symbol and fails."""
    import sympy as sp

    e = _pull_constants(expr)
    sums = sorted(e.atoms(sp.Sum), key=sp.default_sort_key)
    atoms = {t: sp.Symbol(f"Sigma_{i}", positive=True) for i, t in enumerate(sums)}
    residual = sp.simplify(e.xreplace(atoms))
    if residual != 0:
        raise AssertionError(f"{what}: not an identity over symbolic tile sizes, residual {residual} "
                             f"with {', '.join(f'{v} = {k}' for k, v in atoms.items())}")


def floats(x) -> np.ndarray:
    """A (nested) list of mpf as a float64 array: the values a float64 reference receives."""
    return np.array(x, dtype=np.float64) if isinstance(x, np.ndarray) else np.array(
        [[float(t) for t in row] for row in x] if x and isinstance(x[0], (list, tuple)) else [float(t) for t in x])


def attention_inputs(seed: int, B=1, Hq=2, Hkv=1, Nq=6, Nk=9, d=4, dv=3, logit_scale=1.0):
    """Small float64 attention inputs (GQA by default) with one outlier in V."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, Hq, Nq, d)) * logit_scale
    k = rng.standard_normal((B, Hkv, Nk, d))
    v = rng.standard_normal((B, Hkv, Nk, dv))
    v[0, 0, 0, 0] = 1e3
    do = rng.standard_normal((B, Hq, Nq, dv))
    return q, k, v, do


def within(name: str, got, exact, bound) -> None:
    """|got - exact| <= bound elementwise (equal where exact is infinite), else AssertionError."""
    got, exact, bound = (np.asarray(a, dtype=np.float64) for a in (got, exact, bound))
    fin = np.isfinite(exact)
    if not np.array_equal(got[~fin], exact[~fin]):
        raise AssertionError(f"{name}: infinite entries differ")
    err = np.abs(got[fin] - exact[fin])
    if not np.all(err <= bound[fin]):
        i = int(np.argmax(err - bound[fin]))
        raise AssertionError(f"{name}: error {err[i]:.3g} exceeds the derived bound {bound[fin][i]:.3g}")

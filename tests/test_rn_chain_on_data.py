"""backward._rn_chain_on_data: the fp32 round-to-nearest chains of the backward's accumulations (dQ over the keys, dK
and dV over the query rows) evaluated on the data (proofs/bounds.md sec. 8, "The accumulation chains on the data")."""
import numpy as np
import pytest

from flashcheck.proofs.bounds.backward import _rn_chain_on_data
from flashcheck.proofs.fma_chain import fma_step

U = 2.0**-24


def _f32(x):
    return np.asarray(x, dtype=np.float32).astype(np.float64)


def _chain_error(x):
    """sum_s e_s of acc <- RN32(acc + x_s) from 0, exactly (fma_step: one rounding of an exact float64 summand)."""
    acc = np.zeros(x.shape[:-1])
    total = np.zeros(x.shape[:-1])
    for s in range(x.shape[-1]):
        new = fma_step(acc, x[..., s])
        total += new - acc - x[..., s]  # exact: a rounding error of one fp32 step
        acc = new
    return total


def _summands(family, rng, m=32, n=1500):
    a = _f32(rng.standard_normal((m, n)))
    if family == "random":
        return a * _f32(rng.standard_normal((m, n)))
    # one residue under half an ulp shared by every summand: every step rounds the same way (the coherent-residue
    # adversaries, bench/adversaries/constant_residue_*.py)
    t = _f32(np.floor((1.0 + rng.random((m, n))) * 2**20) / 2**20 + 0.75 * 2.0**-23)
    if family == "residue":
        return t
    if family == "residue_signs":
        return t * np.sign(a)
    if family == "cancel":
        return np.concatenate([t[:, : n // 2], -t[:, : n // 2]], axis=-1)
    if family == "tiny":  # subnormal partial sums
        return _f32(a * 1e-39) * 0.5
    raise ValueError(family)


FAMILIES = ["random", "residue", "residue_signs", "cancel", "tiny"]


@pytest.mark.parametrize("family", FAMILIES)
def test_the_chain_bound_holds_on_exact_summands(family):
    x = _summands(family, np.random.default_rng(1))
    err, bound = np.abs(_chain_error(x)), _rn_chain_on_data(x, np.zeros_like(x), U)
    worst = np.argmax(err / bound)
    assert (err <= bound).all(), f"{family}: |sum e| {err[worst]:.3g} > bound {bound[worst]:.3g} (chain {worst})"


@pytest.mark.parametrize("family", FAMILIES)
def test_the_chain_bound_holds_for_any_summand_in_its_interval(family):
    """The bound reads intervals [xm - xw, xm + xw]: the true summands anywhere inside (here 2^-30 relative)."""
    rng = np.random.default_rng(2)
    x = _summands(family, rng)
    w = np.abs(x) * 2.0**-30
    xm = x + w * rng.uniform(-1.0, 1.0, x.shape)
    err, bound = np.abs(_chain_error(x)), _rn_chain_on_data(xm, w, U)
    assert (err <= bound).all(), f"{family}: max |sum e| / bound {np.max(err / bound):.3g}"


def test_the_chain_bound_follows_coherent_residues():
    """Sharp where every step is known: within 25% of the error on the constant-residue chains (the model it replaces
    was exceeded 7.5x by them inside the backward)."""
    x = _summands("residue", np.random.default_rng(3))
    ratio = _rn_chain_on_data(x, np.zeros_like(x), U) / np.abs(_chain_error(x))
    assert np.median(ratio) < 1.25, f"median bound / error {np.median(ratio):.3g}"


def test_a_chain_bound_that_drops_the_known_residues_signs_is_caught(monkeypatch):
    """Planted bug: the known steps' centres summed as |ce| each with a sign flipped on every other step (as if the
    residues cancelled). The coherent-residue chains exceed it."""
    import flashcheck.proofs.bounds.forward as fwd

    real = fwd._rn_residue

    def planted(xc, xw, half_g):
        known, ce, he = real(xc, xw, half_g)
        return known, ce * np.where(np.arange(ce.size) % 2, -1.0, 1.0).reshape(ce.shape), he

    monkeypatch.setattr(fwd, "_rn_residue", planted)
    x = _summands("residue", np.random.default_rng(3))
    assert np.any(np.abs(_chain_error(x)) > _rn_chain_on_data(x, np.zeros_like(x), U))


def _final_acc(x):
    acc = np.zeros(x.shape[:-1])
    for s in range(x.shape[-1]):
        acc = fma_step(acc, x[..., s])
    return acc


@pytest.mark.parametrize("family", FAMILIES)
def test_the_enclosure_holds_the_chains_result(family):
    """enclosure=True: the chain's final accumulator lies in centre +- radius for any summands in their intervals."""
    rng = np.random.default_rng(4)
    x = _summands(family, rng)
    w = np.abs(x) * 2.0**-26
    centre, radius = _rn_chain_on_data(x + w * rng.uniform(-1.0, 1.0, x.shape), w, U, enclosure=True)
    acc = _final_acc(x)
    worst = np.argmax(np.abs(acc - centre) / radius)
    assert (np.abs(acc - centre) <= radius).all(), (
        f"{family}: acc {acc[worst]!r} outside {centre[worst]!r} +- {radius[worst]:.3g} (chain {worst})")


def test_an_enclosure_without_the_residues_is_caught(monkeypatch):
    """Planted bug: the residue steps' centres left out of the enclosure's centre (as if each step added its summand
    alone, radius 0 there). The coherent-residue chains leave it."""
    import flashcheck.proofs.bounds.forward as fwd

    real = fwd._rn_residue
    monkeypatch.setattr(fwd, "_rn_residue", lambda xc, xw, half_g: (lambda k, ce, he: (k, 0.0 * ce, he))(
        *real(xc, xw, half_g)))
    x = _summands("residue", np.random.default_rng(3))
    centre, radius = _rn_chain_on_data(x, np.zeros_like(x), U, enclosure=True)
    assert np.any(np.abs(_final_acc(x) - centre) > radius)

"""The backward's fp32 accumulation chains on heads with masked entries (proofs/bounds.md sec. 8, "The accumulation
chains on the data", masked heads; issue 8).

The kernels visit each outer block's inner tiles in their own order: partial tiles (some entry of block x tile
masked) first, then the full ones ascending (kernels/tiles.py). Here: the emulation (proofs/emulation.py) visits them
as the Triton kernel does (probes whose result tells the order, TRITON_INTERPRET=1).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from tests.test_kernel_support import needs_kernel

N, D, TILE = 64, 16, 16  # the interpreter's tiles are 16 x 16 (kernel_config(interpret=True))
BIG = 2.0**40


@dataclass(frozen=True)
class Probe:
    """Inputs whose gradient column `col` tells the order of one accumulation (exact small integers, fp32 values):
    three products land in it, +x, -x (equal dS, +-2^40 on the probe column) and a small y in a third tile. The
    accumulator keeps y exactly where y comes after both, and loses it (|y| < half an ulp of x) where y comes first;
    every other product of the column is 0 (its operand is 0 there)."""
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    do: np.ndarray
    grad: int  # 0: dQ (the dQ kernel: query blocks over key tiles), 1: dK (the dK/dV kernel: key blocks over queries)
    col: int


def _dq_probe() -> Probe:
    """dQ_i1 = sum_j dS_ij k_j1: keys 1 and 17 alike (v, logits: q = 0, uniform P) with k = +-2^40, key 33 with 1.
    Under window (None, 40) query block 0 (rows 0..15) visits its partial key tiles 32 and 48 first, then 0 and 16:
    y (key 33) first, lost; the later query blocks keep it."""
    rng = np.random.default_rng(0)
    q, k = np.zeros((1, 1, N, D)), np.zeros((1, 1, N, D))
    v, do = (rng.integers(-8, 9, (1, 1, N, D)).astype(float) for _ in range(2))
    v[0, 0, 17] = v[0, 0, 1]
    k[0, 0, [1, 17, 33], 1] = BIG, -BIG, 1.0
    return Probe(q, k, v, do, 0, 1)


def _dk_probe() -> Probe:
    """dK_j2 = sum_i dS_ij q_i2: keys 0 and 1 dominant (every other P underflows to 0: P = 1/2, 1/2 on the rows that
    see both), rows 1, 17, 33 alike (dO) with q = +-2^40, 1 on column 2 (k = 0 there). Under window (40, None) key
    block 0 visits its partial query tiles 32 and 48 first: y (row 33) first, lost."""
    rng = np.random.default_rng(0)
    q, k = np.zeros((1, 1, N, D)), np.zeros((1, 1, N, D))
    q[..., 0] = 1.0
    k[..., 0] = -512.0
    k[0, 0, :2, 0] = 512.0
    v, do = (rng.integers(-8, 9, (1, 1, N, D)).astype(float) for _ in range(2))
    do[0, 0, [17, 33]] = do[0, 0, 1]
    q[0, 0, [1, 17, 33], 2] = BIG, -BIG, 1.0
    return Probe(q, k, v, do, 1, 2)


def _window_mask(window) -> np.ndarray:
    from flashcheck.reference.masks import visibility

    return visibility(1, 1, N, N, window=window)


# (probe, masking): the band (window), the same visibility as a dense mask (no tile lists: the kernel's band-free
# order, ragged tile first, then ascending) and as a block-sparse mask (its lists: partial tiles first)
MASKINGS = (
    (_dq_probe, "band", (None, 40)), (_dq_probe, "dense", (None, 40)), (_dq_probe, "sparse", (None, 40)),
    (_dk_probe, "band", (40, None)), (_dk_probe, "dense", (40, None)), (_dk_probe, "sparse", (40, None)),
)


def _masks(how: str, window):
    """(kernel keyword arguments, emulation keyword arguments) for the masking `how`."""
    import torch

    from flashcheck.kernels import build_block_mask

    if how == "band":
        return {"window": window}, {"window": window}
    dense = torch.as_tensor(_window_mask(window))
    if how == "dense":
        return {"mask": dense}, {"mask": dense.numpy()}
    bm = build_block_mask(N, N, block_q=TILE, block_k=TILE, mask=dense)
    return {"mask": bm}, {"block_mask": bm}


def _kernel_grads(p: Probe, masks: dict):
    """(O, LSE, (dQ, dK, dV)) of our Triton kernel (interpreter, fp32 ieee), float64."""
    import torch

    from flashcheck.kernels import attention

    t = [torch.tensor(x, dtype=torch.float32).requires_grad_() for x in (p.q, p.k, p.v)]
    o, lse = attention(*t, return_lse=True, **masks)
    o.backward(torch.tensor(p.do, dtype=torch.float32))
    return o.detach().double().numpy(), lse.detach().double().numpy(), [x.grad.double().numpy() for x in t]


def _emulated_grads(p: Probe, o, lse, masks: dict):
    """The emulation's (dQ, dK, dV) from the kernel's own O and LSE, with the interpreter's 16 x 16 tiles."""
    from flashcheck.proofs.emulation import fa2_backward

    return fa2_backward(p.q, p.k, p.v, o, lse, p.do, dtype="float32", dot="ieee", block_k_dq=TILE, block_q=TILE,
                        block_q_dq=TILE, block_k_dkdv=TILE, **masks)


def _lost(p: Probe, grads) -> np.ndarray:
    """Where the probe's y was lost: the probe column is 0 (x - x, y absorbed)."""
    return grads[p.grad][0, 0, :, p.col] == 0.0


@needs_kernel
@pytest.mark.parametrize("make,how,window", MASKINGS, ids=[f"{m.__name__[1:3]}-{h}" for m, h, _ in MASKINGS])
def test_the_emulation_visits_the_tiles_in_the_kernels_order(make, how, window):
    p = make()
    kmask, emask = _masks(how, window)
    o, lse, got = _kernel_grads(p, kmask)
    want = _emulated_grads(p, o, lse, emask)
    lost_k, lost_e = _lost(p, got), _lost(p, want)
    assert lost_k.any() or how == "dense", "the probe tells nothing: no outer block visits y first"
    assert np.array_equal(lost_k, lost_e), (
        f"{how} {window}: the kernel loses y in outer rows {np.flatnonzero(lost_k)}, the emulation in "
        f"{np.flatnonzero(lost_e)}")


@needs_kernel
def test_an_emulation_that_visits_masked_blocks_in_ascending_order_is_caught(monkeypatch):
    """The emulation's order planted as the unmasked head's (every tile ascending): the probe tells them apart."""
    import flashcheck.proofs.emulation as em

    inner = em._inner_visits
    monkeypatch.setattr(em, "_inner_visits", lambda *a, **kw: tuple(sorted(inner(*a, **kw))))
    p = _dq_probe()
    kmask, emask = _masks("band", (None, 40))
    o, lse, got = _kernel_grads(p, kmask)
    assert not np.array_equal(_lost(p, got), _lost(p, _emulated_grads(p, o, lse, emask)))

"""Lemma 11 (proofs/block_sparse_attention.md): skipping entirely masked blocks is exact; with a mask not
aligned to the blocks, partial blocks must be masked elementwise. Justifies flashcheck.reference.block_sparse_attention;
relied on by tests/test_block_sparse_attention.py."""
from __future__ import annotations

import mpmath as mp
import sympy as sp

from flashcheck.proofs.instances import DPS, assert_close, assert_symbolic_zero, attention_inputs, within

STATEMENT = (
    "In the FA2 recurrence, a key block whose entries are all masked (logits -inf) leaves (m, l, O~) unchanged, "
    "so skipping it is exact: block-sparse attention with block mask Bm equals attention with the elementwise "
    "mask expand(Bm) (AND any other mask). A block that is only partly masked is not skippable and not "
    "fully visible: treating it as visible changes the result unless the masked keys have weight 0."
)


def check_symbolic() -> None:
    m, l, O = sp.symbols("m l O~", real=True)
    x, v = sp.symbols("x v", real=True)
    # a masked key is the limit x -> -oo of a visible one: its weight e^{x - m} -> 0 and the running max
    # max(m, x) -> m, so the update (m, l, O~) -> (m, l e^0 + e^{x-m}, O~ e^0 + e^{x-m} v) tends to the identity
    w = sp.limit(sp.exp(x - m), x, -sp.oo)
    assert w == 0
    assert_symbolic_zero(l * sp.exp(m - m) + w - l, "l unchanged by a masked block")
    assert_symbolic_zero(O * sp.exp(m - m) + w * v - O, "O~ unchanged by a masked block")
    # a partly masked block must be masked elementwise: with key b masked, the true output is v_a; treating
    # the block as visible gives (e^a v_a + e^b v_b)/(e^a + e^b), which differs from v_a by
    a, b, va, vb = sp.symbols("a b v_a v_b", real=True)
    diff = sp.simplify((sp.exp(a) * va + sp.exp(b) * vb) / (sp.exp(a) + sp.exp(b)) - va)
    assert_symbolic_zero(diff - sp.exp(b) * (vb - va) / (sp.exp(a) + sp.exp(b)), "partial-block error")
    assert diff != 0  # nonzero unless v_b = v_a: elementwise masking is required


def check_numeric() -> None:
    import numpy as np

    from flashcheck.proofs.bounds import reference_bound
    from flashcheck.reference import block_sparse_attention, causal_block_mask, local_block_mask
    from flashcheck.reference.block_sparse import expand_block_mask
    from flashcheck.reference.exact import exact_attention

    for seed, (Nq, Nk, bs), bm_fn, causal in (
        (0, (8, 8, 2), lambda a, b: causal_block_mask(a, b), False),
        (1, (9, 9, 4), lambda a, b: local_block_mask(a, 1), True),  # N not a multiple of the block
        (2, (6, 10, 3), lambda a, b: np.ones((a, b), dtype=bool), "bottom_right"),
    ):
        q, k, v, _ = attention_inputs(seed, Nq=Nq, Nk=Nk, logit_scale=2.0)
        nqb, nkb = -(-Nq // bs), -(-Nk // bs)
        bm = bm_fn(nqb, nkb)
        o, lse = block_sparse_attention(q, k, v, bm, block_size=bs, causal=causal)
        mask = expand_block_mask(bm, bs, bs, Nq, Nk)
        o_x, lse_x = exact_attention(q, k, v, mask=mask, causal=causal)
        b = reference_bound(q, k, v, mask=mask, causal=causal)
        within("block_sparse_attention O", o, o_x, b.o)
        within("block_sparse_attention LSE", lse, lse_x, b.lse)
    # partial blocks: a causal mask with blocks of 2 is not block-aligned on the diagonal; keeping the
    # diagonal blocks fully visible (block-level causality only) gives a different result in mpmath
    q, k, v, _ = attention_inputs(7, Nq=4, Nk=4)
    with mp.workdps(DPS):
        o_elem, _ = exact_attention(q, k, v, causal=True, as_mpf=True)
        o_block, _ = exact_attention(q, k, v, mask=expand_block_mask(causal_block_mask(2, 2), 2, 2, 4, 4),
                                     as_mpf=True)
        assert abs(o_elem[0, 0, 0, 0] - o_block[0, 0, 0, 0]) > mp.mpf(10) ** -3, "partial block must be masked"
        # and skipping the fully masked (upper) blocks is exact: same as the elementwise causal result
        full = np.ones((4, 4), dtype=bool)
        o_all, _ = exact_attention(q, k, v, causal=True, mask=full, as_mpf=True)
        assert_close(list(o_all.ravel()), list(o_elem.ravel()), "skipping masked blocks", scale=1e3)

"""Attention backward: the FlashAttention-2 tiled form and the standard form through J_softmax (seed 002, "Backward").

Names follow the FA2 paper: S are the (scaled, masked) logits, P = softmax(S) the probabilities
(seed 002 calls them P and A). With O = P V and loss gradient dO:
    dV = P^T dO,  dP = dO V^T,  dS_i: = J_softmax(P_i:) dP_i:  with  J_softmax = diag(P_i:) - P_i: P_i:^T,
    dQ = scale dS K,  dK = scale dS^T Q.
FA2 (seed 002 step0-step2): P = exp(S - LSE) recomputed tile by tile, Delta = rowsum(dO o O) so that
dS = P o (dP - Delta); dK_j, dV_j accumulate over Q tiles and dQ_i over K/V tiles.
A fully masked row (LSE = -inf) has P = 0: its dQ row is 0 and it adds 0 to dK, dV.
"""
from __future__ import annotations

import numpy as np

from flashcheck.reference.attention import (apply_dropout, expand_kv, logits_tile, masked_logits, masked_softmax, reduce_kv,
                                            resolve_scale)
from flashcheck.reference.masks import visibility
from flashcheck.reference.flash_attention_2 import check_block, tile_ranges
from flashcheck.reference.shapes import check_attention_args, check_backward_args
from flashcheck.reference.softmax import safe_shift


def attention_backward(q, k, v, o, lse, do, *, scale=None, causal=False, window=None, mask=None, bias=None,
                       block_q: int = 64, block_k: int = 64):
    """FA2 backward -> (dq, dk, dv), from the forward's o and lse (seed 002 "flash-attn backward")."""
    p = check_attention_args(q, k, v, scale=scale, causal=causal, window=window, mask=mask, bias=bias)
    check_backward_args(p, o, lse, do)
    block_q, block_k = check_block("block_q", block_q), check_block("block_k", block_k)
    sc = resolve_scale(scale, p.d)
    Q = np.asarray(q, dtype=np.float64)
    K = expand_kv(np.asarray(k, dtype=np.float64), p.group)
    V = expand_kv(np.asarray(v, dtype=np.float64), p.group)
    dO = np.asarray(do, dtype=np.float64)
    vis = visibility(p.B, p.Hq, p.Nq, p.Nk, causal=causal, window=window, mask=mask)
    bias_all = None if bias is None else np.broadcast_to(np.asarray(bias, dtype=np.float64), p.full)
    # LSE = -inf marks a fully masked row: its logits are all -inf, and exp(-inf - 0) = 0 (safe shift)
    lse_shift = safe_shift(np.asarray(lse, dtype=np.float64))
    # step1: Delta = rowsum(dO o O);  Delta[i] = sum_c dO[i,c] * O[i,c]
    delta = (dO * np.asarray(o, dtype=np.float64)).sum(axis=-1)
    dq = np.zeros_like(Q)
    dk = np.zeros_like(K)
    dv = np.zeros_like(V)
    for cols in tile_ranges(p.Nk, block_k):  # outer loop: K_j, V_j
        dk_j = np.zeros((p.B, p.Hq, cols.stop - cols.start, p.d))
        dv_j = np.zeros((p.B, p.Hq, cols.stop - cols.start, p.dv))
        for rows in tile_ranges(p.Nq, block_q):  # inner loop: Q_i, dO_i, LSE_i, Delta_i
            if not vis[:, :, rows, cols].any():
                continue
            # recompute S_ij, then P = exp(S - LSE);  P[i,j] = exp(S[i,j] - LSE[i])
            S = logits_tile(Q, K, sc, bias_all, rows, cols, vis)
            P = np.exp(S - lse_shift[:, :, rows, None])
            dO_i = dO[:, :, rows]
            dv_j += np.swapaxes(P, -1, -2) @ dO_i  # dV_j += P^T dO_i
            dP = dO_i @ np.swapaxes(V[:, :, cols], -1, -2)  # dP = dO_i V_j^T
            # dS = P o (dP - Delta);  dS[i,j] = P[i,j] * (dP[i,j] - Delta[i])
            dS = P * (dP - delta[:, :, rows, None])
            dk_j += sc * (np.swapaxes(dS, -1, -2) @ Q[:, :, rows])  # dK_j += scale dS^T Q_i
            dq[:, :, rows] += sc * (dS @ K[:, :, cols])  # dQ_i += scale dS K_j (the atomic add)
        dk[:, :, cols] = dk_j
        dv[:, :, cols] = dv_j
    return dq, reduce_kv(dk, p.group), reduce_kv(dv, p.group)


def standard_attention_backward(q, k, v, do, *, scale=None, causal=False, window=None, mask=None, bias=None,
                                dropout_p=0.0, dropout_mask=None):
    """Standard backward through the materialized Jacobian J_softmax = diag(P_i:) - P_i: P_i:^T
    (seed 002 "For standard attn backward") -> (dq, dk, dv). Recomputes the forward itself, so it takes
    no o/lse; with dropout, O = (P o Z / (1 - p)) V and dP picks up the same keep mask."""
    p = check_attention_args(q, k, v, scale=scale, causal=causal, window=window, mask=mask, bias=bias,
                             dropout_p=dropout_p, dropout_mask=dropout_mask)
    sc = resolve_scale(scale, p.d)
    Q = np.asarray(q, dtype=np.float64)
    K = expand_kv(np.asarray(k, dtype=np.float64), p.group)
    V = expand_kv(np.asarray(v, dtype=np.float64), p.group)
    dO = np.asarray(do, dtype=np.float64)
    if dO.shape != (p.B, p.Hq, p.Nq, p.dv):
        raise ValueError(f"do must have shape {(p.B, p.Hq, p.Nq, p.dv)}, got {dO.shape}")
    s, _ = masked_logits(q, k, p, scale=scale, causal=causal, window=window, mask=mask, bias=bias)
    P, _ = masked_softmax(s)
    Pd = apply_dropout(P, dropout_p, dropout_mask)
    dv = np.swapaxes(Pd, -1, -2) @ dO  # dV = dropout(P)^T dO
    dPd = dO @ np.swapaxes(V, -1, -2)  # d(dropout(P)) = dO V^T
    dP = apply_dropout(dPd, dropout_p, dropout_mask)  # the dropout is linear: its adjoint is itself
    # J_softmax = diag(P_i:) - P_i: P_i:^T, one Nk x Nk matrix per row (B, Hq, Nq, Nk, Nk)
    J = P[..., :, None] * np.eye(p.Nk) - P[..., :, None] * P[..., None, :]
    dS = np.einsum("...jk,...k->...j", J, dP)  # dS_i: = J_softmax(P_i:) dP_i:
    dq = sc * (dS @ K)
    dk = sc * (np.swapaxes(dS, -1, -2) @ Q)
    return dq, reduce_kv(dk, p.group), reduce_kv(dv, p.group)

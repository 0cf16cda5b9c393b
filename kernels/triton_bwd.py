"""FlashAttention-2 backward in Triton: Δ preprocess, a dK/dV kernel and a dQ kernel.

P is never stored: each kernel recomputes it from the logits and the forward's LSE,
P = exp2(S2 − LSE2) with S2 = S · scale · log2(e) and LSE2 = LSE · log2(e) (seed 002, FA2
backward). With Δ_i = rowsum(dO ∘ O)_i = Σ_j P_ij dP_ij the softmax Jacobian collapses to
dS = P ∘ (dP − Δ).

- `attn_bwd_preprocess_kernel`: Δ, one program per (query block, batch·head); from O + O_res when
  the forward wrote the rounding residual O_res (HAS_RES: Δ from an O accurate to ~2× the output
  precision, proofs/accurate_modes.md), else from the rounded O.
- `attn_bwd_dkdv_kernel`: K/V-block outer; loops over the query heads of its GQA group and over the
  query tiles that can see the block, accumulating dK and dV in registers (no atomics).
- `attn_bwd_dq_kernel`: Q-block outer; loops over key tiles like the forward.
Visibility and tile ranges are those of the forward (`flashcheck.kernels.tiles`), read transposed in the
dK/dV kernel: query i sees key j iff j − off_hi <= i <= j − off_lo.
"""
import triton
import triton.language as tl

from flashcheck.kernels.tiles import (LOG2E, full_start, head_ptr, inner_tiles, load_rows, load_rows_t,
                                      grouped_block, partial_start, query_block, visible)


@triton.jit
def attn_bwd_preprocess_kernel(O, ORes, DO, Delta, Nq, Hq,
                               stride_ob, stride_oh, stride_om,
                               stride_db, stride_dh, stride_dm,
                               HEAD_DV: tl.constexpr, BLOCK_DV: tl.constexpr,
                               BLOCK_M: tl.constexpr, HAS_RES: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    off_b = pid_bh // Hq
    off_h = pid_bh % Hq
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_dv = tl.arange(0, BLOCK_DV)
    o = load_rows(head_ptr(O, off_b, off_h, stride_ob, stride_oh), offs_m, offs_dv, stride_om, Nq,
                  HEAD_DV, True).to(tl.float32)
    if HAS_RES:
        # O_fp32 ≈ O + O_res (O_res has O's strides); the sum is exact in fp32 (≤ 2·p + 1 bits).
        o += load_rows(head_ptr(ORes, off_b, off_h, stride_ob, stride_oh), offs_m, offs_dv,
                       stride_om, Nq, HEAD_DV, True).to(tl.float32)
    do = load_rows(head_ptr(DO, off_b, off_h, stride_db, stride_dh), offs_m, offs_dv, stride_dm,
                   Nq, HEAD_DV, True)
    # Δ = rowsum(dO ∘ O)   /   delta[i] = Σ_c dO[i,c] O[i,c]
    delta = tl.sum(do.to(tl.float32) * o, axis=1)
    tl.store(Delta + pid_bh.to(tl.int64) * Nq + offs_m, delta, mask=offs_m < Nq)


@triton.jit
def _dkdv_tile(dk, dv, k, v, q_base, do_base, lse_base, delta_base, mask_base, start_m,
               offs_n, offs_d, offs_dv, Nq, Nk, stride_qm, stride_dom, stride_mm, stride_mn,
               off_lo, off_hi, qk_scale2,
               MASKED: tl.constexpr, BAND: tl.constexpr, HAS_MASK: tl.constexpr,
               BLOCK_M: tl.constexpr, HEAD_D: tl.constexpr, HEAD_DV: tl.constexpr,
               DOT_PRECISION: tl.constexpr):
    offs_m = start_m + tl.arange(0, BLOCK_M)
    q = load_rows(q_base, offs_m, offs_d, stride_qm, Nq, HEAD_D, MASKED)
    do = load_rows(do_base, offs_m, offs_dv, stride_dom, Nq, HEAD_DV, MASKED)
    if MASKED:
        lse = tl.load(lse_base + offs_m, mask=offs_m < Nq, other=0.0)
        delta = tl.load(delta_base + offs_m, mask=offs_m < Nq, other=0.0)
    else:
        lse = tl.load(lse_base + offs_m)
        delta = tl.load(delta_base + offs_m)
    # S2ᵀ = K Qᵀ · scale · log2(e)   /   s2[j,i] = scale · log2(e) · k_j · q_i
    s2T = tl.dot(k, tl.trans(q), input_precision=DOT_PRECISION) * qk_scale2
    # Pᵀ = exp2(S2ᵀ − LSE2)   /   p[i,j] = 2^(s2[i,j] − lse[i]·log2 e)
    # P ≤ 1 exactly (LSE ≥ every logit of its row), but at |s| ~ 1e8 the rounding of s2 and lse2 can
    # push the exponent tens above 0 and overflow dK; clamping at 0 only moves p towards the truth.
    pT = tl.math.exp2(tl.minimum(s2T - (lse * LOG2E)[None, :], 0.0))
    if MASKED or HAS_MASK:
        # A fully masked row has LSE = −inf, so its pᵀ is 2^min(+inf, 0) = 1 before this select;
        # every entry of such a row is invisible, so the select turns all of them into 0.
        vis = visible(offs_m, offs_n, mask_base, Nq, Nk, off_lo, off_hi, stride_mm, stride_mn,
                      BAND, HAS_MASK)
        pT = tl.where(tl.trans(vis), pT, 0.0)
    # dV = Pᵀ dO   /   dv[j,c] += Σ_i p[i,j] dO[i,c]
    dv = tl.dot(pT.to(do.dtype), do, dv, input_precision=DOT_PRECISION)
    # dPᵀ = V dOᵀ   /   dp[i,j] = Σ_c dO[i,c] v[j,c]
    dpT = tl.dot(v, tl.trans(do), input_precision=DOT_PRECISION)
    # dS = P ∘ (dP − Δ)   /   dS[i,j] = P[i,j] * (dP[i,j] − Δ[i])
    dsT = pT * (dpT - delta[None, :])
    # dK = dSᵀ Q (scale applied once at the end)   /   dk[j,c] += Σ_i dS[i,j] q[i,c]
    dk = tl.dot(dsT.to(q.dtype), q, dk, input_precision=DOT_PRECISION)
    return dk, dv


@triton.jit
def attn_bwd_dkdv_kernel(
    Q, K, V, DO, LSE, Delta, DK, DV, Mask,
    QNum, QIdx, FullQNum, FullQIdx,
    sm_scale, Nq, Nk, Hkv, off_lo, off_hi,
    stride_qb, stride_qh, stride_qm,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_dob, stride_doh, stride_dom,
    stride_dkb, stride_dkh, stride_dkn,
    stride_dvb, stride_dvh, stride_dvn,
    stride_mb, stride_mh, stride_mm, stride_mn,
    stride_nb, stride_nh, stride_nm,
    stride_ib, stride_ih, stride_im,
    GROUP: tl.constexpr,
    HEAD_D: tl.constexpr, HEAD_DV: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BAND: tl.constexpr, HAS_MASK: tl.constexpr, SPARSE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    tl.static_assert(BLOCK_M >= 16 and BLOCK_N >= 16, "tl.dot needs tiles of at least 16")
    tl.static_assert(BLOCK_D >= HEAD_D and BLOCK_DV >= HEAD_DV, "head dim padded to the tile")
    pid_n, pid_bh = grouped_block(BAND, False)  # under a band longest first across heads: the first key blocks
    off_b = pid_bh // Hkv
    off_hkv = pid_bh % Hkv
    Hq = Hkv * GROUP
    start_n = pid_n * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    k = load_rows(head_ptr(K, off_b, off_hkv, stride_kb, stride_kh), offs_n, offs_d, stride_kn, Nk,
                  HEAD_D, True)
    v = load_rows(head_ptr(V, off_b, off_hkv, stride_vb, stride_vh), offs_n, offs_dv, stride_vn, Nk,
                  HEAD_DV, True)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_DV], dtype=tl.float32)
    qk_scale2 = sm_scale * LOG2E  # scale · log2(e): logits straight into the base-2 domain

    # GQA: dK, dV of kv head h sum over the query heads h·GROUP … h·GROUP + GROUP − 1.
    for g in range(0, GROUP):
        off_h = off_hkv * GROUP + g
        bh = off_b.to(tl.int64) * Hq + off_h
        q_base = head_ptr(Q, off_b, off_h, stride_qb, stride_qh)
        do_base = head_ptr(DO, off_b, off_h, stride_dob, stride_doh)
        mask_base = head_ptr(Mask, off_b, off_h, stride_mb, stride_mh)
        lse_base = LSE + bh * Nq
        delta_base = Delta + bh * Nq
        # Query i sees key j iff j − off_hi <= i <= j − off_lo: the forward's band, transposed.
        n_partial, n_full, lo, f_lo, f_hi, ib, fib = inner_tiles(
            QNum, QIdx, FullQNum, FullQIdx, off_b, off_h, pid_n,
            stride_nb, stride_nh, stride_nm, stride_ib, stride_ih, stride_im,
            start_n, tl.minimum(start_n + BLOCK_N, Nk), Nq, -off_hi, -off_lo, BAND, SPARSE, BLOCK_M)
        for t in range(0, n_partial):
            start_m = partial_start(t, ib, lo, f_lo, f_hi, SPARSE, BLOCK_M)
            dk, dv = _dkdv_tile(dk, dv, k, v, q_base, do_base, lse_base, delta_base,
                                mask_base, start_m, offs_n, offs_d, offs_dv, Nq, Nk,
                                stride_qm, stride_dom, stride_mm, stride_mn, off_lo, off_hi,
                                qk_scale2, True, BAND, HAS_MASK, BLOCK_M, HEAD_D, HEAD_DV,
                                DOT_PRECISION)
        for t in range(0, n_full):
            start_m = full_start(t, fib, f_lo, SPARSE, BLOCK_M)
            dk, dv = _dkdv_tile(dk, dv, k, v, q_base, do_base, lse_base, delta_base,
                                mask_base, start_m, offs_n, offs_d, offs_dv, Nq, Nk,
                                stride_qm, stride_dom, stride_mm, stride_mn, off_lo, off_hi,
                                qk_scale2, False, BAND, HAS_MASK and not SPARSE, BLOCK_M, HEAD_D,
                                HEAD_DV, DOT_PRECISION)
    # dK = scale · dSᵀ Q: the logit scale, applied once
    dk = dk * sm_scale
    kv_rows = offs_n[:, None] < Nk
    tl.store(head_ptr(DK, off_b, off_hkv, stride_dkb, stride_dkh)
             + offs_n[:, None] * stride_dkn + offs_d[None, :], dk.to(DK.dtype.element_ty),
             mask=kv_rows & (offs_d[None, :] < HEAD_D))
    tl.store(head_ptr(DV, off_b, off_hkv, stride_dvb, stride_dvh)
             + offs_n[:, None] * stride_dvn + offs_dv[None, :], dv.to(DV.dtype.element_ty),
             mask=kv_rows & (offs_dv[None, :] < HEAD_DV))


@triton.jit
def _dq_tile(dq, q, do, lse2, delta, k_base, v_base, mask_base, start_n, offs_m, offs_d, offs_dv,
             Nq, Nk, stride_kn, stride_vn, stride_mm, stride_mn, off_lo, off_hi, qk_scale2,
             MASKED: tl.constexpr, BAND: tl.constexpr, HAS_MASK: tl.constexpr,
             BLOCK_N: tl.constexpr, HEAD_D: tl.constexpr, HEAD_DV: tl.constexpr,
             DOT_PRECISION: tl.constexpr):
    offs_n = start_n + tl.arange(0, BLOCK_N)
    kT = load_rows_t(k_base, offs_n, offs_d, stride_kn, Nk, HEAD_D, MASKED)
    vT = load_rows_t(v_base, offs_n, offs_dv, stride_vn, Nk, HEAD_DV, MASKED)
    # P = exp2(S2 − LSE2)   /   p[i,j] = 2^(s2[i,j] − lse2[i])
    s2 = tl.dot(q, kT, input_precision=DOT_PRECISION) * qk_scale2
    # Clamped at 2^0 = 1 for the same reason as in the dK/dV kernel: P ≤ 1 exactly.
    p = tl.math.exp2(tl.minimum(s2 - lse2[:, None], 0.0))
    if MASKED or HAS_MASK:
        vis = visible(offs_m, offs_n, mask_base, Nq, Nk, off_lo, off_hi, stride_mm, stride_mn,
                      BAND, HAS_MASK)
        p = tl.where(vis, p, 0.0)
    # dP = dO Vᵀ   /   dp[i,j] = Σ_c dO[i,c] v[j,c]
    dp = tl.dot(do, vT, input_precision=DOT_PRECISION)
    # dS = P ∘ (dP − Δ)   /   dS[i,j] = P[i,j] * (dP[i,j] − Δ[i])
    ds = p * (dp - delta[:, None])
    # dQ = dS K (scale applied once at the end)   /   dq[i,c] += Σ_j dS[i,j] k[j,c]
    dq = tl.dot(ds.to(kT.dtype), tl.trans(kT), dq, input_precision=DOT_PRECISION)
    return dq


@triton.jit
def attn_bwd_dq_kernel(
    Q, K, V, DO, LSE, Delta, DQ, Mask,
    KvNum, KvIdx, FullNum, FullIdx,
    sm_scale, Nq, Nk, Hq, off_lo, off_hi,
    stride_qb, stride_qh, stride_qm,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_dob, stride_doh, stride_dom,
    stride_dqb, stride_dqh, stride_dqm,
    stride_mb, stride_mh, stride_mm, stride_mn,
    stride_nb, stride_nh, stride_nm,
    stride_ib, stride_ih, stride_im,
    GROUP: tl.constexpr,
    HEAD_D: tl.constexpr, HEAD_DV: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BAND: tl.constexpr, HAS_MASK: tl.constexpr, SPARSE: tl.constexpr,
    DOT_PRECISION: tl.constexpr, HEAVY_FIRST: tl.constexpr,
):
    tl.static_assert(BLOCK_M >= 16 and BLOCK_N >= 16, "tl.dot needs tiles of at least 16")
    tl.static_assert(BLOCK_D >= HEAD_D and BLOCK_DV >= HEAD_DV, "head dim padded to the tile")
    pid_m, pid_bh = query_block(HEAVY_FIRST)
    off_b = pid_bh // Hq
    off_h = pid_bh % Hq
    off_hkv = off_h // GROUP
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    rows = offs_m < Nq
    q = load_rows(head_ptr(Q, off_b, off_h, stride_qb, stride_qh), offs_m, offs_d, stride_qm, Nq,
                  HEAD_D, True)
    do = load_rows(head_ptr(DO, off_b, off_h, stride_dob, stride_doh), offs_m, offs_dv, stride_dom,
                   Nq, HEAD_DV, True)
    lse = tl.load(LSE + pid_bh.to(tl.int64) * Nq + offs_m, mask=rows, other=0.0)
    # LSE2 = LSE · log2(e); a fully masked row (LSE = −inf) gets shift 0: all its P entries are then
    # selected to 0 by the visibility mask, and exp2 never sees (−inf) − (−inf).
    lse2 = tl.where(lse == float("-inf"), 0.0, lse * LOG2E)
    delta = tl.load(Delta + pid_bh.to(tl.int64) * Nq + offs_m, mask=rows, other=0.0)
    k_base = head_ptr(K, off_b, off_hkv, stride_kb, stride_kh)
    v_base = head_ptr(V, off_b, off_hkv, stride_vb, stride_vh)
    mask_base = head_ptr(Mask, off_b, off_h, stride_mb, stride_mh)
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    qk_scale2 = sm_scale * LOG2E  # scale · log2(e): logits straight into the base-2 domain

    n_partial, n_full, lo, f_lo, f_hi, ib, fib = inner_tiles(
        KvNum, KvIdx, FullNum, FullIdx, off_b, off_h, pid_m,
        stride_nb, stride_nh, stride_nm, stride_ib, stride_ih, stride_im,
        start_m, tl.minimum(start_m + BLOCK_M, Nq), Nk, off_lo, off_hi, BAND, SPARSE, BLOCK_N)
    for t in range(0, n_partial):
        start_n = partial_start(t, ib, lo, f_lo, f_hi, SPARSE, BLOCK_N)
        dq = _dq_tile(dq, q, do, lse2, delta, k_base, v_base, mask_base, start_n, offs_m,
                      offs_d, offs_dv, Nq, Nk, stride_kn, stride_vn, stride_mm, stride_mn,
                      off_lo, off_hi, qk_scale2, True, BAND, HAS_MASK, BLOCK_N, HEAD_D,
                      HEAD_DV, DOT_PRECISION)
    for t in range(0, n_full):
        start_n = full_start(t, fib, f_lo, SPARSE, BLOCK_N)
        dq = _dq_tile(dq, q, do, lse2, delta, k_base, v_base, mask_base, start_n, offs_m,
                      offs_d, offs_dv, Nq, Nk, stride_kn, stride_vn, stride_mm, stride_mn,
                      off_lo, off_hi, qk_scale2, False, BAND, HAS_MASK and not SPARSE, BLOCK_N,
                      HEAD_D, HEAD_DV, DOT_PRECISION)
    # dQ = scale · dS K: the logit scale, applied once
    dq = dq * sm_scale
    tl.store(head_ptr(DQ, off_b, off_h, stride_dqb, stride_dqh)
             + offs_m[:, None] * stride_dqm + offs_d[None, :], dq.to(DQ.dtype.element_ty),
             mask=rows[:, None] & (offs_d[None, :] < HEAD_D))

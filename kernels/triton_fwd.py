"""FlashAttention-2 forward in Triton (Q-block outer loop, online softmax in base 2).

One program owns BLOCK_M query rows of one (batch, query head) and streams the key/value tiles
that can be visible to them. Per row it keeps the running maximum m_i, the running sum l_i and the
unnormalized output acc (seed 002, FA2 forward); O = acc / l_i is formed once at the end and the
natural-log LSE = (m_i + log2 l_i) · ln 2 is stored for the backward pass.

Logits live in the base-2 domain: s2 = (q·k) · scale · log2(e), so exp(scale·q·k − m) becomes
exp2(s2 − m2) — one multiply folded into the scale, and exp2 is the hardware instruction.

Visibility of key j from query i (ARCHITECTURE.md): i + off_lo <= j <= i + off_hi with
off_lo = off − left and off_hi = off + right (BAND), AND j < Nk, AND the dense mask (HAS_MASK).
Key tiles are split into three runs: masked tiles before the band's fully visible part, fully
visible tiles (no elementwise mask at all), masked tiles after it. With a block-sparse mask
(SPARSE) the tile lists come from the mask instead: partial tiles masked, full tiles not.
"""
import triton
import triton.language as tl

LOG2E = 1.4426950408889634  # log2(e)
LN2 = 0.6931471805599453  # ln(2)


@triton.jit
def _band_range(a0, a1, n_in, off_lo, off_hi, BAND: tl.constexpr, BLOCK_IN: tl.constexpr):
    """Tile starts along the inner axis for outer rows [a0, a1): inner index b is visible from
    outer index a iff a + off_lo <= b <= a + off_hi and 0 <= b < n_in.

    Returns (lo, f_lo, f_hi, hi), multiples of BLOCK_IN with lo <= f_lo <= f_hi <= hi:
    tiles in [lo, hi) may hold visible entries; tiles in [f_lo, f_hi) are visible in full."""
    if BAND:
        lo_e = tl.maximum(a0 + off_lo, 0)
        hi_e = tl.minimum(tl.maximum(a1 - 1 + off_hi + 1, 0), n_in)
        flo_e = tl.maximum(a1 - 1 + off_lo, 0)
        fhi_e = tl.minimum(tl.maximum(a0 + off_hi + 1, 0), n_in)
    else:
        lo_e = a0 * 0
        hi_e = a0 * 0 + n_in
        flo_e = a0 * 0
        fhi_e = a0 * 0 + n_in
    lo = (lo_e // BLOCK_IN) * BLOCK_IN
    hi = ((hi_e + BLOCK_IN - 1) // BLOCK_IN) * BLOCK_IN
    hi = tl.maximum(hi, lo)
    f_lo = ((flo_e + BLOCK_IN - 1) // BLOCK_IN) * BLOCK_IN
    f_hi = (fhi_e // BLOCK_IN) * BLOCK_IN
    f_lo = tl.minimum(tl.maximum(f_lo, lo), hi)
    f_hi = tl.minimum(tl.maximum(f_hi, f_lo), hi)
    return lo, f_lo, f_hi, hi


@triton.jit
def _tile_counts(num_ptr, fnum_ptr, a0, a1, n_in, off_lo, off_hi,
                 BAND: tl.constexpr, SPARSE: tl.constexpr, BLOCK_IN: tl.constexpr):
    """(n_partial, n_full, lo, f_lo, f_hi): how many masked and unmasked inner tiles to visit.
    Block-sparse: the mask's list lengths. Band: the masked tiles are [lo, f_lo) ∪ [f_hi, hi)
    and the full tiles [f_lo, f_hi) of `_band_range`."""
    lo, f_lo, f_hi, hi = _band_range(a0, a1, n_in, off_lo, off_hi, BAND, BLOCK_IN)
    if SPARSE:
        n_partial = tl.load(num_ptr)
        n_full = tl.load(fnum_ptr)
    else:
        n_partial = (f_lo - lo + hi - f_hi) // BLOCK_IN
        n_full = (f_hi - f_lo) // BLOCK_IN
    return n_partial, n_full, lo, f_lo, f_hi


@triton.jit
def _partial_start(t, idx_ptr, lo, f_lo, f_hi, SPARSE: tl.constexpr, BLOCK_IN: tl.constexpr):
    """Start of the t-th masked tile: from the block-sparse list, or the t-th tile of
    [lo, f_lo) followed by [f_hi, hi)."""
    if SPARSE:
        start = tl.load(idx_ptr + t) * BLOCK_IN
    else:
        start = lo + t * BLOCK_IN
        start = tl.where(start < f_lo, start, start - f_lo + f_hi)
    return start


@triton.jit
def _full_start(t, idx_ptr, f_lo, SPARSE: tl.constexpr, BLOCK_IN: tl.constexpr):
    """Start of the t-th fully visible tile."""
    if SPARSE:
        start = tl.load(idx_ptr + t) * BLOCK_IN
    else:
        start = f_lo + t * BLOCK_IN
    return start


@triton.jit
def _fwd_tile(acc, l_i, m_i, q, k_base, v_base, mask_base, start_n, offs_m, offs_d, offs_dv,
              Nq, Nk, stride_kn, stride_vn, stride_mm, stride_mn, off_lo, off_hi, qk_scale,
              MASKED: tl.constexpr, BAND: tl.constexpr, HAS_MASK: tl.constexpr,
              BLOCK_N: tl.constexpr, HEAD_D: tl.constexpr, HEAD_DV: tl.constexpr,
              BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """One key/value tile of the online-softmax recurrence (seed 002, FA2 Algorithm 1 body)."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    if MASKED:
        kmask = (offs_n[None, :] < Nk) & (offs_d[:, None] < HEAD_D)
        vmask = (offs_n[:, None] < Nk) & (offs_dv[None, :] < HEAD_DV)
    else:
        kmask = offs_d[:, None] < HEAD_D
        vmask = offs_dv[None, :] < HEAD_DV
    # K tile loaded transposed, (BLOCK_D, BLOCK_N); padded head-dim columns read as 0.
    kT = tl.load(k_base + offs_n[None, :] * stride_kn + offs_d[:, None], mask=kmask, other=0.0)
    # S2 = Q Kᵀ · scale · log2(e)   /   s2[i,j] = scale · log2(e) · Σ_c q[i,c] k[j,c]
    s = tl.dot(q, kT, input_precision=DOT_PRECISION) * qk_scale
    if MASKED or HAS_MASK:
        visible = offs_n[None, :] < Nk
        if BAND:
            visible = visible & (offs_n[None, :] >= offs_m[:, None] + off_lo) \
                & (offs_n[None, :] <= offs_m[:, None] + off_hi)
        if HAS_MASK:
            mvals = tl.load(mask_base + offs_m[:, None].to(tl.int64) * stride_mm
                            + offs_n[None, :].to(tl.int64) * stride_mn,
                            mask=(offs_m[:, None] < Nq) & (offs_n[None, :] < Nk), other=0)
            visible = visible & (mvals != 0)
        s = tl.where(visible, s, float("-inf"))
    # m_new = max(m_i, rowmax(S2))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    if MASKED or HAS_MASK:
        # Safe max: a row with nothing visible yet keeps m = −inf; shift by 0 instead so that
        # (−inf) − (−inf) never reaches exp2 (it gives exp2(−inf) = 0 for every entry).
        m_shift = tl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_shift = m_new
    # P̃ = exp2(S2 − m_new)   /   p[i,j] = 2^(s2[i,j] − m_new[i])
    p = tl.math.exp2(s - m_shift[:, None])
    # alpha = exp2(m_old − m_new): rescales what was accumulated under the old maximum
    alpha = tl.math.exp2(m_i - m_shift)
    # l_new = alpha · l_old + rowsum(P̃)
    l_i = l_i * alpha + tl.sum(p, 1)
    v = tl.load(v_base + offs_n[:, None] * stride_vn + offs_dv[None, :], mask=vmask, other=0.0)
    # acc = diag(alpha) acc + P̃ V   /   acc[i,c] = alpha[i] acc[i,c] + Σ_j p[i,j] v[j,c]
    acc = acc * alpha[:, None]
    acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PRECISION)
    return acc, l_i, m_new


@triton.jit
def attn_fwd_kernel(
    Q, K, V, O, LSE, Mask,
    KvNum, KvIdx, FullNum, FullIdx,
    sm_scale, Nq, Nk, Hq, off_lo, off_hi,
    stride_qb, stride_qh, stride_qm,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om,
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
    tl.static_assert(BLOCK_D >= 16 and BLOCK_DV >= 16, "tl.dot needs K >= 16")
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    off_b = pid_bh // Hq
    off_h = pid_bh % Hq
    off_hkv = off_h // GROUP  # GQA: query head h reads kv head h // (Hq // Hkv)
    # Batch/head bases in int64: B·H·N·d may exceed 2^31 even when one head does not.
    q_base = Q + off_b.to(tl.int64) * stride_qb + off_h.to(tl.int64) * stride_qh
    o_base = O + off_b.to(tl.int64) * stride_ob + off_h.to(tl.int64) * stride_oh
    k_base = K + off_b.to(tl.int64) * stride_kb + off_hkv.to(tl.int64) * stride_kh
    v_base = V + off_b.to(tl.int64) * stride_vb + off_hkv.to(tl.int64) * stride_vh
    mask_base = Mask + off_b.to(tl.int64) * stride_mb + off_h.to(tl.int64) * stride_mh

    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)

    qmask = (offs_m[:, None] < Nq) & (offs_d[None, :] < HEAD_D)
    q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :], mask=qmask, other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634  # scale · log2(e)

    nb = off_b.to(tl.int64) * stride_nb + off_h.to(tl.int64) * stride_nh + pid_m * stride_nm
    ib = off_b.to(tl.int64) * stride_ib + off_h.to(tl.int64) * stride_ih + pid_m * stride_im
    n_partial, n_full, lo, f_lo, f_hi = _tile_counts(
        KvNum + nb, FullNum + nb, start_m, tl.minimum(start_m + BLOCK_M, Nq), Nk, off_lo, off_hi,
        BAND, SPARSE, BLOCK_N)
    # Partial tiles: bounds, band and dense mask applied elementwise.
    for t in range(0, n_partial):
        start_n = _partial_start(t, KvIdx + ib, lo, f_lo, f_hi, SPARSE, BLOCK_N)
        acc, l_i, m_i = _fwd_tile(acc, l_i, m_i, q, k_base, v_base, mask_base, start_n,
                                  offs_m, offs_d, offs_dv, Nq, Nk, stride_kn, stride_vn,
                                  stride_mm, stride_mn, off_lo, off_hi, qk_scale,
                                  True, BAND, HAS_MASK, BLOCK_N, HEAD_D, HEAD_DV,
                                  BLOCK_D, BLOCK_DV, DOT_PRECISION)
    # Full tiles: no elementwise mask (a band-full tile still needs the dense mask, if any).
    for t in range(0, n_full):
        start_n = _full_start(t, FullIdx + ib, f_lo, SPARSE, BLOCK_N)
        acc, l_i, m_i = _fwd_tile(acc, l_i, m_i, q, k_base, v_base, mask_base, start_n,
                                  offs_m, offs_d, offs_dv, Nq, Nk, stride_kn, stride_vn,
                                  stride_mm, stride_mn, off_lo, off_hi, qk_scale,
                                  False, BAND, HAS_MASK and not SPARSE, BLOCK_N, HEAD_D, HEAD_DV,
                                  BLOCK_D, BLOCK_DV, DOT_PRECISION)

    # O = diag(l)^−1 acc, the one division; a row with nothing visible has l = 0 and acc = 0 → O = 0.
    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    acc = acc / l_safe[:, None]
    # LSE = ln 2 · (m2 + log2 l)  (natural log; −inf for a fully masked row)
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(l_safe)) * 0.6931471805599453)
    omask = (offs_m[:, None] < Nq) & (offs_dv[None, :] < HEAD_DV)
    tl.store(o_base + offs_m[:, None] * stride_om + offs_dv[None, :], acc.to(O.dtype.element_ty),
             mask=omask)
    lse_base = LSE + pid_bh.to(tl.int64) * Nq
    tl.store(lse_base + offs_m, lse, mask=offs_m < Nq)

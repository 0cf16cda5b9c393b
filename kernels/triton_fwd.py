"""FlashAttention-2 forward in Triton (Q-block outer loop, online softmax in base 2).

One program owns BLOCK_M query rows of one (batch, query head) and streams the key/value tiles
that can be visible to them. Per row it keeps the running maximum m2 (base 2), the running sum l
and the unnormalized output acc (seed 002, FA2 forward); O = acc / l is formed once at the end and
the natural-log LSE = (m2 + log2 l) · ln 2 is stored for the backward pass.

Logits live in the base-2 domain: s2 = (q·k) · scale · log2(e), so exp(scale·q·k − m) becomes
exp2(s2 − m2) — one multiply folded into the scale, and exp2 is the hardware instruction.

Visibility (`tiles.visible`, ARCHITECTURE.md) and the split of the key tiles into masked and fully
visible runs (`tiles.inner_tiles`) are shared with the backward.

Two precision options (proofs/accurate_modes.md):
- P_SPLIT: P·V as P_hi·V + P_lo·V with P_hi = round(P), P_lo = round(P − P_hi) in the operand
  dtype, so P enters the tensor-core product with ~2× the operand precision (two products).
- WRITE_RES: also store O_res = round(O_fp32 − round(O_fp32)), the rounding residual of the output,
  so that the backward can form Δ = rowsum(dO ∘ O) from O_fp32 ≈ O + O_res.

Code-generation choices that leave every rounding where it was (`TileConfig`):
- KV_DESC: K and V tiles through tensor descriptors (TMA on Hopper) instead of pointer loads; rows
  past Nk and head-dim columns past HEAD_D read as 0 exactly as the masked loads do.
- WARP_SPEC: the loop over fully visible tiles warp-specialized (producer/consumer warps).
- PIPE_QK: the loop over fully visible tiles software-pipelined by hand: S_{t+1} = Q K_{t+1}ᵀ is
  issued before the softmax of tile t, so the tensor cores and the exp2 units can work at once
  (FA3's intra-warpgroup overlap). Same products, same order of rescales and accumulation.
"""
import triton
import triton.language as tl

from flashcheck.kernels.tiles import (LN2, LOG2E, full_start, head_ptr, inner_tiles, load_rows, load_rows_t,
                                      partial_start, query_block, visible)


@triton.jit
def _fwd_qk(q, k_src, offs_n, offs_d, start_n, Nk, stride_kn,
            MASKED: tl.constexpr, HEAD_D: tl.constexpr, DOT_PRECISION: tl.constexpr,
            KV_DESC: tl.constexpr):
    """Q Kᵀ of one key tile, unscaled: the tile's first tensor-core product (its scaling is the
    softmax's first step, so that the pipelined loop can keep this product in flight: `_fwd_full_tiles_
    pipelined`). k_src: the head's K tensor descriptor (KV_DESC) or base pointer."""
    # K tile transposed, (BLOCK_D, BLOCK_N); rows past Nk and padded head-dim columns read as 0.
    if KV_DESC:
        kT = k_src.load([start_n, 0]).T
    else:
        kT = load_rows_t(k_src, offs_n, offs_d, stride_kn, Nk, HEAD_D, MASKED)
    # S = Q Kᵀ   /   s[i,j] = Σ_c q[i,c] k[j,c]
    return tl.dot(q, kT, input_precision=DOT_PRECISION)


@triton.jit
def _fwd_shift(m2_i, qk, qk_scale2, mask_base, offs_m, offs_n, Nq, Nk, stride_mm, stride_mn, off_lo, off_hi,
               MASKED: tl.constexpr, BAND: tl.constexpr, HAS_MASK: tl.constexpr):
    """First half of the online-softmax step of one key tile, from its Q Kᵀ (`_fwd_qk`): logits, mask,
    running maximum and the exponents S2 − m2. Returns (m2_new, m2_shift, S2 − m2_shift). The last
    reader of Q Kᵀ (the compiler may fuse the scaling into the subtraction), so that the pipelined
    loop can issue the next product into its registers before the exponentials (`_fwd_exp`)."""
    # S2 = Q Kᵀ · scale · log2(e)   /   s2[i,j] = scale · log2(e) · s[i,j]
    s2 = qk * qk_scale2
    if MASKED or HAS_MASK:
        vis = visible(offs_m, offs_n, mask_base, Nq, Nk, off_lo, off_hi, stride_mm, stride_mn,
                      BAND, HAS_MASK)
        s2 = tl.where(vis, s2, float("-inf"))
    # m2_new = max(m2_old, rowmax(S2))
    m2_new = tl.maximum(m2_i, tl.max(s2, 1))
    if MASKED or HAS_MASK:
        # Safe max: a row with nothing visible yet keeps m2 = −inf; shift by 0 instead so that
        # (−inf) − (−inf) never reaches exp2 (it gives exp2(−inf) = 0 for every entry).
        m2_shift = tl.where(m2_new == float("-inf"), 0.0, m2_new)
    else:
        m2_shift = m2_new
    return m2_new, m2_shift, s2 - m2_shift[:, None]


@triton.jit
def _fwd_exp(l_i, m2_i, m2_shift, x, P_SPLIT: tl.constexpr, OPERAND: tl.constexpr):
    """Second half of the softmax step, from the exponents x = S2 − m2_shift (`_fwd_shift`): P̃, the
    rescale alpha and the running sum. Returns (l_new, alpha, P_hi, P_lo), P̃ in the dtype OPERAND of
    the P·V product (P_lo = P_hi unless P_SPLIT)."""
    # P̃ = exp2(S2 − m2_new)   /   p[i,j] = 2^(s2[i,j] − m2_new[i])
    p = tl.math.exp2(x)
    # alpha = exp2(m2_old − m2_new): rescales what was accumulated under the old maximum
    alpha = tl.math.exp2(m2_i - m2_shift)
    # l_new = alpha · l_old + rowsum(P̃)   /   l[i] = alpha[i] l[i] + Σ_j p[i,j]
    # l runs in fp64 (`Arithmetic.l_accumulate`): in fp32 its T tile additions cost up to u Σ_t l_t, ~u T / 2
    # relative (T = N_k / BLOCK_N), the largest term of the LSE bound at long N (91% at N_k = 64k); in fp64
    # they cost 2^-53 each, for one fp64 multiply-add per row and tile (bench/NOTES.md, "l in fp64").
    # The tile's rowsum stays an fp32 tl.sum (exact in fp64 after the conversion).
    l_i = l_i * alpha.to(tl.float64) + tl.sum(p, 1).to(tl.float64)
    p_hi = p.to(OPERAND)
    if P_SPLIT:
        # P − P_hi is exact in fp32 (Sterbenz: P/2 <= P_hi <= 2P); its rounding P_lo carries the
        # next 8 (bf16) / 11 (fp16) bits of P into a second product. (One dot [P_hi | P_lo]·[V; V]
        # instead of two ran 2.8–7× slower on the H100: the operand reshuffle; bench/NOTES.md.)
        p_lo = (p - p_hi.to(tl.float32)).to(OPERAND)
    else:
        p_lo = p_hi
    return l_i, alpha, p_hi, p_lo


@triton.jit
def _fwd_softmax(l_i, m2_i, qk, qk_scale2, mask_base, offs_m, offs_n, Nq, Nk, stride_mm, stride_mn,
                 off_lo, off_hi, MASKED: tl.constexpr, BAND: tl.constexpr, HAS_MASK: tl.constexpr,
                 P_SPLIT: tl.constexpr, OPERAND: tl.constexpr):
    """The online-softmax step of one key tile from its Q Kᵀ: `_fwd_shift` then `_fwd_exp`.
    Returns (m2_new, l_new, alpha, P_hi, P_lo)."""
    m2_new, m2_shift, x = _fwd_shift(m2_i, qk, qk_scale2, mask_base, offs_m, offs_n, Nq, Nk, stride_mm,
                                     stride_mn, off_lo, off_hi, MASKED, BAND, HAS_MASK)
    l_i, alpha, p_hi, p_lo = _fwd_exp(l_i, m2_i, m2_shift, x, P_SPLIT, OPERAND)
    return m2_new, l_i, alpha, p_hi, p_lo


@triton.jit
def _fwd_pv(acc, alpha, p_hi, p_lo, v_src, offs_n, offs_dv, start_n, Nk, stride_vn,
            MASKED: tl.constexpr, HEAD_DV: tl.constexpr, DOT_PRECISION: tl.constexpr,
            P_SPLIT: tl.constexpr, KV_DESC: tl.constexpr):
    """The tile's second tensor-core product into the rescaled accumulator. v_src: the head's V
    tensor descriptor (KV_DESC) or base pointer."""
    if KV_DESC:
        v = v_src.load([start_n, 0])
    else:
        v = load_rows(v_src, offs_n, offs_dv, stride_vn, Nk, HEAD_DV, MASKED)
    # acc = diag(alpha) acc + P̃ V   /   acc[i,c] = alpha[i] acc[i,c] + Σ_j p[i,j] v[j,c]
    acc = acc * alpha[:, None]
    acc = tl.dot(p_hi, v, acc, input_precision=DOT_PRECISION)
    if P_SPLIT:
        acc = tl.dot(p_lo, v, acc, input_precision=DOT_PRECISION)
    return acc


@triton.jit
def _fwd_tile(acc, l_i, m2_i, q, k_src, v_src, mask_base, start_n, offs_m, offs_d, offs_dv,
              Nq, Nk, stride_kn, stride_vn, stride_mm, stride_mn, off_lo, off_hi, qk_scale2,
              MASKED: tl.constexpr, BAND: tl.constexpr, HAS_MASK: tl.constexpr,
              BLOCK_N: tl.constexpr, HEAD_D: tl.constexpr, HEAD_DV: tl.constexpr,
              DOT_PRECISION: tl.constexpr, P_SPLIT: tl.constexpr, KV_DESC: tl.constexpr):
    """One key/value tile of the online-softmax recurrence (seed 002, FA2 Algorithm 1 body):
    Q Kᵀ, softmax step, P̃ V, one after the other."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    qk = _fwd_qk(q, k_src, offs_n, offs_d, start_n, Nk, stride_kn, MASKED, HEAD_D, DOT_PRECISION, KV_DESC)
    m2_i, l_i, alpha, p_hi, p_lo = _fwd_softmax(l_i, m2_i, qk, qk_scale2, mask_base, offs_m, offs_n, Nq, Nk,
                                                stride_mm, stride_mn, off_lo, off_hi, MASKED, BAND,
                                                HAS_MASK, P_SPLIT, q.dtype)
    acc = _fwd_pv(acc, alpha, p_hi, p_lo, v_src, offs_n, offs_dv, start_n, Nk, stride_vn, MASKED,
                  HEAD_DV, DOT_PRECISION, P_SPLIT, KV_DESC)
    return acc, l_i, m2_i


@triton.jit
def _fwd_full_tiles_pipelined(acc, l_i, m2_i, q, k_src, v_src, mask_base, n_full, fib, f_lo,
                              offs_m, offs_d, offs_dv, Nq, Nk, stride_kn, stride_vn, stride_mm,
                              stride_mn, off_lo, off_hi, qk_scale2,
                              BAND: tl.constexpr, HAS_MASK: tl.constexpr, SPARSE: tl.constexpr,
                              BLOCK_N: tl.constexpr, HEAD_D: tl.constexpr, HEAD_DV: tl.constexpr,
                              DOT_PRECISION: tl.constexpr, P_SPLIT: tl.constexpr,
                              KV_DESC: tl.constexpr):
    """The n_full fully visible tiles, software-pipelined by hand (FA3's intra-warpgroup overlap):
    step t runs P̃ V of tile t − 1, forms tile t's logits, issues Q K_{t+1}ᵀ, then tile t's softmax
    step, so the tensor cores compute S_{t+1} while the exp2/max/sum of tile t run (two S tiles live).

    The order is what the compilers need to keep the product in flight (read from the sm_90a TTGIR
    and ptxas -v: bench/wgmma_schedule.py). Triton's Hopper MMA pipeliner (WGMMAPipeline.cpp,
    `dotCanBeProperlyAsync`) leaves a product running only if nothing in its own iteration reads it
    (hence Q Kᵀ carried unscaled) and the next iteration reads it after a `wait 0` (the one after
    P̃ V, hence P̃ V first; in the order softmax, P̃ V, it waits right after the product). ptxas
    serializes every wgmma of the kernel (C7514) if a register copy reads a running product: the
    loop-carried Q Kᵀ needs none only if its registers are free when the next one is issued, hence the
    logits (a multiply into other registers) formed before the issue.

    Per tile the same `_fwd_qk`, `_fwd_shift`, `_fwd_exp`, `_fwd_pv` as `_fwd_tile`, tiles in the
    same order: bit for bit its result. Tile 0's product and softmax come before the loop, the last
    tile's softmax and the last two P̃ V after it: nothing past tile n_full − 1 is read (n_full = 0:
    nothing at all)."""
    if n_full > 0:
        start_0 = full_start(0, fib, f_lo, SPARSE, BLOCK_N)
        qk = _fwd_qk(q, k_src, start_0 + tl.arange(0, BLOCK_N), offs_d, start_0, Nk, stride_kn, False,
                     HEAD_D, DOT_PRECISION, KV_DESC)
        m2_i, l_i, alpha, p_hi, p_lo = _fwd_softmax(l_i, m2_i, qk, qk_scale2, mask_base, offs_m,
                                                    start_0 + tl.arange(0, BLOCK_N), Nq, Nk, stride_mm,
                                                    stride_mn, off_lo, off_hi, False, BAND, HAS_MASK,
                                                    P_SPLIT, q.dtype)
        if n_full > 1:
            start_1 = full_start(1, fib, f_lo, SPARSE, BLOCK_N)
            qk = _fwd_qk(q, k_src, start_1 + tl.arange(0, BLOCK_N), offs_d, start_1, Nk, stride_kn, False,
                         HEAD_D, DOT_PRECISION, KV_DESC)
            for t in range(1, n_full - 1):
                start_p = full_start(t - 1, fib, f_lo, SPARSE, BLOCK_N)
                acc = _fwd_pv(acc, alpha, p_hi, p_lo, v_src, start_p + tl.arange(0, BLOCK_N), offs_dv, start_p,
                              Nk, stride_vn, False, HEAD_DV, DOT_PRECISION, P_SPLIT, KV_DESC)
                start_c = full_start(t, fib, f_lo, SPARSE, BLOCK_N)
                m2_new, m2_shift, x = _fwd_shift(m2_i, qk, qk_scale2, mask_base, offs_m,
                                                 start_c + tl.arange(0, BLOCK_N), Nq, Nk, stride_mm, stride_mn,
                                                 off_lo, off_hi, False, BAND, HAS_MASK)
                start_n = full_start(t + 1, fib, f_lo, SPARSE, BLOCK_N)
                # S_{t+1} in flight during tile t's exponentials: nothing in this iteration reads it.
                qk = _fwd_qk(q, k_src, start_n + tl.arange(0, BLOCK_N), offs_d, start_n, Nk, stride_kn, False,
                             HEAD_D, DOT_PRECISION, KV_DESC)
                l_i, alpha, p_hi, p_lo = _fwd_exp(l_i, m2_i, m2_shift, x, P_SPLIT, q.dtype)
                m2_i = m2_new
            # The last tile: P̃ V of tile n_full − 2, then its softmax step.
            start_p = full_start(n_full - 2, fib, f_lo, SPARSE, BLOCK_N)
            acc = _fwd_pv(acc, alpha, p_hi, p_lo, v_src, start_p + tl.arange(0, BLOCK_N), offs_dv, start_p,
                          Nk, stride_vn, False, HEAD_DV, DOT_PRECISION, P_SPLIT, KV_DESC)
            start_c = full_start(n_full - 1, fib, f_lo, SPARSE, BLOCK_N)
            m2_i, l_i, alpha, p_hi, p_lo = _fwd_softmax(l_i, m2_i, qk, qk_scale2, mask_base,
                                                        offs_m, start_c + tl.arange(0, BLOCK_N), Nq, Nk,
                                                        stride_mm, stride_mn, off_lo, off_hi, False, BAND,
                                                        HAS_MASK, P_SPLIT, q.dtype)
        start_p = full_start(n_full - 1, fib, f_lo, SPARSE, BLOCK_N)
        acc = _fwd_pv(acc, alpha, p_hi, p_lo, v_src, start_p + tl.arange(0, BLOCK_N), offs_dv, start_p, Nk,
                      stride_vn, False, HEAD_DV, DOT_PRECISION, P_SPLIT, KV_DESC)
    return acc, l_i, m2_i


@triton.jit
def attn_fwd_kernel(
    Q, K, V, O, ORes, LSE, Mask,
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
    DOT_PRECISION: tl.constexpr, P_SPLIT: tl.constexpr, WRITE_RES: tl.constexpr,
    KV_DESC: tl.constexpr, WARP_SPEC: tl.constexpr, PIPE_QK: tl.constexpr, HEAVY_FIRST: tl.constexpr,
):
    tl.static_assert(BLOCK_M >= 16 and BLOCK_N >= 16, "tl.dot needs tiles of at least 16")
    tl.static_assert(BLOCK_D >= HEAD_D and BLOCK_DV >= HEAD_DV, "head dim padded to the tile")
    tl.static_assert(BLOCK_D >= 16 and BLOCK_DV >= 16, "tl.dot needs K >= 16")
    tl.static_assert(not (PIPE_QK and WARP_SPEC),
                     "the hand-pipelined loop (PIPE_QK) and warp specialization are alternatives")
    pid_m, pid_bh = query_block(HEAVY_FIRST)
    off_b = pid_bh // Hq
    off_h = pid_bh % Hq
    off_hkv = off_h // GROUP  # GQA: query head h reads kv head h // (Hq // Hkv)
    k_base = head_ptr(K, off_b, off_hkv, stride_kb, stride_kh)
    v_base = head_ptr(V, off_b, off_hkv, stride_vb, stride_vh)
    mask_base = head_ptr(Mask, off_b, off_h, stride_mb, stride_mh)
    if KV_DESC:
        # One (Nk, d) descriptor per head: tiles crossing Nk or the head dim are zero-filled.
        k_src = tl.make_tensor_descriptor(k_base, shape=[Nk, HEAD_D], strides=[stride_kn, 1],
                                          block_shape=[BLOCK_N, BLOCK_D])
        v_src = tl.make_tensor_descriptor(v_base, shape=[Nk, HEAD_DV], strides=[stride_vn, 1],
                                          block_shape=[BLOCK_N, BLOCK_DV])
    else:
        k_src = k_base
        v_src = v_base

    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    q = load_rows(head_ptr(Q, off_b, off_h, stride_qb, stride_qh), offs_m, offs_d, stride_qm, Nq,
                  HEAD_D, True)

    m2_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float64)  # fp64: see _fwd_exp
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)
    qk_scale2 = sm_scale * LOG2E  # scale · log2(e): logits straight into the base-2 domain

    n_partial, n_full, lo, f_lo, f_hi, ib, fib = inner_tiles(
        KvNum, KvIdx, FullNum, FullIdx, off_b, off_h, pid_m,
        stride_nb, stride_nh, stride_nm, stride_ib, stride_ih, stride_im,
        start_m, tl.minimum(start_m + BLOCK_M, Nq), Nk, off_lo, off_hi, BAND, SPARSE, BLOCK_N)
    # Partial tiles: bounds, band and dense mask applied elementwise.
    for t in range(0, n_partial):
        start_n = partial_start(t, ib, lo, f_lo, f_hi, SPARSE, BLOCK_N)
        acc, l_i, m2_i = _fwd_tile(acc, l_i, m2_i, q, k_src, v_src, mask_base, start_n,
                                   offs_m, offs_d, offs_dv, Nq, Nk, stride_kn, stride_vn,
                                   stride_mm, stride_mn, off_lo, off_hi, qk_scale2,
                                   True, BAND, HAS_MASK, BLOCK_N, HEAD_D, HEAD_DV,
                                   DOT_PRECISION, P_SPLIT, KV_DESC)
    # Full tiles: no elementwise mask (a band-full tile still needs the dense mask, if any).
    if PIPE_QK:
        acc, l_i, m2_i = _fwd_full_tiles_pipelined(
            acc, l_i, m2_i, q, k_src, v_src, mask_base, n_full, fib, f_lo, offs_m, offs_d, offs_dv,
            Nq, Nk, stride_kn, stride_vn, stride_mm, stride_mn, off_lo, off_hi, qk_scale2,
            BAND, HAS_MASK and not SPARSE, SPARSE, BLOCK_N, HEAD_D, HEAD_DV, DOT_PRECISION, P_SPLIT,
            KV_DESC)
    else:
        for t in tl.range(0, n_full, warp_specialize=WARP_SPEC):
            start_n = full_start(t, fib, f_lo, SPARSE, BLOCK_N)
            acc, l_i, m2_i = _fwd_tile(acc, l_i, m2_i, q, k_src, v_src, mask_base, start_n,
                                       offs_m, offs_d, offs_dv, Nq, Nk, stride_kn, stride_vn,
                                       stride_mm, stride_mn, off_lo, off_hi, qk_scale2,
                                       False, BAND, HAS_MASK and not SPARSE, BLOCK_N, HEAD_D,
                                       HEAD_DV, DOT_PRECISION, P_SPLIT, KV_DESC)

    # O = diag(l)^−1 acc, the one division; a row with nothing visible has l = 0 and acc = 0 → O = 0.
    empty = l_i == 0.0
    # one rounding of l into fp32, for the division and log2 (fp32 instructions)
    l_safe = tl.where(empty, 1.0, l_i.to(tl.float32))
    acc = acc / l_safe[:, None]
    # LSE = ln 2 · (m2 + log2 l)  (natural log; −inf for a fully masked row)
    lse = tl.where(empty, float("-inf"), (m2_i + tl.math.log2(l_safe)) * LN2)
    omask = (offs_m[:, None] < Nq) & (offs_dv[None, :] < HEAD_DV)
    o_off = offs_m[:, None] * stride_om + offs_dv[None, :]
    o = acc.to(O.dtype.element_ty)
    tl.store(head_ptr(O, off_b, off_h, stride_ob, stride_oh) + o_off, o, mask=omask)
    if WRITE_RES:
        # O_res = round(O_fp32 − round(O_fp32)): the difference is exact in fp32; O + O_res
        # carries O to ~2× the output precision for the backward's Δ (O_res has O's strides).
        res = (acc - o.to(tl.float32)).to(ORes.dtype.element_ty)
        tl.store(head_ptr(ORes, off_b, off_h, stride_ob, stride_oh) + o_off, res, mask=omask)
    tl.store(LSE + pid_bh.to(tl.int64) * Nq + offs_m, lse, mask=offs_m < Nq)

"""Tile helpers shared by the forward (`triton_fwd`) and backward (`triton_bwd`) kernels.

- constants of the base-2 domain (`LOG2E`, `LN2`) as `tl.constexpr`;
- `head_ptr`: the int64 batch/head base of a (B, H, N, d) tensor; `query_block`: a program's query block;
- `load_rows` / `load_rows_t`: an (rows × head-dim) tile, or its transpose, with the row bound
  checked only where a tile can cross the sequence end (`CHECK_ROWS`);
- `visible`: the elementwise visibility of a (query × key) tile (ARCHITECTURE.md: bounds, band,
  dense mask);
- `inner_tiles` / `partial_start` / `full_start`: which inner tiles an outer block visits — masked
  tiles (elementwise visibility) and fully visible tiles (none).
"""
import triton
import triton.language as tl

# Logits live in the base-2 domain (s2 = s · log2 e) so that exp is the exp2 instruction.
LOG2E: tl.constexpr = tl.constexpr(1.4426950408889634)  # log2(e)
LN2: tl.constexpr = tl.constexpr(0.6931471805599453)  # ln(2) = 1 / log2(e)


@triton.jit
def head_ptr(ptr, off_b, off_h, stride_b, stride_h):
    """Base of head `off_h` of batch `off_b`, in int64: B·H·N·d may exceed 2^31 when one head does not."""
    return ptr + off_b.to(tl.int64) * stride_b + off_h.to(tl.int64) * stride_h


GROUP_PROGRAMS: tl.constexpr = tl.constexpr(512)  # programs a head group holds at least (longest first): 2-4 waves
# on 132 SMs, whose K / V (a group's heads) stays in L2 (<= 32 MB at d = 128 N = 1k, less at longer N)


@triton.jit
def grouped_block(GROUPED: tl.constexpr, DESCENDING: tl.constexpr):
    """(block, batch·head) of this program: (program_id(0), program_id(1)), or under GROUPED longest first across
    heads. The programs, in the order they are dispatched (program_id(0) fastest), are cut into groups of whole heads,
    at least GROUP_PROGRAMS programs each; within a group the blocks run in order (from the last one if DESCENDING),
    each across the group's heads. Under a band the heaviest blocks are a head's last query blocks (the forward's and
    the dQ kernel's programs: DESCENDING) or its first key blocks (the dK/dV kernel's): so the kernel's last wave is
    the last group's lightest blocks (its tail the shortest programs, not a head's heaviest block dispatched near the
    end), while the programs running together read a few heads' K / V, or Q / dO (L2)."""
    pid = tl.program_id(0)
    pid_bh = tl.program_id(1)
    if GROUPED:
        n_m = tl.num_programs(0)
        heads = tl.cdiv(GROUP_PROGRAMS, n_m)  # a group's heads
        # the heads that do not fill a group make the first group, so that the last one (the tail) is whole: with
        # the short group last, list scheduling gave 0.89-0.99x the per-head order on some grids, with it first
        # 1.00-1.24x on all (bench/NOTES.md, "Session 2026-11-29d")
        first = tl.num_programs(1) % heads
        lin = pid_bh * n_m + pid  # dispatch order
        k = lin - first * n_m
        in_first = k < 0
        group = tl.where(in_first, 0, k // (heads * n_m))
        in_group = tl.where(in_first, first, heads)
        r = tl.where(in_first, lin, k - group * heads * n_m)
        pid = r // in_group
        if DESCENDING:
            pid = n_m - 1 - pid
        pid_bh = tl.where(in_first, 0, first + group * heads) + r % in_group
    return pid, pid_bh


@triton.jit
def query_block(HEAVY_FIRST: tl.constexpr):
    """(query block, batch·head) of this program: under TileConfig.heavy_first longest first (`grouped_block`, the
    last query blocks first: under a band they see the most keys)."""
    return grouped_block(HEAVY_FIRST, True)


@triton.jit
def load_rows(base, offs_r, offs_c, stride_r, n_rows, N_COLS: tl.constexpr, CHECK_ROWS: tl.constexpr):
    """Tile [r, c] = base[offs_r[r] · stride_r + offs_c[c]] (rows of a (N, d) head), shape (R, C).
    Columns past the head dim N_COLS (padding to a power of 2) and, if CHECK_ROWS, rows past n_rows
    read as 0, so they add nothing to any product."""
    if CHECK_ROWS:
        msk = (offs_r[:, None] < n_rows) & (offs_c[None, :] < N_COLS)
    else:
        msk = offs_c[None, :] < N_COLS
    return tl.load(base + offs_r[:, None] * stride_r + offs_c[None, :], mask=msk, other=0.0)


@triton.jit
def load_rows_t(base, offs_r, offs_c, stride_r, n_rows, N_COLS: tl.constexpr, CHECK_ROWS: tl.constexpr):
    """`load_rows` transposed, loaded as such: shape (C, R) (Kᵀ, Vᵀ as the right operand of a dot)."""
    if CHECK_ROWS:
        msk = (offs_r[None, :] < n_rows) & (offs_c[:, None] < N_COLS)
    else:
        msk = offs_c[:, None] < N_COLS
    return tl.load(base + offs_r[None, :] * stride_r + offs_c[:, None], mask=msk, other=0.0)


@triton.jit
def visible(offs_m, offs_n, mask_base, Nq, Nk, off_lo, off_hi, stride_mm, stride_mn,
            BAND: tl.constexpr, HAS_MASK: tl.constexpr):
    """Elementwise visibility of an (offs_m × offs_n) tile, rows = queries: key j is visible from
    query i iff i < Nq, j < Nk, i + off_lo <= j <= i + off_hi (BAND) and the dense mask is set."""
    vis = (offs_m[:, None] < Nq) & (offs_n[None, :] < Nk)
    if BAND:
        vis = vis & (offs_n[None, :] >= offs_m[:, None] + off_lo) \
            & (offs_n[None, :] <= offs_m[:, None] + off_hi)
    if HAS_MASK:
        mv = tl.load(mask_base + offs_m[:, None].to(tl.int64) * stride_mm
                     + offs_n[None, :].to(tl.int64) * stride_mn,
                     mask=(offs_m[:, None] < Nq) & (offs_n[None, :] < Nk), other=0)
        vis = vis & (mv != 0)
    return vis


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
def inner_tiles(Num, Idx, FullNum, FullIdx, off_b, off_h, pid_outer,
                stride_nb, stride_nh, stride_nm, stride_ib, stride_ih, stride_im,
                a0, a1, n_in, off_lo, off_hi,
                BAND: tl.constexpr, SPARSE: tl.constexpr, BLOCK_IN: tl.constexpr):
    """Which inner tiles the outer block [a0, a1) (block `pid_outer` of head (off_b, off_h)) visits:
    (n_partial, n_full, lo, f_lo, f_hi, idx, fidx) — how many masked and unmasked tiles, the band's
    tile range (`_band_range`: masked [lo, f_lo) ∪ [f_hi, hi), full [f_lo, f_hi)) and, block-sparse,
    the block's lists of partial and full tiles (their lengths from Num, FullNum)."""
    nb = head_ptr(Num, off_b, off_h, stride_nb, stride_nh) + pid_outer * stride_nm
    fnb = head_ptr(FullNum, off_b, off_h, stride_nb, stride_nh) + pid_outer * stride_nm
    idx = head_ptr(Idx, off_b, off_h, stride_ib, stride_ih) + pid_outer * stride_im
    fidx = head_ptr(FullIdx, off_b, off_h, stride_ib, stride_ih) + pid_outer * stride_im
    lo, f_lo, f_hi, hi = _band_range(a0, a1, n_in, off_lo, off_hi, BAND, BLOCK_IN)
    if SPARSE:
        n_partial = tl.load(nb)
        n_full = tl.load(fnb)
    else:
        n_partial = (f_lo - lo + hi - f_hi) // BLOCK_IN
        n_full = (f_hi - f_lo) // BLOCK_IN
    return n_partial, n_full, lo, f_lo, f_hi, idx, fidx


@triton.jit
def partial_start(t, idx_ptr, lo, f_lo, f_hi, SPARSE: tl.constexpr, BLOCK_IN: tl.constexpr):
    """Start of the t-th masked tile: from the block-sparse list, or the t-th tile of
    [lo, f_lo) followed by [f_hi, hi)."""
    if SPARSE:
        start = tl.load(idx_ptr + t) * BLOCK_IN
    else:
        start = lo + t * BLOCK_IN
        start = tl.where(start < f_lo, start, start - f_lo + f_hi)
    return start


@triton.jit
def full_start(t, idx_ptr, f_lo, SPARSE: tl.constexpr, BLOCK_IN: tl.constexpr):
    """Start of the t-th fully visible tile."""
    if SPARSE:
        start = tl.load(idx_ptr + t) * BLOCK_IN
    else:
        start = f_lo + t * BLOCK_IN
    return start

"""The dK/dV kernel with three consumer warpgroups (192 keys a program, HALF_N = 64 each) as a variant source for
bench/bwd_variants.py (2026-11-27h, d = 64: 0.81x the kernel unbanded, 1.09x causal; 174 spills on Triton 3.6 at 160
registers a consumer, the most three consumers and a producer get: not taken).

    python3 bench/dkdv_wg3_variant.py OUT.py [REGS]   # then: bench/bwd_variants.py --variant wg3=OUT.py:192
"""
import sys
src = open('kernels/gluon_bwd.py').read()
def rep(old, new, count=1):
    global src
    assert src.count(old) == count, (old, src.count(old))
    src = src.replace(old, new)
rep('''    mbarrier.expect(kv_ready, 2 * k_desc.block_type.nbytes + 2 * v_desc.block_type.nbytes)
    for w in gl.static_range(2):''', '''    mbarrier.expect(kv_ready, 3 * k_desc.block_type.nbytes + 3 * v_desc.block_type.nbytes)
    for w in gl.static_range(3):''')
rep('''gl.static_assert(BLOCK_N == 2 * HALF_N, "two consumer warpgroups of HALF_N keys each")''',
    '''gl.static_assert(BLOCK_N == 3 * HALF_N, "three consumer warpgroups of HALF_N keys each")''')
rep('''    k_halves = gl.allocate_shared_memory(dtype, [2, 1, 1, HALF_N, HEAD_D], k_desc.layout)
    v_halves = gl.allocate_shared_memory(dtype, [2, 1, 1, HALF_N, HEAD_D], v_desc.layout)''',
    '''    k_halves = gl.allocate_shared_memory(dtype, [3, 1, 1, HALF_N, HEAD_D], k_desc.layout)
    v_halves = gl.allocate_shared_memory(dtype, [3, 1, 1, HALF_N, HEAD_D], v_desc.layout)''')
cons1 = '''        (_consumer, (1, dk_desc, dv_desc, k_halves, v_halves, q_ring, do_ring, lse_ring, delta_ring, kv_ready,
                     q_ready, do_ready, tile_free, sm_scale, off_b, off_hkv, Hq, start_n, Nq, Nk, off_lo, off_hi, GROUP,
                     HEAD_D, BLOCK_N, BLOCK_M, STAGES, BAND)),
'''
rep(cons1, cons1 + cons1.replace("(_consumer, (1,", "(_consumer, (2,"))
i = src.index("def attn_bwd_dkdv_gluon_kernel(")
j = src.index("# --------------------------------------------------------------------------------------------------- the dQ kernel")
body = src[i:j]
assert body.count("    ], [4, 1], [CONSUMER_REGS, 24])") == 1
assert body.count("    tile_free = barriers(STAGES, 2)") == 1
body = body.replace("    tile_free = barriers(STAGES, 2)", "    tile_free = barriers(STAGES, 3)")
src = src[:i] + body.replace("    ], [4, 1], [CONSUMER_REGS, 24])", "    ], [4, 4, 1], [REGS3, REGS3, 24])") + src[j:]
regs = int(sys.argv[2]) if len(sys.argv) > 2 else 160
rep('''HALF_N: gl.constexpr = gl.constexpr(64)''', f'''REGS3: gl.constexpr = gl.constexpr({regs})  # 3 consumers x 128 x REGS3 + 128 x 24 <= 64K
HALF_N: gl.constexpr = gl.constexpr(64)''')
open(sys.argv[1], 'w').write(src)

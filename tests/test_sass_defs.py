"""bench/sass_defs.py, the check the compile test runs on every Gluon forward build (a wgmma descriptor read from a
uniform register some path leaves unwritten: ptxas 12.8's miscompile of a loop around the block, bench/NOTES.md
"Session 2026-11-29i"), shown to catch what it is for on SASS written by hand in cuobjdump's form: under Triton 3.9
no build has the fault, so the compile test alone could not fail. And its count of spills inside the tile loops
(loop_local, in bench/compile_forward.sass_counts), and of the loads a tile issues before its first product
(loads_before_products, held by the dK/dV compile test)."""
from bench.sass_defs import loads_before_products, loop_local, undefined_descriptor_reads


def _sass(*instructions: str) -> str:
    """cuobjdump -sass lines, addresses 0x10 apart."""
    return "\n".join(f"        /*{16 * i:04x}*/                   {x} ;" for i, x in enumerate(instructions))


# the shape of the fault: Q's descriptor for the next k-step (UR4:UR5) written only in the partial loop's preheader,
# which a block without a partial tile branches past, then copied into the full tiles' product's descriptor registers
_PREHEADER_ONLY = _sass(
    "ULDC.64 UR16, c[0x0][0x210]", "UMOV UR18, 0x1", "UMOV UR19, 0x40000040",
    "@!P2 BRA 0x70",  # no partial tile: past the preheader
    "UIADD3 UR6, UR16, 0x2, URZ", "UMOV UR4, UR6", "UMOV UR5, 0x40000040",
    "UMOV UR36, UR4", "UMOV UR37, UR5", "UMOV UR38, UR18", "UMOV UR39, UR19",  # /*0070*/: the full tiles
    "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR16], RZ, !UPT", "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR36], R24, gsb0",
    "EXIT")


def test_a_descriptor_written_on_one_path_only_is_reported():
    report = undefined_descriptor_reads(_PREHEADER_ONLY)
    assert [(address, regs) for address, _, regs in report] == [(0xc0, [36, 37])], report


def test_descriptors_written_on_every_path_are_not():
    # the preheader's computation above the branch (as ptxas 12.9 and 13.0 place it): every path writes UR4:UR5
    fixed = _sass(
        "ULDC.64 UR16, c[0x0][0x210]", "UMOV UR18, 0x1", "UMOV UR19, 0x40000040",
        "UIADD3 UR6, UR16, 0x2, URZ", "UMOV UR4, UR6", "UMOV UR5, 0x40000040",
        "@!P2 BRA 0x80", "NOP",
        "UMOV UR36, UR4", "UMOV UR37, UR5", "UMOV UR38, UR18", "UMOV UR39, UR19",  # /*0080*/
        "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR16], RZ, !UPT", "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR36], R24, gsb0",
        "EXIT")
    assert undefined_descriptor_reads(fixed) == []


def test_a_predicated_write_is_not_a_write_on_every_path():
    sass = _sass("ULDC.64 UR16, c[0x0][0x210]", "@P0 UMOV UR18, 0x1", "UMOV UR19, 0x40000040",
                 "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR16], RZ, !UPT", "EXIT")
    assert [regs for _, _, regs in undefined_descriptor_reads(sass)] == [[18]]


def test_a_register_operand_product_reads_only_its_b_descriptor():
    # P V with P in registers: gdesc[UR4] names B in UR6:UR7 only
    sass = _sass("UMOV UR6, 0x1", "UMOV UR7, 0x40000040",
                 "HGMMA.64x128x16.F32.BF16 R88, R24, gdesc[UR4].tnspB, R88", "EXIT")
    assert undefined_descriptor_reads(sass) == []
    assert [regs for _, _, regs in undefined_descriptor_reads(sass.replace("UMOV UR7,", "UMOV UR9,"))] == [[7]]


def test_partition_entries_reached_through_brx_start_from_the_prologue_writes():
    # the warp-specialize dispatch: a BRX through a constant table; its targets are the code no edge reaches. The
    # prologue's writes reach them, a write inside one partition does not reach another
    sass = _sass("ULDC.64 UR16, c[0x0][0x210]", "UMOV UR18, 0x1", "BRX R2 -0x40",
                 "UMOV UR19, 0x40000040", "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR16], RZ, !UPT", "EXIT",
                 "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR16], RZ, !UPT", "EXIT")
    assert [(a, regs) for a, _, regs in undefined_descriptor_reads(sass)] == [(0x60, [19])]


def test_spills_are_counted_inside_the_tile_loops_only():
    """bench/sass_defs.py loop_local: local-memory instructions inside a backward branch's range that holds an HGMMA
    (reloaded every tile); one before the loop, inside a barrier's spin loop (no HGMMA) or under an unconditional
    jump back (a warp-specialize partition's return to its dispatch) is not counted."""
    sass = _sass(
        "STL [R1], R2",  # before the loop: once a program
        "LDL R3, [R1]", "HGMMA.64x64x16.F32.BF16 R184, gdesc[UR44], RZ, !UPT", "LDL R4, [R1+0x4]",  # /*0010*/: a tile
        "@P0 BRA 0x10",
        "SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [R5], R6", "LDL R7, [R1+0x8]", "@!P1 BRA 0x50",  # a spin loop
        "BRA 0x0",  # back to the dispatch
        "EXIT")
    assert loop_local(sass) == 2


def test_loads_are_counted_from_the_last_wgmma_wait_to_the_first_product_step():
    """bench/sass_defs.py loads_before_products: per tile, the LDS.64 between the previous tile's final wgmma wait
    and the next product started from zero; loads after that step (the LSE read once Sᵀ is issued: main before
    2026-11-30) and the first tile (no wait before it) are not counted."""
    tile = ("LDS.64 R14, [R13+0x28000]", "HGMMA.64x64x16.F32.BF16 R184, gdesc[UR48], RZ, !UPT",
            "HGMMA.64x64x16.F32.BF16 R184, gdesc[UR4], R184, gsb0", "LDS.64 R16, [R13+0x28020]",
            "HGMMA.64x64x16.F32.BF16 R152, gdesc[UR20], RZ, !UPT", "WARPGROUP.DEPBAR.LE gsb0, 0x0")
    no_loads = tuple(t for t in tile if not t.startswith("LDS"))
    assert loads_before_products(_sass(*tile, *tile, *tile, "EXIT")) == [1, 1]  # R16's load: after the first step
    assert loads_before_products(_sass(*tile, *no_loads, "EXIT")) == [0]
    assert loads_before_products(_sass(*tile, "LDS.64 R18, [R13+0x28040]", "@P0 LDS.64 R20, [R13+0x28060]",
                                       *tile, "EXIT")) == [3]

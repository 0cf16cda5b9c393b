"""bench/ncu_source.py, the reader of an Nsight Compute report's SASS page (stall samples by opcode and by
instruction), on a page written by hand in its CSV form: notes before the table, a column order that differs between
ncu versions, predicated instructions, thousands separators; and --hot, the tile loops' lines by stall reason."""
import csv

import gzip

from bench.ncu_source import hot_lines, main, opcode, stall_table

_HEADER = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (Not-issued Samples)"]
_ROWS = [
    ["0x1440", "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR55+0x28730], R5", "120", "100"],
    ["0x15f0", "HGMMA.64x64x16.F32.BF16 R184, gdesc[UR48], RZ, !UPT", "10", "9"],
    ["0x1cd0", "WARPGROUP.DEPBAR.LE gsb0, 0x2", "1,500", "1,400"],
    ["0x2bb0", "BAR.SYNC.DEFER_BLOCKING 0x2, 0x80", "300", "290"],
    ["0x2bc0", "@P0 SYNCS.ARRIVE.TRANS64.A1T0 RZ, [UR7+0x28770], RZ", "5", "5"],
    ["0x2bd0", "BAR.SYNC.DEFER_BLOCKING 0x2, 0x80", "65", "60"],
]


def test_samples_are_summed_by_opcode_from_the_all_samples_column():
    by_op, lines, total = stall_table([_HEADER] + _ROWS)
    assert total == 2000
    assert by_op["WARPGROUP.DEPBAR.LE"] == 1500 and by_op["BAR.SYNC.DEFER_BLOCKING"] == 365, by_op
    assert by_op["SYNCS.ARRIVE.TRANS64"] == 5, by_op  # the predicate dropped
    assert max(lines)[1] == "0x1cd0"


def test_the_column_is_found_by_name_not_by_place():
    order = [2, 0, 3, 1]  # samples first, the not-issued column before the source
    _, _, total = stall_table([[_HEADER[i] for i in order]] + [[r[i] for i in order] for r in _ROWS])
    assert total == 2000


def test_opcode_keeps_three_parts_and_drops_the_predicate():
    assert opcode("@!P0 BRA 0xd020") == "BRA"
    assert opcode("HGMMA.64x128x16.F32.BF16 R88, R228, gdesc[UR8].tnspB, R88") == "HGMMA.64x128x16.F32"


def test_the_table_is_found_after_ncus_notes(tmp_path, capsys):
    path = tmp_path / "page.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["==PROF== Connected to process 1"])
        w.writerow(_HEADER)
        w.writerows(_ROWS)
    assert main([str(path), "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert "2000 stall samples" in out and "75.0 %  WARPGROUP.DEPBAR.LE gsb0, 0x2" in out, out


# a warp-specialized kernel's page: the producer's idle warps at a barrier (executed once a warp) hold the most samples;
# the tile loop (executed 2048 times) holds the load wait that matters
_HOT_HEADER = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed", "stall_barrier",
               "stall_short_sb", "stall_wait", "stall_short_sb (Not Issued)"]
_HOT_ROWS = [
    ["0x0100", "BAR.SYNC.DEFER_BLOCKING 0x1", "9,000", "8", "9,000", "0", "0", "0"],
    ["0x1440", "LDS.64 R14, [R13+UR15+0x28000]", "40", "2,048", "0", "0", "40", "40"],
    ["0x1520", "HGMMA.64x64x16.F32.BF16 R184, gdesc[UR48], RZ, !UPT", "60", "2,048", "0", "10", "50", "10"],
    ["0x1550", "FMUL R226, R14, 1.4426950216293334961", "700", "2,048", "0", "690", "10", "690"],
    ["0x1820", "WARPGROUP.DEPBAR.LE gsb0, 0x1", "200", "1,000", "200", "0", "0", "0"],
]


def test_hot_lines_keep_the_tile_loops_and_sum_their_samples_by_reason():
    by_reason, lines = hot_lines([_HOT_HEADER] + _HOT_ROWS, 0.5)
    assert [a for _, a, _, _ in lines] == ["0x1440", "0x1520", "0x1550"]  # the barrier (8) and the wait (1000) out
    assert by_reason == {"barrier": 0, "short_sb": 700, "wait": 100}, by_reason  # "Not Issued" columns left out
    assert max(lines)[3] == [("short_sb", 690), ("wait", 10)]
    _, with_wait = hot_lines([_HOT_HEADER] + _HOT_ROWS, 0.4)
    assert len(with_wait) == 4


def test_main_reads_a_gzipped_page_and_prints_the_loops_with_hot(tmp_path, capsys):
    path = tmp_path / "page.csv.gz"
    with gzip.open(path, "wt", newline="") as f:
        csv.writer(f).writerows([_HOT_HEADER] + _HOT_ROWS)
    assert main([str(path), "--top", "1", "--hot", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "3 lines, 800 samples" in out and "short_sb" in out and "FMUL R226" in out.split("their 1 lines")[1], out

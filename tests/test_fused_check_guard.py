"""bench/gluon/fused_bwd.py's guarded check (a prototype's first GPU run, issue 10): a kernel that never ends must cost
its stall limit, not the device call, and the check must go on without the variant that hung."""
import textwrap

import bench.gluon.fused_bwd as fb

FAKE_CHILD = textwrap.dedent("""
    import json, sys, time
    start, variants = int(sys.argv[2]), sys.argv[3].split(",")
    for cell in range(start, 6):
        for v in variants:
            if cell == 3 and v == "fused_writer":
                time.sleep(1000)  # a wait that never ends
            if cell == 4 and v == "fused":
                sys.exit(3)  # a crash
            print(json.dumps(dict(cell=cell, variant=v)), flush=True)
""")


def test_a_hang_is_recorded_and_the_check_goes_on_without_that_variant(tmp_path, monkeypatch):
    child = tmp_path / "child.py"
    child.write_text(FAKE_CHILD)
    monkeypatch.setattr(fb, "__file__", str(child))
    monkeypatch.setattr(fb, "CHECK_CELLS", list(range(6)))
    rows = fb.check_guarded(stall_s=2.0, variants=("fused", "fused_writer"))
    got = [(r["cell"], r["variant"], "hang" if r.get("hang") else r.get("error", "ok")) for r in rows]
    assert got == [(0, "fused", "ok"), (0, "fused_writer", "ok"), (1, "fused", "ok"), (1, "fused_writer", "ok"),
                   (2, "fused", "ok"), (2, "fused_writer", "ok"), (3, "fused", "ok"), (3, "fused_writer", "hang"),
                   (4, "fused", "exit 3"), (5, "fused", "ok")], got


FAKE_DIAG_CHILD = textwrap.dedent("""
    import json, sys, time
    cell, without = int(sys.argv[2]), [w for w in sys.argv[3].split(",") if w]
    for name in ("kernel", "ordered", "tma_ordered", "tma_unordered"):
        if name in without:
            continue
        print("# run " + name, flush=True)
        if name == "tma_ordered" and cell == 1:
            time.sleep(1000)  # a wait that never ends
    print("d=... timed", flush=True)
    print(json.dumps(dict(cell=cell, without=without)), flush=True)
""")


def test_a_hung_diag_variant_is_named_and_the_cell_rerun_without_it(tmp_path, monkeypatch):
    child = tmp_path / "child.py"
    child.write_text(FAKE_DIAG_CHILD)
    monkeypatch.setattr(fb, "__file__", str(child))
    monkeypatch.setattr(fb, "DIAG_CELLS", [0, 1, 2])
    rows = fb.diagnosed_guarded(rounds=1, stall_s=2.0)
    got = [(r["cell"], r.get("variant"), r.get("without")) for r in rows]
    assert got == [(0, None, []), (1, "tma_ordered", None), (1, None, ["tma_ordered"]),
                   (2, None, ["tma_ordered"])], got

"""bench/NOTES.md "Session 2026-11-29h" item 1: the loop-around-the-block forward's source variants that
probe_matrix.sh runs, written from 29b's (bench/results/h200-2026-11-29b/gluon_fwd_loop.py) by exact edits, into
the folder given (default /tmp/loop_variants): gluon_fwd_loop_<name>.py.

    python3 bench/results/h200-2026-11-29h/loop_variants.py [FOLDER]
"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SOURCE = ROOT / "bench" / "results" / "h200-2026-11-29b" / "gluon_fwd_loop.py"
PAIR_LOOP = "for j in range(1 + has_b.to(gl.int32)):"
PARTIAL_LOOP = ("    for t in range(0, n_partial):\n        slot = (t_base + t) % STAGES\n"
                "        phase = ((t_base + t) // STAGES) & 1\n")
FULL_TILES = "    # the full tiles, unmasked, pipelined"


def _if_partial(src: str) -> str:
    """The partial-tile loop under `if n_partial > 0` (its body indented once more)."""
    i = src.index(PARTIAL_LOOP)
    j = src.index(FULL_TILES, i)
    body = "".join("    " + line if line.strip() else line for line in src[i:j].splitlines(True))
    return src[:i] + "    if n_partial > 0:\n" + body + src[j:]


# name: (what it changes, [(old, new, count)] or a function of the source)
VARIANTS = {
    "ifpartial": ("its partial-tile loop under `if n_partial > 0`", _if_partial),
    "once": ("its pair loop run once (block A only; block B never written)", [(PAIR_LOOP, "for j in range(1):", 2)]),
    "barrier": ("a partition barrier (gl.thread_barrier, Triton 3.6) after the partial-tile loop",
                [(FULL_TILES, "    gl.thread_barrier()\n" + FULL_TILES, 1)]),
    "offset": ("its partial-tile loop counting ring positions (t_base + t) rather than t",
               [(PARTIAL_LOOP, "    for tp in range(t_base, t_base + n_partial):\n        t = tp - t_base\n"
                               "        slot = tp % STAGES\n        phase = (tp // STAGES) & 1\n", 1)]),
    "qfull": ("its full tiles' Q view indexed through a runtime select that is never taken (`Nq < 0`), which ptxas "
              "12.8 cannot equate with the partial loop's: the full path computes its own Q descriptors (session "
              "29i: bench/sass_defs.py)",
              [("        t0 = t_base + n_partial  # ring positions from here on\n",
                "        t0 = t_base + n_partial  # ring positions from here on\n"
                "        q_smem = q_halves.index(2 * gl.where(Nq < 0, 1 - QB, QB) + WG).reshape([HALF_M, HEAD_D])\n",
                1)]),
    "sepzero": ("S's zero accumulator made by gl.full rather than gl.zeros (apart from acc's zeros)",
                [("    s_zero = gl.zeros([HALF_M, BLOCK_N], gl.float32, s_layout)\n",
                  "    s_zero = gl.full([HALF_M, BLOCK_N], 0.0, gl.float32, s_layout)\n", 1)]),
}


def variant(name: str) -> str:
    doc, edits = VARIANTS[name]
    src = SOURCE.read_text()
    if callable(edits):
        src = edits(src)
    else:
        for old, new, count in edits:
            assert src.count(old) == count, (name, old, src.count(old))
            src = src.replace(old, new)
    return src.replace('"""bench/NOTES.md "Session 2026-11-29b": ',
                       f'"""bench/NOTES.md "Session 2026-11-29h": 29b\'s loop variant, {doc}.\n29b: ', 1)


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/loop_variants")
    out.mkdir(parents=True, exist_ok=True)
    for name in VARIANTS:
        (out / f"gluon_fwd_loop_{name}.py").write_text(variant(name))

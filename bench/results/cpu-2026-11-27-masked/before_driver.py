"""bench/bounds_attack.py with the backward's chain order as before 2026-11-27 (the stated order only on heads with
nothing masked; masked heads: order unknown and the grouped round-to-nearest model, not the order-free charge), for
the 'before' medians on the same emulation (which now walks the kernel's per-block order).

    PYTHONPATH=$PWD python bench/results/cpu-2026-11-27-masked/before_driver.py --source emulation \\
        --precisions float32:ieee --nk 512 4096 --nq 64 --causal bottom_right --out before_grouped_model.jsonl
"""
import dataclasses
import sys

import numpy as np

from flashcheck.proofs.bounds import backward
from flashcheck.proofs.bounds.visits import shared_visits


def old_dq(band, vis, precision, recursive):
    head = np.broadcast_to(vis.all(axis=(-2, -1))[..., None], vis.shape[:3])
    known = recursive & (precision.tile_order != "any") & head
    return dataclasses.replace(shared_visits(vis.shape[-1], precision.dq_key_tile, precision.tile_order, known),
                               stated=False)


def old_rows(band, vis, precision, recursive, group):
    B, Hq, Nq, Nk = vis.shape
    head = vis.reshape(B, Hq // group, group * Nq, Nk).all(axis=(-2, -1))
    known = np.broadcast_to((recursive & (precision.tile_order != "any") & head)[..., None], (B, Hq // group, Nk))
    return dataclasses.replace(shared_visits(Nq, precision.block_q, precision.tile_order, known, group), stated=False)


if __name__ == "__main__":
    backward.dq_visits, backward.rows_visits = old_dq, old_rows
    from bench.bounds_attack import main

    sys.exit(main(sys.argv[1:]))

"""PNG plots of the audit (matplotlib, Agg backend): error vs N and error vs logit scale, one figure
per kernel and dtype, one panel per quantity, the derived bound drawn next to the measured error.
"""
from __future__ import annotations

import re
from pathlib import Path

QUANTITY_TITLES = {"o": "O", "lse": "LSE", "dq": "dQ", "dk": "dK", "dv": "dV"}
_COLORS = {"normal": "tab:blue", "outliers": "tab:orange", "peaked_logits": "tab:green"}


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")


def _series(records, x_key, quantity, distribution):
    pts = sorted((r["case"][x_key], r["quantities"][quantity]) for r in records
                 if r["case"]["distribution"] == distribution and quantity in r["quantities"])
    return pts


def plot_sweep(records: list[dict], x_key: str, title: str, path: Path) -> Path | None:
    """One figure: per quantity, relative error (solid) and ||bound|| / ||ref|| (dashed:
    probabilistic, dotted: worst case) against `x_key` ("N" or "logit_scale"), log-log."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    quantities = [q for q in QUANTITY_TITLES if any(q in r["quantities"] for r in records)]
    if not quantities:
        return None
    fig, axes = plt.subplots(1, len(quantities), figsize=(3.6 * len(quantities), 3.4),
                             squeeze=False)
    distributions = sorted({r["case"]["distribution"] for r in records})
    for ax, quantity in zip(axes[0], quantities):
        for dist in distributions:
            pts = _series(records, x_key, quantity, dist)
            if not pts:
                continue
            xs = [x for x, _ in pts]
            color = _COLORS.get(dist)
            ok = [(x, st) for x, st in pts if not st["nonfinite"] and not st["mismatched_inf"]]
            ax.plot([x for x, _ in ok], [max(st["rel_err"], 1e-18) for _, st in ok], "o-",
                    color=color, label=f"{dist} error")
            for x, st in pts:
                if st["nonfinite"] or st["mismatched_inf"]:
                    ax.axvline(x, color="red", alpha=0.5, lw=2, label="NaN/Inf output")
            for kind, style in (("probabilistic", "--"), ("worst_case", ":")):
                ys = [s["bound_rel"].get(kind) for _, s in pts]
                if all(y is not None for y in ys) and ys:
                    ax.plot(xs, ys, style, color=color, label=f"{dist} bound ({kind})")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(QUANTITY_TITLES[quantity])
        ax.set_xlabel("N" if x_key == "N" else "logit scale (std of logits)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("‖err‖ / ‖ref‖")
    return _finish(fig, axes, title, path, ncol=6, rect=(0, 0.1, 1, 0.95))


def _finish(fig, axes, title: str, path: Path, *, ncol: int, rect) -> Path:
    """One legend below the panels (each label once), the title, saved to `path` and closed."""
    import matplotlib.pyplot as plt

    seen = {}
    for ax in axes[0]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    fig.legend(list(seen.values()), list(seen.keys()), loc="lower center",
               ncol=min(len(seen), ncol), fontsize=7)
    fig.suptitle(title)
    fig.tight_layout(rect=rect)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def plot_kernels(records: list[dict], title: str, path: Path, distribution: str = "normal",
                 quantities=("o", "dq")) -> Path | None:
    """One figure with every kernel side by side: per quantity, relative error against N (the N
    sweep at logit scale 1, one `distribution`), one line per kernel, log-log."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kernels = list(dict.fromkeys(r["case"]["kernel"] for r in records))
    quantities = [q for q in quantities if any(q in r["quantities"] for r in records)]
    if not kernels or not quantities:
        return None
    fig, axes = plt.subplots(1, len(quantities), figsize=(4.4 * len(quantities), 3.6), squeeze=False)
    from matplotlib.ticker import NullFormatter

    for ax, quantity in zip(axes[0], quantities):
        for i, kernel in enumerate(kernels):
            pts = _series([r for r in records if r["case"]["kernel"] == kernel], "N", quantity,
                          distribution)
            ok = [(x, st["rel_err"]) for x, st in pts if not st["nonfinite"] and not st["mismatched_inf"]]
            if ok:  # markers and dashes differ per kernel: kernels with equal errors stay visible
                ax.plot([x for x, _ in ok], [max(y, 1e-18) for _, y in ok], "os^vDx*"[i % 7],
                        ls=("-", "--", ":", "-.")[i % 4], ms=8 - i % 4, label=kernel)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ns = sorted({r["case"]["N"] for r in records})
        ax.set_xticks(ns, [str(n) for n in ns])  # the swept N, not crowded minor log ticks
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_title(QUANTITY_TITLES[quantity])
        ax.set_xlabel("N")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("‖err‖ / ‖ref‖")
    return _finish(fig, axes, title, path, ncol=4, rect=(0, 0.14, 1, 0.93))

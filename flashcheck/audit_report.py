"""report.md and report.json of the audit (the JSON holds every number; the Markdown summarises)."""
from __future__ import annotations

import json
import math
from pathlib import Path

from flashcheck.audit_plots import QUANTITY_TITLES, plot_kernels, plot_sweep, slug

# Published figures (bf16, N=2048, d=128, relative error vs float64), for the comparison table.
PUBLISHED = {
    "FA2 / cuDNN (fused)": {"normal": {"o": 2.25e-3, "dq": 2.4e-3}, "peaked_logits": {"dq": 7.1e-3}},
    "unfused math path": {"peaked_logits": {"dq": 1.65e-3}},
}


def _fmt(x) -> str:
    if x is None:
        return "—"
    if isinstance(x, float) and (math.isinf(x) or math.isnan(x)):
        return "**inf**" if math.isinf(x) else "**NaN**"
    return f"{x:.3g}"


def _ratio_cell(x) -> str:
    cell = _fmt(x)
    return f"**{cell}**" if x is not None and not math.isinf(x) and x > 1 else cell


def _bold_if(n: int) -> str:
    return f"**{n}**" if n else "0"


def _json_safe(obj):
    if isinstance(obj, float) and (math.isinf(obj) or math.isnan(obj)):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def _nonfinite(s) -> bool:
    return bool(s["nonfinite"] or s["mismatched_inf"])


def worst_ratios(records) -> dict:
    """{quantity: {kind: worst error/bound}} over the records with finite outputs (NaN/Inf outputs
    and undefined bounds are counted separately, see `_summary_counts`)."""
    out = {}
    for r in records:
        for q, s in r["quantities"].items():
            if _nonfinite(s):
                continue
            for kind, v in s["ratio"].items():
                if v is None or (isinstance(v, float) and math.isnan(v)):
                    continue  # no verdict (bound undefined): listed with the flags
                cur = out.setdefault(q, {}).get(kind)
                out[q][kind] = v if cur is None else max(cur, v)
    return out


def _summary_counts(records) -> tuple[int, int]:
    """(points with NaN/Inf outputs, points where some bound is NaN: no verdict)."""
    bad = sum(any(_nonfinite(s) for s in r["quantities"].values()) for r in records)
    undefined = sum(any(any(s.get("bound_nan", {}).values()) for s in r["quantities"].values())
                    for r in records)
    return bad, undefined


def _groups(results):
    """{(kernel, dtype): [records]} in first-seen order."""
    groups = {}
    for r in results:
        groups.setdefault((r["case"]["kernel"], r["case"]["dtype"]), []).append(r)
    return groups


def _long_table(records, x_key):
    head = (f"| distribution | {x_key} | quantity | rel. error | max abs | bound rel. (prob.) "
            "| err/bound prob. | err/bound worst |\n|---|---|---|---|---|---|---|---|")
    rows = [head]
    for r in sorted(records, key=lambda r: (r["case"]["distribution"], r["case"][x_key])):
        c = r["case"]
        if r["error"]:
            rows.append(f"| {c['distribution']} | {c[x_key]:g} | — | {r['error']} |||||")
        for q, s in r["quantities"].items():
            rows.append(
                f"| {c['distribution']} | {c[x_key]:g} | {QUANTITY_TITLES[q]} | {_fmt(s['rel_err'])} "
                f"| {_fmt(s['max_abs'])} | {_fmt(s['bound_rel'].get('probabilistic'))} "
                f"| {_ratio_cell(s['ratio'].get('probabilistic'))} "
                f"| {_ratio_cell(s['ratio'].get('worst_case'))} |")
    return "\n".join(rows)


def _published_table(results):
    rows = [r for r in results if r["case"]["sweep"] == "published"]
    if not rows:
        return None
    lines = ["| kernel | output (normal) | dQ (normal) | dQ (peaked logits) | output (peaked logits) |",
             "|---|---|---|---|---|"]
    by_kernel = {}
    for r in rows:
        by_kernel.setdefault(r["case"]["kernel"], {})[r["case"]["distribution"]] = r
    for kernel, per in by_kernel.items():
        get = lambda dist, q: per.get(dist, {}).get("quantities", {}).get(q, {})  # noqa: E731
        lines.append(f"| {kernel} | {_fmt(get('normal', 'o').get('rel_err'))} "
                     f"| {_fmt(get('normal', 'dq').get('rel_err'))} "
                     f"| {_fmt(get('peaked_logits', 'dq').get('rel_err'))} "
                     f"| {_fmt(get('peaked_logits', 'o').get('rel_err'))} |")
    for name, figs in PUBLISHED.items():
        lines.append(f"| *published: {name}* | {_fmt(figs.get('normal', {}).get('o'))} "
                     f"| {_fmt(figs.get('normal', {}).get('dq'))} "
                     f"| {_fmt(figs.get('peaked_logits', {}).get('dq'))} | |")
    return "\n".join(lines)


def _side_by_side(results, dtype):
    """Rows (distribution, N) of the N sweep in `dtype`, one column per kernel: rel. error of O / dQ."""
    rows = [r for r in results if r["case"]["sweep"] == "N" and r["case"]["dtype"] == dtype]
    kernels = list(dict.fromkeys(r["case"]["kernel"] for r in rows))
    if len(kernels) < 2:
        return None
    cell = {(r["case"]["kernel"], r["case"]["distribution"], r["case"]["N"]): r["quantities"] for r in rows}
    lines = ["| distribution | N | " + " | ".join(kernels) + " |", "|---|---|" + "---|" * len(kernels)]
    for dist, n in sorted({(r["case"]["distribution"], r["case"]["N"]) for r in rows}):
        cells = []
        for k in kernels:
            qs = cell.get((k, dist, n), {})
            cells.append(" / ".join(_fmt(qs[q]["rel_err"]) if q in qs else "—" for q in ("o", "dq")))
        lines.append(f"| {dist} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_report(report: dict, out: Path) -> tuple[Path, Path]:
    """Write report.json, report.md and plots/*.png under `out`; return the two report paths."""
    out.mkdir(parents=True, exist_ok=True)
    results = report["results"]
    md = ["# flashcheck audit: numerical stability against the float64 reference", ""]
    md += ["| | |", "|---|---|"]
    md += [f"| {k} | {v} |" for k, v in report["header"].items() if not isinstance(v, dict)]
    for part, note in report["header"]["components"].items():
        md.append(f"| {part} | {note or 'ok'} |")
    md += ["", "Errors are measured against the float64 reference computed from the exact values "
           "the kernel received (already rounded to its dtype). *rel. error* = ‖err‖₂ / ‖ref‖₂ "
           "over the whole tensor; *err/bound* = max over elements of |err| / bound, with the "
           "bound from `flashcheck.proofs.bounds` for the kernel's declared precision (`prob.`: "
           "probabilistic, `worst`: worst case). A ratio above 1 (bold) means the kernel is "
           "outside what its declared precision allows.", ""]
    sweep = report["header"].get("sweep", {})
    md += ["Sweep: " + ", ".join(f"{k} = {v}" for k, v in sweep.items()), ""]

    md += ["## Summary", "",
           "Worst err/bound (probabilistic / worst case) over the points with finite outputs; "
           "points whose outputs hold NaN/Inf, and points where a bound is undefined (NaN, no "
           "verdict), are counted in the last columns and listed below.", "",
           "| kernel | dtype | points | " + " | ".join(QUANTITY_TITLES.values())
           + " | NaN/Inf outputs | no verdict | failures |",
           "|---|---|---|" + "---|" * len(QUANTITY_TITLES) + "---|---|---|"]
    for (kernel, dtype), recs in _groups(results).items():
        worst = worst_ratios(recs)
        cells = []
        for q in QUANTITY_TITLES:
            w = worst.get(q, {})
            cells.append(f"{_ratio_cell(w.get('probabilistic'))} / {_ratio_cell(w.get('worst_case'))}"
                         if w else "—")
        bad, undefined = _summary_counts(recs)
        failures = sum(bool(r["error"]) for r in recs)
        md.append(f"| {kernel} | {dtype} | {len(recs)} | " + " | ".join(cells)
                  + f" | {_bold_if(bad)} | {undefined} | {_bold_if(failures)} |")
    for s in report["skipped"]:
        md.append(f"| {s['kernel']} | {s['dtype']} | skipped: {s['reason']} |"
                  + " |" * (len(QUANTITY_TITLES) + 3))
    md.append("")

    published = _published_table(results)
    if published:
        c = next(r["case"] for r in results if r["case"]["sweep"] == "published")
        md += [f"## bf16, N={c['N']}, d={c['d']}: relative error vs float64 (published figures "
               "below)", "",
               f"B={c['B']}, H={c['H']}; ‖err‖₂/‖ref‖₂ over the whole tensor; *peaked logits* (the FA3 paper's large logits): q and k scaled by "
               "4 (logit std 16). Errors only (the bounds at this size take minutes per kernel); "
               "the published rows are the figures quoted in the brief, for comparison.", "",
               published, ""]

    for dtype in dict.fromkeys(r["case"]["dtype"] for r in results):
        table = _side_by_side(results, dtype)
        if not table:
            continue
        sub = [r for r in results if r["case"]["sweep"] == "N" and r["case"]["dtype"] == dtype]
        c0 = sub[0]["case"]
        md += [f"## {dtype}: every kernel side by side (N sweep, logit scale 1)", "",
               f"Relative error of O / dQ (‖err‖₂/‖ref‖₂), B={c0['B']}, H={c0['H']}, d={c0['d']}; "
               "the bound ratios are in the summary and the per-kernel sections.", "", table, ""]
        png = plot_kernels(sub, f"{dtype}: every kernel, normal inputs (d={c0['d']}, logit scale 1)",
                           out / "plots" / f"kernels_side_by_side_{dtype}.png")
        if png:
            md += [f"![{dtype} side by side]({png.relative_to(out).as_posix()})", ""]

    missing = sorted({r["bounds_missing"] for r in results if r.get("bounds_missing")})
    if missing:
        md += ["## Bounds that could not be computed (their ratios are left empty)", ""]
        md += [f"- {m}" for m in missing] + [""]

    md += ["## NaN / Inf and failures", ""]
    flagged = [(r["case"], f) for r in results for f in r["flags"] + ([r["error"]] if r["error"] else [])]
    md += [f"- {c['kernel']} {c['dtype']} {c['distribution']} N={c['N']} logit scale "
           f"{c['logit_scale']:g}: {f}" for c, f in flagged] or ["None."]
    md.append("")

    md += ["## Fully masked rows (convention: O = 0, LSE = −inf, dQ row = 0, no NaN)", "",
           "| kernel | dtype | how | result |", "|---|---|---|---|"]
    for m in report["masked_rows"]:
        verdict = (f"not checked: {m['skipped']}" if m["skipped"]
                   else "ok" if m["ok"] else "**" + "; ".join(m["problems"]) + "**")
        md.append(f"| {m['kernel']} | {m['dtype']} | {m['how'] or '—'} | {verdict} |")
    md.append("")

    for (kernel, dtype), recs in _groups(results).items():
        md += [f"## {kernel}, {dtype}", ""]
        precision = next((r.get("precision") for r in recs if r.get("precision")), None)
        if precision:
            md += [f"Precision model: `{precision}`", ""]
        for x_key, sweep_name, label in (("N", "N", "error vs N"),
                                         ("logit_scale", "logit_scale", "error vs logit scale")):
            sub = [r for r in recs if r["case"]["sweep"] == sweep_name]
            if not sub:
                continue
            c0 = sub[0]["case"]
            detail = (f"B={c0['B']}, H={c0['H']}, d={c0['d']}" +
                      (f", N={c0['N']}" if x_key == "logit_scale" else ", logit scale 1"))
            png = plot_sweep(sub, x_key, f"{kernel} {dtype}: {label} ({detail})",
                             out / "plots" / f"{slug(label)}_{slug(kernel)}_{dtype}.png")
            md += [f"### {label} ({detail})", ""]
            if png:
                md += [f"![{kernel} {dtype} {label}]({png.relative_to(out).as_posix()})", ""]
            md += [_long_table(sub, x_key), ""]

    md_path, json_path = out / "report.md", out / "report.json"
    md_path.write_text("\n".join(md) + "\n")
    json_path.write_text(json.dumps(_json_safe(report), indent=1))
    return md_path, json_path

"""The report's first section, "What fails most": failure kinds of the verdicts (stats' failure_categories and
categories_by), their share, the trend across run dates, and example traces linked into the drill-down.

Examples are the verdicts of a kind with the highest category confidence (ties: trace id), so the same OUTDIR
gives the same links; build_report puts them into the drill-down sample, and each link opens that trace
(`#t=<index>`, the drill-down's own address form).
"""

from __future__ import annotations

from collections import defaultdict

import pyarrow as pa

from masprism_batch.analytics import svg
from masprism_batch.analytics.categories import UNCATEGORISED, trend
from masprism_batch.analytics.svg import escape

TOP_KINDS, PER_KIND = 8, 3


def examples(attr: pa.Table, top: int = TOP_KINDS, per: int = PER_KIND) -> dict[str, list[str]]:
    """kind -> up to `per` trace ids, most confident first, for the `top` most frequent kinds."""
    if "category" not in attr.column_names:
        return {}
    by: dict[str, list[tuple]] = defaultdict(list)
    for tid, cat, conf in zip(attr["trace_id"].to_pylist(), attr["category"].to_pylist(),
                              attr["category_confidence"].to_pylist(), strict=True):
        by[cat or UNCATEGORISED].append((-(conf or 0.0), tid))
    kinds = sorted(by, key=lambda c: (-len(by[c]), c))[:top]
    return {c: [t for _, t in sorted(by[c])[:per]] for c in kinds}


def section(stats: dict, ex: dict[str, list[str]], index_of: dict[str, int]) -> str:
    """HTML of the section (empty string when the stats hold no category table)."""
    cats = stats.get("failure_categories")
    if cats is None or cats.num_rows == 0:
        return ""
    totals: dict[tuple, list] = {}
    n_all = 0
    for r in cats.to_pylist():
        t = totals.setdefault(r["category"], [r["category_family"], 0, 0.0, 0])
        t[1] += r["n_traces"]
        n_all += r["n_traces"]
        if r["mean_confidence"] is not None:
            t[2] += r["mean_confidence"] * r["n_traces"]
            t[3] += r["n_traces"]
    order = sorted(totals, key=lambda c: (-totals[c][1], c))
    rows = []
    for c in order[:TOP_KINDS * 2]:
        fam, n, csum, cn = totals[c]
        links = " ".join(f'<a class="ex" href="#t={index_of[t]}">{escape(t)}</a>' if t in index_of else escape(t)
                         for t in ex.get(c, []))
        rows.append(f"<tr><td>{escape(c)}</td><td>{escape(fam or '-')}</td><td>{n:,}</td><td>{n / n_all:.0%}</td>"
                    f"<td>{'-' if not cn else f'{csum / cn:.2f}'}</td><td>{links or '-'}</td></tr>")
    table = ('<table class="data" id="kinds"><thead><tr><th>failure kind</th><th>family</th><th>failed runs</th>'
             "<th>share</th><th>mean confidence</th><th>examples (drill-down)</th></tr></thead><tbody>"
             + "".join(rows) + "</tbody></table>")
    by_sys = svg.table(["source", "system", "kind", "failed runs", "share of the system's"],
                       [[r["source"], r["system"], r["category"], r["n_traces"], f"{r['share']:.0%}"]
                        for r in cats.to_pylist()[:60]])
    parts = [f'<p class="note">{n_all:,} attributed failures sorted by what went wrong at the blamed step '
             "(docs/categories.md: each kind's description read after the step, and what the log records). "
             "The confidence is the category layer's probability of the kind.</p>",
             svg.hbar([(c, totals[c][1]) for c in order[:TOP_KINDS]], "Failed runs by failure kind"), table]
    tr = trend(stats["categories_by"], top=5) if "categories_by" in stats else {}
    days = next(iter(tr.values()), [])
    if len(days) > 1:
        parts.append("<h3>Trend across run dates (top kinds, failed runs per day)</h3>" + svg.table(
            ["kind", *[d for d, _ in days]], [[c, *[n for _, n in v]] for c, v in tr.items()]))
    groups = stats.get("failure_groups")
    if groups is not None and groups.num_rows:
        parts.append("<h3>Label-free failure groups (named by their most distinctive terms)</h3>" + svg.table(
            ["source", "system", "group", "terms", "failed runs", "share", "most frequent kind"],
            [[r["source"], r["system"], r["group"], r["group_name"], r["n_traces"], f"{r['share']:.0%}",
              r["top_category"]] for r in groups.to_pylist()[:40]]))
    parts.append("<h3>By source and system</h3>" + by_sys)
    return '<section id="what-fails-most"><h2>What fails most</h2>' + "".join(parts) + "</section>"

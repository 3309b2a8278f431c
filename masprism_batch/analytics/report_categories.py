"""The report's first section, "What fails most": failure kinds of the verdicts (stats' failure_categories and
categories_by), their share, the trend across run dates, and example traces linked into the drill-down. A run
without kinds (no `--taxonomy`: every verdict uncategorised) opens instead with "Where blame falls"
(`blame_section`): blamed agents and positions, and how many verdicts are confident.

Examples are the verdicts of a kind with the highest category confidence (ties: trace id), so the same OUTDIR
gives the same links; build_report puts them into the drill-down sample, and each link opens that trace
(`#t=<index>`, the drill-down's own address form).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable

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


MAX_PERIODS = 366  # bars of the per-day chart, columns of the trend: past a year of days, months, then years


def periods(dates: Iterable[str]) -> tuple[int, str]:
    """How the overview counts ISO dates (YYYY-MM-DD): (the length of the prefix that names a period, its name):
    days while there are at most MAX_PERIODS of them, else months, else years. A log names its own start time:
    logs dated each in another year must not grow the report by a bar and a column per day."""
    dates = set(dates)
    for n, unit in ((10, "day"), (7, "month")):
        if len({d[:n] for d in dates}) <= MAX_PERIODS:
            return n, unit
    return 4, "year"


def by_period(counts: Iterable[tuple[str, int]], n: int) -> list[tuple[str, int]]:
    """(period, count) summed over the dates of each period (`periods`), the latest MAX_PERIODS, in date order."""
    out: Counter = Counter()
    for d, k in counts:
        out[d[:n]] += k
    return sorted(out.items())[-MAX_PERIODS:]


def section(stats: dict, ex: dict[str, list[str]], index_of: dict[str, int]) -> str:
    """HTML of the section (empty string when the stats hold no category table)."""
    cats = stats.get("failure_categories")
    if cats is None or cats.num_rows == 0 or all(c in (None, UNCATEGORISED) for c in cats["category"].to_pylist()):
        return ""  # no kinds: one "uncategorised 100%" row says nothing (blame_section opens the report instead)
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
        cut, unit = periods(d for d, _ in days)
        tr = {c: by_period(v, cut) for c, v in tr.items()}
        parts.append(f"<h3>Trend across run dates (top kinds, failed runs per {unit})</h3>" + svg.table(
            ["kind", *[d for d, _ in next(iter(tr.values()))]], [[c, *[n for _, n in v]] for c, v in tr.items()]))
    groups = stats.get("failure_groups")
    if groups is not None and groups.num_rows:
        parts.append("<h3>Label-free failure groups (named by their most distinctive terms)</h3>" + svg.table(
            ["source", "system", "group", "terms", "failed runs", "share", "most frequent kind"],
            [[r["source"], r["system"], r["group"], r["group_name"], r["n_traces"], f"{r['share']:.0%}",
              r["top_category"]] for r in groups.to_pylist()[:40]]))
    parts.append("<h3>By source and system</h3>" + by_sys)
    return '<section id="what-fails-most"><h2>What fails most</h2>' + "".join(parts) + "</section>"


CONFIDENT = 0.5  # a verdict more likely right than not


def _conf_cells(confs: list) -> list:
    known = [c for c in confs if c is not None]
    sure = sum(c >= CONFIDENT for c in known)
    return [f"{sure:,} ({sure / len(confs):.0%})" if confs else "-",
            f"{sum(known) / len(known):.2f}" if known else "-"]


def blame_section(attr: pa.Table) -> str:
    """HTML of "Where blame falls", read from attributions as written: the blamed agents (by source), where the
    blamed step sits in its log (first, middle, last third), and how many verdicts are confident."""
    rows = [r for r in attr.select(["source", "pred_agent", "pred_step", "n_steps", "confidence"]).to_pylist()
            if r["pred_step"] is not None]
    if not rows:
        return ""
    n = len(rows)
    confs = [r["confidence"] for r in rows]
    known = [c for c in confs if c is not None]
    sure = sum(c >= CONFIDENT for c in known)
    agents: dict[tuple, list] = defaultdict(list)
    thirds: dict[str, list] = {"first third": [], "middle third": [], "last third": []}
    for r in rows:
        agents[(r["pred_agent"] or "-", r["source"] or "-")].append(r["confidence"])
        rel = r["pred_step"] / max(1, (r["n_steps"] or 1) - 1)
        thirds["first third" if rel < 1 / 3 else "middle third" if rel < 2 / 3 else "last third"].append(
            r["confidence"])
    top = sorted(agents, key=lambda k: (-len(agents[k]), k))
    head = ["failed runs", "share", f"confident (≥ {CONFIDENT})", "mean confidence"]
    by_agent = svg.table(["blamed agent", "source", *head],
                         [[a, s, len(agents[(a, s)]), f"{len(agents[(a, s)]) / n:.0%}", *_conf_cells(agents[(a, s)])]
                          for a, s in top[:12]])
    by_pos = svg.table(["blamed step in its log", *head],
                       [[k, len(v), f"{len(v) / n:.0%}", *_conf_cells(v)] for k, v in thirds.items()])
    note = (f'<p class="note">{n:,} attributed failures. {sure:,} verdicts ({sure / n:.0%}) are confident (confidence '
            f"≥ {CONFIDENT}: more likely right than not), {len(known) - sure:,} are not"
            + (f", {n - len(known):,} have no confidence" if len(known) < n else "")
            + ": review the confident ones first (the trace list below opens sorted by confidence). No failure kinds "
            "in this run: `attribute --taxonomy trail|FILE` sorts failures by what went wrong (docs/categories.md)."
            "</p>")
    chart = svg.hbar([(f"{a} ({s})", len(agents[(a, s)])) for a, s in top[:8]], "Failed runs by blamed agent")
    return ('<section id="where-blame-falls"><h2>Where blame falls</h2>' + note + chart
            + "<h3>By blamed agent</h3>" + by_agent + "<h3>By position of the blamed step</h3>" + by_pos
            + "</section>")

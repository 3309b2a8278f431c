"""What fails most: failure categories (and label-free groups) of a run's verdicts, as `stats` tables.

`failure_categories`: per source, system and kind, the failed runs the verdicts put there, their share of the
system's attributed runs (the failure rate by kind among failures) and the mean category confidence.
`categories_by`: the same counts broken down by the blamed agent (`dimension` = "agent") and by the day the
failure happened (`dimension` = "day": the trace's first logged time, else the day it was attributed, as blamed_by_day), with
the share within that agent or day, so a trend across run dates reads off one column.
`failure_groups`: the label-free groups (category/groups.py: `verdict_groups`, one row per verdict) per system,
named by their most distinctive terms, with the kind most of their verdicts have.
A verdict without a category (categories off, an older run) counts as "uncategorised": never dropped.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import date

import pyarrow as pa
import pyarrow.compute as pc

_S, _I, _F = pa.string(), pa.int64(), pa.float64()
UNCATEGORISED = "uncategorised"
COLUMNS = ["category", "category_family", "category_confidence"]

SCHEMAS: dict[str, pa.Schema] = {
    "failure_categories": pa.schema([("source", _S), ("system", _S), ("category", _S), ("category_family", _S),
                                     ("n_traces", _I), ("share", _F), ("mean_confidence", _F)]),
    "categories_by": pa.schema([("dimension", _S), ("value", _S), ("source", _S), ("system", _S), ("category", _S),
                                ("n_traces", _I), ("share", _F)]),
    "failure_groups": pa.schema([("source", _S), ("system", _S), ("group", _I), ("group_name", _S),
                                 ("n_traces", _I), ("share", _F), ("top_category", _S)]),
}


def _days(attr: pa.Table) -> list:
    start = attr["trace_start"]
    return pc.cast(pc.if_else(pc.is_null(start), attr["attributed_at"], start), pa.date32()).to_pylist()


def category_tables(attr: pa.Table, groups: dict | None = None) -> dict[str, pa.Table]:
    """groups: trace_id -> (group, group_name) of the run's label-free groups (category/groups.py), if any."""
    rows = attr.select(["trace_id", "source", "system", "pred_agent", *COLUMNS]).to_pylist()
    for r in rows:
        r["group"], r["group_name"] = (groups or {}).get(r["trace_id"], (None, None))
    days = _days(attr)
    per_sys: Counter = Counter((r["source"], r["system"]) for r in rows)
    acc: dict[tuple, list] = defaultdict(lambda: [0, 0.0, 0])
    by: Counter = Counter()
    by_tot: Counter = Counter()
    for r, d in zip(rows, days, strict=True):
        cat = r["category"] or UNCATEGORISED
        a = acc[(r["source"], r["system"], cat, r["category_family"])]
        a[0] += 1
        if r["category_confidence"] is not None:
            a[1] += r["category_confidence"]
            a[2] += 1
        for kind, value in (("agent", r["pred_agent"]), ("day", d.isoformat() if d else None)):
            by[(kind, value, r["source"], r["system"], cat)] += 1
            by_tot[(kind, value, r["source"], r["system"])] += 1
    cats = [{"source": s, "system": y, "category": c, "category_family": f, "n_traces": a[0],
             "share": a[0] / per_sys[(s, y)], "mean_confidence": a[1] / a[2] if a[2] else None}
            for (s, y, c, f), a in acc.items()]
    cats.sort(key=lambda r: (r["source"] or "", r["system"] or "", -r["n_traces"], r["category"]))
    by_rows = [{"dimension": k, "value": v, "source": s, "system": y, "category": c, "n_traces": n,
                "share": n / by_tot[(k, v, s, y)]} for (k, v, s, y, c), n in by.items()]
    by_rows.sort(key=lambda r: (r["dimension"], r["value"] or "", r["source"] or "", r["system"] or "", -r["n_traces"],
                                r["category"]))
    return {"failure_categories": pa.Table.from_pylist(cats, schema=SCHEMAS["failure_categories"]),
            "categories_by": pa.Table.from_pylist(by_rows, schema=SCHEMAS["categories_by"]),
            "failure_groups": _groups(rows, per_sys)}


def _groups(rows: list[dict], per_sys: Counter) -> pa.Table:
    acc: dict[tuple, Counter] = defaultdict(Counter)
    names: dict[tuple, str] = {}
    for r in rows:
        if r["group"] is None:
            continue
        key = (r["source"], r["system"], r["group"])
        acc[key][r["category"] or UNCATEGORISED] += 1
        names[key] = r["group_name"]
    out = [{"source": s, "system": y, "group": g, "group_name": names[(s, y, g)], "n_traces": sum(c.values()),
            "share": sum(c.values()) / per_sys[(s, y)], "top_category": c.most_common(1)[0][0]}
           for (s, y, g), c in acc.items()]
    out.sort(key=lambda r: (r["source"] or "", r["system"] or "", -r["n_traces"], r["group"]))
    return pa.Table.from_pylist(out, schema=SCHEMAS["failure_groups"])


def trend(by_table: pa.Table, top: int = 5) -> dict[str, list[tuple[str, int]]]:
    """category -> [(day, failed runs)] over every day of the run, for the `top` kinds (the report's trend)."""
    rows = [r for r in by_table.to_pylist() if r["dimension"] == "day" and r["value"]]
    total: Counter = Counter()
    for r in rows:
        total[r["category"]] += r["n_traces"]
    kinds = [c for c, _ in total.most_common(top)]
    days = sorted({r["value"] for r in rows}, key=date.fromisoformat)
    per: Counter = Counter()
    for r in rows:
        per[(r["category"], r["value"])] += r["n_traces"]
    return {c: [(d, per[(c, d)]) for d in days] for c in kinds}

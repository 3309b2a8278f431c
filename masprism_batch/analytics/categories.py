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
    # the group of every verdict (the `group` column of the outputs; join on trace_id), and whether the trace is
    # one of its group's exemplars (nearest its centre)
    "verdict_groups": pa.schema([("trace_id", _S), ("group", _I), ("group_name", _S), ("exemplar", pa.bool_())]),
}
GROUP_SEED = 0


def _days(attr: pa.Table) -> list:
    start = attr["trace_start"]
    return pc.cast(pc.if_else(pc.is_null(start), attr["attributed_at"], start), pa.date32()).to_pylist()


def category_tables(attr: pa.Table, outdir=None, dups: set[str] = frozenset()) -> dict[str, pa.Table]:
    """The category tables; with `outdir`, the label-free groups of its verdicts too (category/groups.py)."""
    vg = verdict_groups(outdir, dups) if outdir is not None else pa.Table.from_pylist([], schema=SCHEMAS["verdict_groups"])
    groups = {r["trace_id"]: (r["group"], r["group_name"]) for r in vg.to_pylist()}
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
            "failure_groups": _groups(rows, per_sys), "verdict_groups": vg}


def verdict_groups(outdir, dups: set[str] = frozenset(), seed: int = GROUP_SEED) -> pa.Table:
    """Every verdict's label-free group, streamed from attributions/ in batches (bounded memory; a trace
    attributed twice counts once, its first row)."""
    from masprism_batch.analytics import load
    from masprism_batch.category import groups as grp

    cols = ["trace_id", "blamed_vector", "blamed_terms"]
    dim = 0
    for b in load.iter_table(outdir, "attributions", cols):
        dim = next((len(v) for v in b.column("blamed_vector").to_pylist() if v), 0)
        if dim:
            break

    def batches():
        seen: set[str] = set()
        for b in load.iter_table(outdir, "attributions", cols):
            items = []
            for tid, vec, terms in zip(*(b.column(c).to_pylist() for c in cols), strict=True):
                if tid in dups:
                    if tid in seen:
                        continue
                    seen.add(tid)
                if vec is not None or terms:
                    items.append(grp.Item(tid, vec, terms))
            if items:
                yield items

    g = grp.fit_groups(batches, dim, seed=seed)
    ex = {t for ts in g.exemplars for t in ts}
    return pa.Table.from_pylist([{"trace_id": t, "group": gi, "group_name": g.names[gi], "exemplar": t in ex}
                                 for t, gi in g.assign.items()], schema=SCHEMAS["verdict_groups"])


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

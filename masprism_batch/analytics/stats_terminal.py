"""`masprism-batch stats` in the terminal: the main dashboard tables of OUTDIR/stats/ (written by stats.py) as rich
Tables, with what each `verdict_by` value means under the verdicts table."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import pyarrow.parquet as pq

from masprism_batch.analytics.categories import UNCATEGORISED
from masprism_batch.analytics.stats import RELATIVE_BINS, most_traces
from masprism_batch.schema import terminal


def cell(v) -> str:
    """A table cell holding a name from the logs or the taxonomy, as `schema.terminal` shows it (no escape
    sequence, C1 control or bidi override acts on the terminal; `[link=...]` stays text); "-" when empty."""
    return terminal(v) if isinstance(v, str) and v else "-"

GROUPS_SHOWN = 50  # (source, system) pairs, and sources, a table prints: those with most traces; the files hold all


def _largest(rows: list[dict], key) -> tuple[set, int]:
    """The GROUPS_SHOWN groups (`key` of a row) with most traces, and how many groups there are. A log names its
    own source and system: one per log would print a row per log (100,000 logs: minutes of table rendering)."""
    n: Counter = Counter()
    for r in rows:
        n[key(r)] += r["n_traces"]
    return set(most_traces(n, GROUPS_SHOWN)), len(n)


def _more(t, total: int, what: str, path: Path) -> None:
    """Say under table `t` how many groups it leaves out, and which file holds them."""
    if total > GROUPS_SHOWN:
        line = f"{total - GROUPS_SHOWN:,} more {what} (fewer traces each) in {terminal(str(path))}"
        t.caption = f"{t.caption}\n{line}" if t.caption else line
        t.caption_justify = "left"


def _pair(r: dict) -> tuple:
    return r["source"], r["system"]


# what each `verdict_by` value means (README, docs/schema.md list the same), shown under the verdicts table
VERDICT_BY = {
    "ranker": "ranker:<system>: a ranker fitted on that system's labelled logs re-ranked every step (`fit`, "
              "applied with --ranker; the packaged benchmark rankers only when named: --ranker packaged, eval)",
    "prior": "prior:<system>: that system's fit learned only where its labels blame (the label prior); the prior "
             "re-ranked this log's own candidates",
    "rule": "rule:<name>: zero-training, no label read: MASPrism's candidates in the order of rule <name> "
            "(faithful = the paper's); every log of a system no ranker was named for, or whose fit kept the rule "
            "(the ranker did not beat it held out)",
    "no_symptom": "no_symptom:<rule>: zero-training, no label read, and no symptom step points to the blamed step: rule <rule>'s fallback order "
                  "(by position) chose it, no evidence; its confidence is a random pick's (1/steps)",
    "unknown (older run)": "unknown (older run): written before attributions recorded what decided",
}


def stats_tables_for_terminal(outdir: Path | str, top: int = 10) -> list:
    """The main tables as rich Tables for the terminal: blamed agents, where failures sit, and accuracy where
    labels exist (with whether it is in-sample for the packaged ranker weights). Reads OUTDIR/stats/."""
    from rich.table import Table

    from masprism_batch.analytics.insample import note

    d = Path(outdir) / "stats"
    read = {n: pq.read_table(d / f"{n}.parquet").to_pylist()
            for n in ("blamed_agents", "step_position", "accuracy", "verdicts", "failure_categories")
            if (d / f"{n}.parquet").is_file()}
    out = []
    kinds = [r for r in read.get("failure_categories", []) if r["category"] != UNCATEGORISED]
    if kinds:  # what fails most comes first: the table a team acts on (the kinds are opt-in: none, no table)
        t = Table(title=f"What fails most: failure kinds of the verdicts (top {top} per source and system)",
                  title_justify="left")
        for c, j in (("source", "left"), ("system", "left"), ("kind", "left"), ("family", "left"),
                     ("traces", "right"), ("share", "right"), ("mean confidence", "right")):
            t.add_column(c, justify=j, overflow="fold")
        shown: Counter = Counter()
        keep, total = _largest(kinds, _pair)
        for r in kinds:
            key = (r["source"], r["system"])
            if key in keep and shown[key] < top:
                shown[key] += 1
                mc = r["mean_confidence"]
                t.add_row(cell(r["source"]), cell(r["system"]), cell(r["category"]), cell(r["category_family"]),
                          f"{r['n_traces']:,}", f"{r['share']:.0%}", "-" if mc is None else f"{mc:.2f}")
        _more(t, total, "(source, system) pairs", d / "failure_categories.parquet")
        out.append(t)
    t = Table(title=f"Most-blamed agents (top {top} per source and system)", title_justify="left")
    for c, j in (("source", "left"), ("system", "left"), ("agent", "left"), ("traces", "right"), ("share", "right")):
        t.add_column(c, justify=j, overflow="fold")
    shown: Counter = Counter()
    keep, total = _largest(read.get("blamed_agents", []), _pair)
    for r in read.get("blamed_agents", []):
        key = (r["source"], r["system"])
        if key in keep and shown[key] < top:
            shown[key] += 1
            t.add_row(cell(r["source"]), cell(r["system"]), cell(r["agent"]), f"{r['n_traces']:,}",
                      f"{r['share']:.0%}")
    _more(t, total, "(source, system) pairs", d / "blamed_agents.parquet")
    out.append(t)
    t = Table(title="Where the blamed step sits (relative position: 0 = first step, 1 = last)", title_justify="left")
    t.add_column("source", overflow="fold")
    for b in range(RELATIVE_BINS):
        t.add_column(f"{b / RELATIVE_BINS:.1f}", justify="right")
    t.add_column("traces", justify="right")
    rel: dict[str, dict[int, int]] = defaultdict(dict)
    for r in read.get("step_position", []):
        if r["measure"] == "relative":
            rel[r["source"] or "-"][r["bin"]] = r["n_traces"]
    keep, total = _largest([{"src": s, "n_traces": sum(b.values())} for s, b in rel.items()], lambda r: r["src"])
    for src, bins in sorted(rel.items()):
        if src not in keep:
            continue
        n = sum(bins.values())
        t.add_row(cell(src), *[f"{bins.get(b, 0) / n:.0%}" if n else "-" for b in range(RELATIVE_BINS)], f"{n:,}")
    _more(t, total, "sources", d / "step_position.parquet")
    out.append(t)
    if read.get("verdicts"):
        t = Table(title="What decided the verdicts (verdict_by: ranker:<system> / prior:<system> = fitted on that "
                        "system's labels; rule:<name> = zero-training)", title_justify="left")
        for c, j in (("source", "left"), ("system", "left"), ("verdict by", "left"), ("traces", "right"),
                     ("mean confidence", "right"), ("steps to read", "right")):
            t.add_column(c, justify=j, overflow="fold")
        keep, total = _largest(read["verdicts"], _pair)
        for r in read["verdicts"]:
            if _pair(r) not in keep:
                continue
            mc, share = r["mean_confidence"], r.get("mean_set_share")  # null: runs made before the step sets
            t.add_row(cell(r["source"]), cell(r["system"]), cell(r["verdict_by"]), f"{r['n_traces']:,}",
                      "-" if mc is None else f"{mc:.2f}", "-" if share is None else f"{share:.0%} of the log")
        seen = sorted({(r["verdict_by"] or "").split(":", 1)[0] for r in read["verdicts"]})
        t.caption = "\n".join(f"{k}: {VERDICT_BY[k]}" for k in seen if k in VERDICT_BY)
        t.caption_justify = "left"
        _more(t, total, "(source, system) pairs", d / "verdicts.parquet")
        out.append(t)
    acc = read.get("accuracy", [])
    if acc:
        t = Table(title="Accuracy where labels exist (random baseline beside)", title_justify="left")
        for c, j in (("source", "left"), ("metric", "left"), ("traces", "right"), ("value", "right"),
                     ("random", "right"), ("sample", "left")):
            t.add_column(c, justify=j, overflow="fold")
        notes: dict[str, str] = {}

        def fmt(v: float | None) -> str:
            return "-" if v is None else f"{v:.3f}"

        for r in acc:
            t.add_row(cell(r["source"]), cell(r["metric"]), f"{r['n_traces']:,}", fmt(r["value"]),
                      fmt(r["random_baseline"]), cell(r.get("sample")))
            if r["metric"] in ("step_top1", "precision@1", "location_acc@1") or r["source"] not in notes:
                notes[r["source"]] = note(r["n_traces"], r.get("n_in_sample"), r.get("sample") != "n/a: faithful method")
        by_note: dict[str, list[str]] = defaultdict(list)
        for src, n in sorted(notes.items()):
            by_note[n].append(src)
        t.caption = "\n".join(f"{', '.join(cell(s) for s in srcs)}: {terminal(n)}" for n, srcs in by_note.items())
        t.caption_justify = "left"
        out.append(t)
    return out

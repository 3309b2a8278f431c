"""`stats`: the dashboard tables of one run, computed from OUTDIR and written to OUTDIR/stats/<name>.parquet.

Tables (schemas in STATS_SCHEMAS; docs in README "Stats, report and export"):
blamed_agents, blamed_by_day, step_position, symptom_words, nll_by_agent, accuracy, throughput, runs.
Everything is grouped by `source` so datasets with different step conventions are never mixed.

Each table's schema and its builder sit side by side (one function per table), so a column cannot change in one
without the other; stats_terminal.py draws them for the terminal.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tqdm.auto import tqdm

from masprism_batch.analytics import load
from masprism_batch.analytics.accuracy import AccuracyAccumulator
from masprism_batch.analytics.categories import COLUMNS as CATEGORY_COLUMNS
from masprism_batch.analytics.categories import SCHEMAS as CATEGORY_SCHEMAS
from masprism_batch.analytics.categories import category_tables
from masprism_batch.analytics.run_history import RUNS_SCHEMA, previous_runs, runs
from masprism_batch.analytics.run_status import SCHEMA as RUN_STATUS_SCHEMA
from masprism_batch.analytics.run_status import run_status_table
from masprism_batch.config import MethodConfig
from masprism_batch.method.masprism import failure_word_regex
from masprism_batch.outdir import parts as outdir_parts

log = logging.getLogger(__name__)
_S, _I, _F = pa.string(), pa.int64(), pa.float64()

STATS_SCHEMAS: dict[str, pa.Schema] = {
    "blamed_agents": pa.schema([("source", _S), ("system", _S), ("agent", _S), ("n_traces", _I), ("share", _F)]),
    "blamed_by_day": pa.schema([("day", pa.date32()), ("day_basis", _S), ("source", _S), ("system", _S),
                                ("agent", _S), ("n_traces", _I)]),
    "step_position": pa.schema([("source", _S), ("measure", _S), ("bin", _I), ("bin_lo", _F), ("bin_hi", _F),
                                ("n_traces", _I)]),
    "symptom_words": pa.schema([("source", _S), ("word", _S), ("n_symptom_steps", _I), ("n_traces", _I)]),
    "nll_by_agent": pa.schema([("source", _S), ("agent", _S), ("n_steps", _I), ("mean_nll_pass1", _F),
                               ("mean_nll_pass2", _F), ("n_blamed", _I)]),
    "accuracy": pa.schema([("source", _S), ("metric", _S), ("n_traces", _I), ("value", _F),
                           ("random_baseline", _F), ("n_in_sample", _I), ("sample", _S)]),
    "throughput": pa.schema([("hour", pa.timestamp("us", tz="UTC")), ("model_id", _S), ("n_traces", _I),
                             ("tokens", _I), ("seconds", _F), ("traces_per_s", _F), ("tokens_per_s", _F)]),
    "runs": RUNS_SCHEMA,
    # what decided the verdicts: a fitted ranker of the system or a zero-training rule
    "verdicts": pa.schema([("source", _S), ("system", _S), ("verdict_by", _S), ("n_traces", _I),
                           ("mean_confidence", _F), ("mean_set_share", _F)]),  # set share: null before step sets
    "run_status": RUN_STATUS_SCHEMA,  # attributed runs by status, succeeded runs listed only
    **CATEGORY_SCHEMAS,  # what fails most: failure kinds per system / agent / day, label-free groups
}
RELATIVE_BINS = 10
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
ATTR_COLS = ["trace_id", "source", "system", "n_steps", "pred_step", "pred_agent", "candidates", "symptoms",
              "model_id", "tokens_pass1", "tokens_pass2", "seconds_pass1", "seconds_pass2", "trace_start",
              "attributed_at", "method", "pred_step_agent", "pred_agent_rule", "verdict_by", "confidence", "agent_by",
              "read_steps", "set_share", "set_coverage", "set_by", "localised", *CATEGORY_COLUMNS]


def most_traces(counts: Counter, n: int) -> list:
    """The n keys with most traces (ties by name): the groups a view breaks out where logs name their own source or
    system (one per log must not draw a chart, row or name per log); the stats files hold every group."""
    return sorted(counts, key=lambda k: (-counts[k], str(k)))[:n]


def _table(name: str, rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=STATS_SCHEMAS[name])


def compute_stats(outdir: Path | str, failure_words: tuple[str, ...] | None = None) -> dict[str, pa.Table]:
    outdir = Path(outdir)
    attr, dups = load.latest_per_trace(load.read(outdir, "attributions", columns=ATTR_COLS))
    log.info("stats over %d attributed traces in %s", attr.num_rows, outdir)
    out = {"blamed_agents": blamed_agents(attr), "blamed_by_day": blamed_by_day(attr),
           "step_position": step_position(attr), "throughput": throughput(attr), "verdicts": verdicts(attr),
           "runs": runs(load.run_records(outdir), previous_runs(outdir), load.committed_shards(outdir)),
           "run_status": run_status_table(outdir, set(attr["trace_id"].to_pylist())),
           **category_tables(attr, outdir, dups)}
    out["nll_by_agent"] = nll_by_agent(attr, load.read(
        outdir, "step_scores", columns=["trace_id", "step", "agent", "nll_pass1", "nll_pass2"]), dups)
    out["symptom_words"], out["accuracy"] = _trace_pass(outdir, attr, failure_words or MethodConfig().failure_words)
    return out




def _newest_input(outdir: Path) -> float:
    newest = 0.0
    for name in ("attributions", "step_scores", "traces", "errors"):
        d = outdir / name
        if d.is_dir():
            newest = max([newest] + [f.stat().st_mtime for f in d.iterdir() if f.suffix == ".parquet"])
    run = outdir / "run.json"
    return max(newest, run.stat().st_mtime) if run.is_file() else newest


def cached_or_compute(outdir: Path | str) -> dict[str, pa.Table]:
    """The stats tables from OUTDIR/stats/ when they are newer than every input (the `stats` command already
    ran on this state), else computed afresh -- the report then costs no second pass over step_scores."""
    outdir = Path(outdir)
    paths = {n: outdir / "stats" / f"{n}.parquet" for n in STATS_SCHEMAS}
    try:
        if all(p.is_file() for p in paths.values()) and min(p.stat().st_mtime for p in paths.values()) > \
                _newest_input(outdir):
            tables = {n: pq.read_table(p) for n, p in paths.items()}
            if all(t.schema.equals(STATS_SCHEMAS[n], check_metadata=False) for n, t in tables.items()):
                log.info("using the stats tables in %s (newer than the run's outputs)", outdir / "stats")
                return tables
    except (OSError, pa.ArrowInvalid) as exc:
        log.info("stats tables not reusable (%s): recomputing", exc)
    return compute_stats(outdir)


def write_stats(outdir: Path | str, failure_words: tuple[str, ...] | None = None) -> dict[str, Path]:
    tables = compute_stats(outdir, failure_words)
    paths = {}
    for name, table in tables.items():
        paths[name] = Path(outdir) / "stats" / f"{name}.parquet"
        outdir_parts.write_table_atomic(table, paths[name])
    return paths


def blamed_agents(attr: pa.Table) -> pa.Table:
    counts = Counter(zip(attr["source"].to_pylist(), attr["system"].to_pylist(), attr["pred_agent"].to_pylist(),
                         strict=True))
    per_sys = Counter()
    for (src, sysm, _), n in counts.items():
        per_sys[(src, sysm)] += n
    rows = [{"source": s, "system": y, "agent": a, "n_traces": n, "share": n / per_sys[(s, y)]}
            for (s, y, a), n in counts.items()]
    rows.sort(key=lambda r: (r["source"] or "", r["system"] or "", -r["n_traces"], r["agent"] or ""))
    return _table("blamed_agents", rows)


def blamed_by_day(attr: pa.Table) -> pa.Table:
    # The day the failure happened when the trace logged times, else the day it was attributed.
    start = attr["trace_start"]
    when = pc.if_else(pc.is_null(start), attr["attributed_at"], start)
    days = pc.cast(when, pa.date32()).to_pylist()
    basis = ["attributed_at" if s is None else "trace_start" for s in start.to_pylist()]
    counts = Counter(zip(days, basis, attr["source"].to_pylist(), attr["system"].to_pylist(),
                         attr["pred_agent"].to_pylist(), strict=True))
    rows = [{"day": d, "day_basis": b, "source": s, "system": y, "agent": a, "n_traces": n}
            for (d, b, s, y, a), n in counts.items()]
    rows.sort(key=lambda r: (r["day"] is None, r["day"] or date.min, r["source"] or "", r["system"] or "",
                             r["agent"] or ""))
    return _table("blamed_by_day", rows)


def verdicts(attr: pa.Table) -> pa.Table:
    """Traces per (source, system, verdict_by) and their mean confidence (verdict_by null: a run that recorded none)."""
    acc: dict[tuple, list] = defaultdict(lambda: [0, 0.0, 0, 0.0, 0])
    cols = [c for c in ("source", "system", "verdict_by", "confidence", "set_share") if c in attr.column_names]
    for r in attr.select(cols).to_pylist():
        a = acc[(r["source"], r["system"], r["verdict_by"] or "unknown (older run)")]
        a[0] += 1
        if r["confidence"] is not None:
            a[1] += r["confidence"]
            a[2] += 1
        if r.get("set_share") is not None:  # the share of its log each verdict's steps to read span
            a[3] += r["set_share"]
            a[4] += 1
    return _table("verdicts", [{"source": s, "system": y, "verdict_by": v, "n_traces": a[0],
                                "mean_confidence": a[1] / a[2] if a[2] else None,
                                "mean_set_share": a[3] / a[4] if a[4] else None}
                               for (s, y, v), a in sorted(acc.items(), key=lambda kv: tuple(x or "" for x in kv[0]))])


def relative_position(pred_step: int, n_steps: int) -> float:
    """0 = first step, 1 = last step."""
    return pred_step / (n_steps - 1) if n_steps > 1 else 0.0


def step_position(attr: pa.Table) -> pa.Table:
    counts: Counter = Counter()
    for src, p, n in zip(attr["source"].to_pylist(), attr["pred_step"].to_pylist(), attr["n_steps"].to_pylist(),
                         strict=True):
        if p is None or not n:
            continue
        counts[(src, "absolute", p)] += 1
        counts[(src, "relative", min(int(relative_position(p, n) * RELATIVE_BINS), RELATIVE_BINS - 1))] += 1
    rows = []
    for (src, measure, b), n in sorted(counts.items(), key=lambda kv: (kv[0][0] or "", kv[0][1], kv[0][2])):
        lo, hi = (b, b + 1) if measure == "absolute" else (b / RELATIVE_BINS, (b + 1) / RELATIVE_BINS)
        rows.append({"source": src, "measure": measure, "bin": b, "bin_lo": float(lo), "bin_hi": float(hi),
                     "n_traces": n})
    return _table("step_position", rows)


def nll_by_agent(attr: pa.Table, scores: pa.Table, dups: set[str] = frozenset()) -> pa.Table:
    """`dups`: traces attributed more than once, whose step rows are counted once (the first seen).
    n_blamed: steps of the agent that are their trace's blamed step (attributions.pred_step)."""
    src = dict(zip(attr["trace_id"].to_pylist(), attr["source"].to_pylist(), strict=True))
    blamed = dict(zip(attr["trace_id"].to_pylist(), attr["pred_step"].to_pylist(), strict=True))
    acc: dict[tuple, list] = defaultdict(lambda: [0, 0.0, 0, 0.0, 0, 0])  # n, sum1, n1, sum2, n2, blamed
    seen: set[tuple[str, int]] = set()
    for tid, step, agent, n1, n2 in zip(*(scores[c].to_pylist() for c in (
            "trace_id", "step", "agent", "nll_pass1", "nll_pass2")), strict=True):
        if tid not in src:
            continue  # step rows of a trace whose attribution row is missing (run killed between writes)
        if tid in dups:
            if (tid, step) in seen:
                continue
            seen.add((tid, step))
        a = acc[(src[tid], agent)]
        a[0] += 1
        if n1 is not None and np.isfinite(n1):
            a[1] += n1
            a[2] += 1
        if n2 is not None and np.isfinite(n2):
            a[3] += n2
            a[4] += 1
        a[5] += step == blamed[tid]
    rows = [{"source": s, "agent": g, "n_steps": a[0], "mean_nll_pass1": a[1] / a[2] if a[2] else None,
             "mean_nll_pass2": a[3] / a[4] if a[4] else None, "n_blamed": a[5]} for (s, g), a in acc.items()]
    rows.sort(key=lambda r: (r["source"] or "", -r["n_steps"], r["agent"] or ""))
    return _table("nll_by_agent", rows)


def _trace_pass(outdir: Path, attr: pa.Table, words: tuple[str, ...]) -> tuple[pa.Table, pa.Table]:
    """One streaming pass over traces/: failure words in the final symptom steps, and label accuracy."""
    by_id = {r["trace_id"]: r for r in attr.select(["trace_id", "source", "n_steps", "pred_step", "pred_agent",
                                                     "candidates", "symptoms", "method", "confidence", "read_steps",
                                                     "set_share", "set_coverage", "verdict_by"]).to_pylist()}
    rx = failure_word_regex(words)
    steps_with: Counter = Counter()
    traces_with: Counter = Counter()
    accuracy = AccuracyAccumulator()
    done: set[str] = set()
    bar = tqdm(total=len(by_id), desc="stats: traces", unit="trace", disable=None, leave=False)
    for batch in load.iter_trace_batches(outdir, ["trace_id", "source", "labels", "steps"]):
        bar.update(batch.num_rows)
        rows = batch.to_pylist()
        accuracy.add_batch(by_id, rows)
        for row in rows:
            a = by_id.get(row["trace_id"])
            if a is None or row["trace_id"] in done:
                continue  # ingested but not attributed (rejected later: see errors/), or a duplicate row
            done.add(row["trace_id"])
            steps = row["steps"] or []
            seen: set[str] = set()
            for s in a["symptoms"] or []:
                if 0 <= s < len(steps):
                    found = {m.group(0).lower() for m in rx.finditer(steps[s]["content"] or "")}
                    for w in found:
                        steps_with[(a["source"], w)] += 1
                    seen |= found
            for w in seen:
                traces_with[(a["source"], w)] += 1
    bar.close()
    words_rows = [{"source": s, "word": w, "n_symptom_steps": n, "n_traces": traces_with[(s, w)]}
                  for (s, w), n in steps_with.items()]
    words_rows.sort(key=lambda r: (r["source"] or "", -r["n_symptom_steps"], r["word"]))
    return _table("symptom_words", words_rows), _table("accuracy", accuracy.rows())


def throughput(attr: pa.Table) -> pa.Table:
    if attr.num_rows == 0:
        return _table("throughput", [])
    hours = pc.floor_temporal(attr["attributed_at"], unit="hour").to_pylist()
    acc: dict[tuple, list] = defaultdict(lambda: [0, 0, 0.0])
    cols = [attr[c].to_pylist() for c in ("model_id", "tokens_pass1", "tokens_pass2", "seconds_pass1",
                                          "seconds_pass2")]
    for h, m, t1, t2, s1, s2 in zip(hours, *cols, strict=True):
        a = acc[(h, m)]
        a[0] += 1
        a[1] += (t1 or 0) + (t2 or 0)
        a[2] += (s1 or 0.0) + (s2 or 0.0)
    rows = [{"hour": h, "model_id": m, "n_traces": n, "tokens": t, "seconds": s,
             "traces_per_s": n / s if s else None, "tokens_per_s": t / s if s else None}
            for (h, m), (n, t, s) in sorted(acc.items(), key=lambda kv: (kv[0][0] is None, kv[0][0] or _EPOCH,
                                                                         kv[0][1] or ""))]
    return _table("throughput", rows)


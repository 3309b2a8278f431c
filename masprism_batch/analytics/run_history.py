"""The `runs` stats table: the throughput history of a run directory, from the engine's run.json.

run.json holds only the latest invocation, so each `stats` call folds it into the previous
OUTDIR/stats/runs.parquet (one row per invocation, keyed by its start time). Rules:
- times are typed (`started_at`, `finished_at`: UTC timestamps); an older runs.parquet with text times is
  converted, not dropped;
- an invocation stopped by a signal leaves `_manifest/interrupted-*.json` (pipelines/interrupts.py): one row,
  `status` `interrupted`, with what it committed;
- an invocation that did nothing (a resume that found every shard committed: 0 traces, 0 shards run) adds
  no row;
- an invocation killed before it wrote run.json still counts: shards it committed (OUTDIR/_manifest/) that no
  recorded invocation's time window covers become one row per gap between recorded invocations, `status`
  `killed` with its times taken from the first and last commit (start and end of the killed invocation are
  not recorded; its seconds are the model/stage seconds of those shards). Killed rows are recomputed from the
  manifest at every call, never carried over.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

log = logging.getLogger(__name__)
_S, _I, _F = pa.string(), pa.int64(), pa.float64()
_TS = pa.timestamp("us", tz="UTC")
RUNS_SCHEMA = pa.schema([("run_index", _I), ("started_at", _TS), ("finished_at", _TS), ("status", _S),
                         ("engine", _S), ("model_id", _S), ("traces", _I), ("tokens", _I), ("seconds", _F),
                         ("traces_per_s", _F), ("tokens_per_s", _F), ("record_json", pa.large_string())])
FINISHED, KILLED, INTERRUPTED = "finished", "killed", "interrupted"


def parse_ts(v: Any) -> datetime | None:
    """ISO-8601 text, a datetime or epoch seconds -> an aware UTC datetime (None if it is none of these)."""
    if v is None or v == "":
        return None
    if isinstance(v, datetime):
        t = v
    elif isinstance(v, (int, float)) and not isinstance(v, bool):
        return datetime.fromtimestamp(float(v), tz=timezone.utc)
    else:
        try:
            s = str(v).strip()
            t = datetime.fromisoformat(s[:-1] + "+00:00" if s.endswith("Z") else s)
        except ValueError:
            return None
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)


def previous_runs(outdir: Path) -> pa.Table | None:
    p = outdir / "stats" / "runs.parquet"
    if not p.is_file():
        return None
    try:
        t = pq.read_table(p)
    except (OSError, pa.ArrowInvalid) as exc:
        log.warning("previous %s unreadable (%s): run history restarts", p, exc)
        return None
    if t.schema.equals(RUNS_SCHEMA, check_metadata=False):
        return t
    if not {"started_at", "record_json"} <= set(t.schema.names):
        log.warning("previous %s has an unknown layout: run history restarts", p)
        return None
    rows = []  # an older layout (text times, no status): converted
    for r in t.to_pylist():
        r["started_at"], r["finished_at"] = parse_ts(r.get("started_at")), parse_ts(r.get("finished_at"))
        r.setdefault("status", FINISHED)
        rows.append({f: r.get(f) for f in RUNS_SCHEMA.names})
    return pa.Table.from_pylist(rows, schema=RUNS_SCHEMA)


# run.json is the engine's record; its field names are matched leniently so a renamed field costs one column,
# never the table (the whole record is kept as JSON beside).
_RUN_FIELDS = {
    "started_at": ("started_at", "start_time", "started"), "finished_at": ("finished_at", "end_time", "finished"),
    "engine": ("engine",), "model_id": ("model_id", "model"),
    "traces": ("traces", "n_traces", "attributed", "traces_out"), "tokens": ("tokens", "n_tokens", "tokens_total"),
    "seconds": ("seconds", "wall_seconds", "wall_s", "elapsed_s"),
    "traces_per_s": ("traces_per_s", "traces_per_second"), "tokens_per_s": ("tokens_per_s", "tokens_per_second"),
}
_RUN_PREFER = "this_invocation."  # the engine's per-invocation block wins over cumulative counts


def _flat(d: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _run_key(row: dict[str, Any]) -> str:
    t = row["started_at"]
    return (row.get("status") or FINISHED) + "@" + (t.isoformat() if t is not None else row["record_json"])


def _noop(flat: dict[str, Any]) -> bool:
    """A resume that found everything committed: no trace attributed, no shard run, in this invocation."""
    return flat.get("this_invocation.traces") == 0 and flat.get("shards.run") == 0


def runs(records: list[dict[str, Any]], previous: pa.Table | None = None,
         committed: dict[str, dict[str, Any]] | None = None) -> pa.Table:
    """run.json holds only the latest invocation: `previous` (the last stats/runs.parquet) keeps the history;
    `committed` (manifest entries of OUTDIR) adds the work of invocations killed before they wrote run.json."""
    # killed rows are recomputed from the manifest every time (a later invocation's window may now cover a
    # commit that looked orphaned before): only finished invocations are history that run.json cannot restore
    rows = [] if previous is None else [r for r in previous.to_pylist() if r.get("status") != KILLED]
    seen = {_run_key(r) for r in rows}
    for rec in records:
        flat = dict(sorted(_flat(rec).items(), key=lambda kv: not kv[0].startswith(_RUN_PREFER)))
        if _noop(flat):
            log.info("run.json records a no-op resume (nothing left to do): no history row")
            continue
        status = INTERRUPTED if rec.get("status") == INTERRUPTED else FINISHED
        row: dict[str, Any] = {"run_index": len(rows), "status": status,
                               "record_json": json.dumps(rec, default=str, sort_keys=True)}
        for col, names in _RUN_FIELDS.items():
            hit = next((flat[k] for k in flat if k.rsplit(".", 1)[-1] in names and flat[k] is not None), None)
            typ = RUNS_SCHEMA.field(col).type
            try:
                row[col] = (None if hit is None else int(hit) if pa.types.is_integer(typ)
                            else float(hit) if pa.types.is_floating(typ)
                            else parse_ts(hit) if pa.types.is_timestamp(typ) else str(hit))
            except (TypeError, ValueError):
                row[col] = None
        if row["traces_per_s"] is None and row["traces"] and row["seconds"]:
            row["traces_per_s"] = row["traces"] / row["seconds"]
        if row["tokens_per_s"] is None and row["tokens"] and row["seconds"]:
            row["tokens_per_s"] = row["tokens"] / row["seconds"]
        if _run_key(row) not in seen:  # the same invocation seen again (stats run twice): keep one row
            seen.add(_run_key(row))
            rows.append(row)
    for row in killed_rows(committed or {}, rows):
        if _run_key(row) not in seen:
            seen.add(_run_key(row))
            rows.append(row)
    rows.sort(key=lambda r: (r["started_at"] is None, r["started_at"] or datetime.min.replace(tzinfo=timezone.utc)))
    for i, r in enumerate(rows):
        r["run_index"] = i
    return pa.Table.from_pylist(rows, schema=RUNS_SCHEMA)


def killed_rows(committed: dict[str, dict[str, Any]], known: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Committed shards outside every recorded invocation's [started_at, finished_at] window, one row per gap
    between recorded invocations (each gap holds at most one killed invocation's commits... or several killed
    ones in a row, which the manifest cannot tell apart)."""
    windows = [(r["started_at"], r["finished_at"]) for r in known
               if r.get("status", FINISHED) in (FINISHED, INTERRUPTED) and r["started_at"] is not None and r["finished_at"] is not None]
    starts = sorted(w[0] for w in windows)
    groups: dict[int, list[tuple[datetime, dict]]] = {}
    for e in committed.values():
        t = parse_ts(e.get("committed_at"))
        if t is None or not e.get("attributed"):
            continue  # the ingest shard of raw inputs, or an entry without a time
        if any(a <= t <= b for a, b in windows):
            continue
        gap = sum(1 for s in starts if s <= t)  # the recorded invocations that started before this commit
        groups.setdefault(gap, []).append((t, e))
    out = []
    for _, items in sorted(groups.items()):
        items.sort(key=lambda x: x[0])
        t0, t1 = items[0][0], items[-1][0]
        traces = sum(int(e.get("attributed") or 0) for _, e in items)
        tokens = sum(int(e.get("tokens") or 0) for _, e in items)
        secs = sum(float(v or 0) for _, e in items for v in (e.get("stage_seconds") or {}).values())
        engines = sorted({str(e.get("engine")) for _, e in items if e.get("engine")})
        rec = {"status": KILLED, "shards": len(items), "first_commit": t0.isoformat(), "last_commit": t1.isoformat(),
               "note": "reconstructed from OUTDIR/_manifest: this invocation ended before writing run.json"}
        out.append({"run_index": 0, "started_at": t0, "finished_at": t1, "status": KILLED,
                    "engine": ",".join(engines) or None, "model_id": None, "traces": traces, "tokens": tokens,
                    "seconds": secs or None, "traces_per_s": traces / secs if secs else None,
                    "tokens_per_s": tokens / secs if secs else None,
                    "record_json": json.dumps(rec, sort_keys=True)})
    return out

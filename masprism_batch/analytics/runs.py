"""The `runs` stats table: the throughput history of a run directory, from the engine's run.json.

run.json holds only the latest invocation, so each `stats` call folds it into the previous
OUTDIR/stats/runs.parquet (one row per invocation, keyed by its start time).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

log = logging.getLogger(__name__)
_S, _I, _F = pa.string(), pa.int64(), pa.float64()
RUNS_SCHEMA = pa.schema([("run_index", _I), ("started_at", _S), ("finished_at", _S), ("engine", _S),
                         ("model_id", _S), ("traces", _I), ("tokens", _I), ("seconds", _F),
                         ("traces_per_s", _F), ("tokens_per_s", _F), ("record_json", pa.large_string())])


def previous_runs(outdir: Path) -> pa.Table | None:
    p = outdir / "stats" / "runs.parquet"
    if not p.is_file():
        return None
    try:
        t = pq.read_table(p)
        return t if t.schema.equals(RUNS_SCHEMA, check_metadata=False) else None
    except (OSError, pa.ArrowInvalid) as exc:
        log.warning("previous %s unreadable (%s): run history restarts", p, exc)
        return None


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
    return row["started_at"] or row["record_json"]


def runs(records: list[dict[str, Any]], previous: pa.Table | None = None) -> pa.Table:
    """run.json holds only the latest invocation: `previous` (the last stats/runs.parquet) keeps the history."""
    rows = [] if previous is None else previous.to_pylist()
    seen = {_run_key(r) for r in rows}
    for rec in records:
        flat = dict(sorted(_flat(rec).items(), key=lambda kv: not kv[0].startswith(_RUN_PREFER)))
        row: dict[str, Any] = {"run_index": len(rows), "record_json": json.dumps(rec, default=str, sort_keys=True)}
        for col, names in _RUN_FIELDS.items():
            hit = next((flat[k] for k in flat if k.rsplit(".", 1)[-1] in names and flat[k] is not None), None)
            typ = RUNS_SCHEMA.field(col).type
            try:
                row[col] = (None if hit is None else int(hit) if pa.types.is_integer(typ)
                            else float(hit) if pa.types.is_floating(typ) else str(hit))
            except (TypeError, ValueError):
                row[col] = None
        if row["traces_per_s"] is None and row["traces"] and row["seconds"]:
            row["traces_per_s"] = row["traces"] / row["seconds"]
        if row["tokens_per_s"] is None and row["tokens"] and row["seconds"]:
            row["tokens_per_s"] = row["tokens"] / row["seconds"]
        if _run_key(row) not in seen:  # the same invocation seen again (stats run twice): keep one row
            seen.add(_run_key(row))
            rows.append(row)
    return pa.Table.from_pylist(rows, schema=RUNS_SCHEMA)

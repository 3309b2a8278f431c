"""Traces already in the canonical schema: JSON lines (one trace object per line) and Parquet datasets.

A JSON trace object has the field names of `schema.TRACES` (`metadata` may be an object or JSON text,
`start_time` ISO-8601 text or epoch). Unknown top-level or step fields are ignored. Parquet files are read
in bounded pieces (`parquet_rows.py`: row groups, dictionary expansion and rows capped before they are decoded).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

from masprism_batch.ingest.common import Context, IngestError, as_record_error, check_trace_id, short
from masprism_batch.ingest.spantree import parse_time
from masprism_batch.ingest.status import of_field
from masprism_batch.trace import Labels, Step, Trace

_STEP_FIELDS = {f.name for f in dataclasses.fields(Step)}
_LABEL_FIELDS = {f.name for f in dataclasses.fields(Labels)}
REQUIRED_COLUMNS = ("trace_id", "source", "steps")
MAX_TIME_CHARS = 64  # longest start_time text read: ISO-8601 with nanoseconds and an offset is ~35


def from_obj(obj: Any, record_id: str | None, default_source: str = "jsonl") -> Trace:
    """A canonical trace object (JSON or Arrow row dict) -> Trace; IngestError(invalid_record) if malformed."""
    if not isinstance(obj, dict):
        raise IngestError("invalid_record", f"a trace must be a JSON object, got {type(obj).__name__}", record_id)
    if "trace_id" not in obj:
        raise IngestError("invalid_record", "missing field 'trace_id'", record_id)
    tid = check_trace_id(obj["trace_id"], record_id)
    raw_steps = obj.get("steps")
    if not isinstance(raw_steps, list):
        raise IngestError("invalid_record", f"'steps' must be a list, got {type(raw_steps).__name__}", tid)
    steps = []
    for i, s in enumerate(raw_steps):
        if not isinstance(s, dict):
            raise IngestError("invalid_record", f"steps[{i}] must be an object, got {type(s).__name__}", tid)
        kw = {k: v for k, v in s.items() if k in _STEP_FIELDS}
        kw["index"] = i
        kw.setdefault("agent", None)
        kw.setdefault("content", None)
        st = kw.get("start_time")
        if st is not None and not hasattr(st, "tzinfo"):
            kw["start_time"] = _time(st, i, tid)
        steps.append(Step(**kw))
    labels = obj.get("labels")
    if labels is not None:
        if not isinstance(labels, dict):
            raise IngestError("invalid_record", f"'labels' must be an object, got {type(labels).__name__}", tid)
        labels = Labels(**{k: v for k, v in labels.items() if k in _LABEL_FIELDS})
    meta = obj.get("metadata")
    if isinstance(meta, str):
        try:
            meta = json.loads(meta) if meta else {}
        except RecursionError:  # no deep-JSON fallback here: metadata this deep is refused, not parsed on
            raise IngestError("invalid_record", "'metadata' JSON text nested too deeply", tid) from None
        except ValueError:
            raise IngestError("invalid_record", "'metadata' is not valid JSON text", tid) from None
    if meta is not None and not isinstance(meta, dict):
        raise IngestError("invalid_record", f"'metadata' must be an object, got {type(meta).__name__}", tid)
    return Trace(trace_id=tid, source=obj.get("source") or default_source, steps=steps, system=obj.get("system"),
                 question=obj.get("question"), labels=labels, metadata=meta or {},
                 run_status=of_field(obj.get("run_status")))


def _time(st: Any, i: int, tid: str):
    bad = IngestError("invalid_record", f"steps[{i}].start_time {short(st)} is not a time", tid)
    if isinstance(st, str) and len(st) > MAX_TIME_CHARS:  # no digit string this long is a time: not parsed
        raise bad
    try:
        t = parse_time(st)
    except (ValueError, OverflowError):  # int()'s digit limit, float() of a huge integer
        raise bad from None
    if t is None:
        raise bad
    return t


def parse_jsonl(lines: Iterator[tuple[int, str]], ctx: Context, loads) -> Iterator[Trace]:
    """`lines`: (line number, decoded text). A bad line is rejected alone; the file goes on."""
    for n, text in lines:
        if not text.strip():
            continue
        try:
            trace = from_obj(loads(text, f"line {n}"), f"line {n}")
        except Exception as e:  # noqa: BLE001 - any failure is this line's rejection, the file goes on
            e = as_record_error(e, f"line {n}")
            if e.record_id != f"line {n}":  # named by its trace id: the line too, so it can be found
                e.message = f"line {n}: {e.message}"
            ctx.reject(e)
            continue
        ctx.where = f"line {n}"
        yield trace
        ctx.where = None


def parse_parquet(path: str, ctx: Context) -> Iterator[Trace]:
    """Rows of a canonical Parquet file, read in bounded pieces (`parquet_rows`); a bad or oversized row is
    rejected alone."""
    from masprism_batch.ingest.limits import LIMITS
    from masprism_batch.ingest.parquet_rows import open_file, read_rows

    with open_file(path) as (_, cols, _):
        pass
    missing = [c for c in REQUIRED_COLUMNS if c not in cols]
    if missing:
        raise IngestError("invalid_schema", f"not a canonical traces table: missing columns {missing}")
    for first, _end, r in read_rows(path, LIMITS.get()):
        if isinstance(r, IngestError):
            ctx.reject(r)
            continue
        try:
            trace = from_obj(r, f"row {first + 1}", default_source="parquet")
        except Exception as e:  # noqa: BLE001 - any failure is this row's rejection
            ctx.reject_any(e, f"row {first + 1}")
            continue
        ctx.where = f"row {first + 1}"
        yield trace
        ctx.where = None

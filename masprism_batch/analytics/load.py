"""Reading a run's OUTDIR for analytics: which datasets exist, and narrow column reads of them.

attributions/ is required; step_scores/, errors/, traces/ and run.json are optional (a report of a run
without them just leaves those panels out). Reads go through masprism_batch.outdir.reads so temporary parts of a
run still in progress are ignored.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from masprism_batch import schema
from masprism_batch.outdir import manifest
from masprism_batch.outdir import reads as outdir_reads
from masprism_batch.outdir.shards import MANIFEST_DIR, ShardStore

log = logging.getLogger(__name__)


class AnalyticsInputError(ValueError):
    """OUTDIR does not hold what an analytics command needs (message says what is missing)."""


def has_dataset(outdir: Path, name: str) -> bool:
    d = Path(outdir) / name
    return d.is_dir() and any(p.suffix == ".parquet" and not p.name.startswith((".", "_")) for p in d.iterdir())


def read(outdir: Path, name: str, columns: list[str] | None = None, trace_ids: set[str] | None = None) -> pa.Table:
    """Columns of one dataset; an absent optional dataset reads as an empty table of its schema."""
    sch = schema.TABLES[name]
    if not has_dataset(outdir, name):
        if name == "attributions":
            raise AnalyticsInputError(f"{Path(outdir) / name} holds no Parquet parts: is {outdir} a run's OUTDIR?")
        log.info("%s/ absent in %s: its panels stay empty", name, outdir)
        cols = columns or sch.names
        return pa.Table.from_pylist([], schema=pa.schema([sch.field(c) for c in cols]))
    # typed: an empty id list would be an array of type null, which Arrow cannot compare with strings
    flt = ds.field("trace_id").isin(pa.array(sorted(trace_ids), pa.string())) if trace_ids is not None else None
    have = set(_schema(Path(outdir) / name).names) if columns else set()
    missing = [c for c in columns or [] if c not in have]
    table = outdir_reads.read_dataset(Path(outdir) / name, columns=[c for c in columns if c in have] if columns else None,
                            filter=flt)
    return with_columns(table, name, columns, missing)


def stored_trace_id(outdir: Path, text: str) -> str:
    """The trace id of attributions/ that `text` names: a terminal shows an id with its hidden characters
    escaped (`schema.printable`: `x\\u200by`), so text copied from a listing names the one id shown as it. Text
    that several ids show as (one of them may be that text itself: another log can name its trace so) is
    ambiguous: AnalyticsInputError, each id in Python's notation, which tells them apart."""
    if "\\" not in text:  # every escape starts with a backslash: no other id shows as this text
        return text
    ids = read(outdir, "attributions", columns=["trace_id"])["trace_id"].to_pylist()
    named = sorted({t for t in ids if t == text or schema.printable(t) == text})
    if len(named) > 1:
        raise AnalyticsInputError(
            f"{len(named)} traces show as {text!r}: {', '.join(map(repr, named[:5]))}; give the one you mean with "
            "its characters, as Python writes it here (in bash: $'...')")
    return named[0] if named else text


def _schema(directory: Path) -> pa.Schema:
    return outdir_reads.open_dataset(directory).schema  # the same view of the parts as the reads


def with_columns(table: pa.Table, name: str, columns: list[str] | None, missing: list[str]) -> pa.Table:
    """Columns added to a schema after an OUTDIR was written read as nulls (older runs stay readable)."""
    if not missing:
        return table
    sch = schema.TABLES[name]
    for c in missing:
        table = table.append_column(sch.field(c), pa.nulls(table.num_rows, sch.field(c).type))
    return table.select(columns)


def iter_table(outdir: Path, name: str, columns: list[str]) -> Iterator[pa.RecordBatch]:
    """Stream columns of one dataset; columns the OUTDIR's parts predate read as nulls."""
    have = set(_schema(Path(outdir) / name).names)
    missing = [c for c in columns if c not in have]
    for b in outdir_reads.iter_batches(Path(outdir) / name, columns=[c for c in columns if c in have]):
        if missing:
            t = with_columns(pa.Table.from_batches([b]), name, columns, missing)
            yield from t.to_batches()
        else:
            yield b


def iter_trace_batches(outdir: Path, columns: list[str], batch_size: int = 256) -> Iterator[pa.RecordBatch]:
    """Stream traces/ (its step text can be gigabytes at scale); nothing when it is absent."""
    if has_dataset(outdir, "traces"):
        yield from outdir_reads.iter_batches(Path(outdir) / "traces", columns=columns, batch_size=batch_size)


def run_records(outdir: Path) -> list[dict[str, Any]]:
    """Run records from OUTDIR/run.json (one object, a list of them, or an object holding `runs`/`history`),
    then those of invocations stopped by a signal (`_manifest/interrupted-*.json`)."""
    return _run_json(Path(outdir)) + _interrupted(Path(outdir))


def _interrupted(outdir: Path) -> list[dict[str, Any]]:
    out = []
    for p in sorted((outdir / MANIFEST_DIR).glob("interrupted-*.json")):
        try:
            rec = json.loads(manifest.read_control(p) or "null")
        except (OSError, ValueError) as exc:
            log.warning("%s unreadable (%s): that interrupted invocation is not listed", p, exc)
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def _run_json(outdir: Path) -> list[dict[str, Any]]:
    p = outdir / "run.json"
    if not p.is_file():
        return []
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        log.warning("run.json unreadable (%s): throughput history left empty", exc)
        return []
    if isinstance(data, dict):
        for key in ("runs", "history"):
            if isinstance(data.get(key), list):
                return [r for r in data[key] if isinstance(r, dict)]
        return [data]
    if isinstance(data, list):
        return [r for r in data if isinstance(r, dict)]
    log.warning("run.json holds a %s, not an object: ignored", type(data).__name__)
    return []


def latest_per_trace(attr: pa.Table) -> tuple[pa.Table, set[str]]:
    """One attribution row per trace id (the latest attributed_at), and the ids that had several: a re-run
    into the same OUTDIR must not count a trace twice."""
    if attr.num_rows == len(pc.unique(attr["trace_id"])):
        return attr, set()
    order = pc.sort_indices(attr, sort_keys=[("trace_id", "ascending"), ("attributed_at", "descending")])
    srt = attr.take(order)
    ids = srt["trace_id"].to_pylist()
    keep = [i for i in range(len(ids)) if i == 0 or ids[i] != ids[i - 1]]
    dups = {ids[i] for i in range(1, len(ids)) if ids[i] == ids[i - 1]}
    log.warning("%d duplicate attribution rows (same trace id): keeping the latest of each",
                attr.num_rows - len(keep))
    return srt.take(keep), dups


def committed_shards(outdir: Path) -> dict[str, dict[str, Any]]:
    """Manifest entries of a `run`/`attribute` OUTDIR (empty for other layouts): what each committed shard
    holds and when it was committed, for the work of invocations that never wrote run.json."""
    if not (Path(outdir) / MANIFEST_DIR).is_dir():
        return {}
    try:
        return ShardStore(outdir).committed()
    except (OSError, ValueError) as exc:
        log.warning("manifest of %s unreadable (%s): killed invocations not counted", outdir, exc)
        return {}

"""Input planning: from command-line inputs to a deterministic list of shards.

Every run works on a canonical traces Parquet dataset. A directory or file of canonical Parquet (hive
partitions allowed) is used in place; anything else (raw logs) is first streamed through
`ingest.read_inputs` into `OUTDIR/_staging/` once (staging.py), with its rejections (the "ingest" shard). A shard is a
row range [start, stop) of one Parquet file, at most `traces_per_shard` rows; its id hashes the file key and
range, never the trace content, so a resumed run finds the same shards. Repeated trace ids are found by one
scan of the `trace_id` column through the check raw input gets in `read_inputs` (`ingest.SeenIds`): the first
occurrence wins, the others are rejected as `duplicate_trace_id`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
from masprism_batch.pipelines import increment
from masprism_batch.pipelines.selection import Selection
from masprism_batch.pipelines.staging import stage_raw

from masprism_batch import schema
from masprism_batch.config import IngestConfig
from masprism_batch.ingest import SeenIds
from masprism_batch.ingest.common import Context, IngestError
from masprism_batch.ingest.file_bytes import regular_file
from masprism_batch.ingest.parquet_rows import read_rows, trace_id_keys
from masprism_batch.ingest.status import attributable
from masprism_batch.ingest.validate import validate
from masprism_batch.outdir.manifest import require_regular
from masprism_batch.schema import error_row
from masprism_batch.trace import Trace

log = logging.getLogger(__name__)

INGEST_SHARD = "ingest"


@dataclass(frozen=True)
class Shard:
    shard_id: str
    path: str  # Parquet file read by the shard
    start: int
    stop: int
    label: str  # input as the user named it (errors/.input_path); never used to build a path
    partition: dict[str, str] = field(default_factory=dict)  # hive keys missing from the file's columns
    skip: tuple[int, ...] = ()  # file-relative rows that repeat an earlier trace_id
    # resume of a shard committed in part (commit.Committer pieces): trace ids already committed, and whether
    # the shard's read rejections were (they travel with its first pack)
    done: tuple[str, ...] = ()
    errors_done: bool = False

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Shard:
        d = json.loads(text)
        d["skip"] = tuple(d["skip"])
        d["done"] = tuple(d.get("done", ()))
        return cls(**d)


@dataclass
class InputPlan:
    shards: list[Shard]
    staged: bool
    ingest_errors: pa.Table | None  # rejections of the raw-input staging pass (committed as shard "ingest")
    # rejections of each later staging generation (increment.py), by the shard id they are committed as
    increment_errors: dict[str, pa.Table] = field(default_factory=dict)
    increment: dict | None = None  # what this invocation found new in the inputs (`increment.Increment`)


def _refreshed(outdir: Path) -> dict[str, int]:
    """{trace id: the latest generation that staged it again} (--refresh, pipelines/refresh.py)."""
    from masprism_batch.outdir.manifest import read_json

    marker = read_json(Path(outdir) / "_staging" / "_COMPLETE.json") or {}
    return {tid: int(g["generation"]) for g in marker.get("generations") or [] for tid in g.get("refreshed_ids") or []}


def _shard_id(key: str, start: int, stop: int) -> str:
    return hashlib.sha256(f"{key}\0{start}\0{stop}".encode()).hexdigest()[:20]


def is_trace_dataset(path: str) -> bool:
    """A canonical traces Parquet file or folder, read in place. Anything else (raw logs, and any folder with a
    link, FIFO, socket or device in it) goes through ingest, whose input policy turns those into error rows."""
    p = Path(path)
    if p.is_file():
        files = [p] if p.suffix == ".parquet" else []
    elif p.is_dir():
        entries = [f for f in p.rglob("*") if not any(x.startswith((".", "_")) for x in f.relative_to(p).parts)]
        if any(f.is_symlink() or not (f.is_file() or f.is_dir()) for f in entries):
            return False
        files = [f for f in entries if f.is_file()]
        if not files or any(f.suffix != ".parquet" for f in files):
            return False
    else:
        return False
    if not files:
        return False
    try:  # opened as every input is (O_NONBLOCK, fstat on the descriptor): a FIFO swapped in is refused, not waited on
        with regular_file(str(files[0])) as f:
            names = set(pq.read_schema(f).names)
    except IngestError:
        return False  # ingest reads it and reports it
    return {"trace_id", "steps"} <= names


def _fragments(path: str) -> list[tuple[str, dict[str, str]]]:
    if Path(path).is_file():
        return [(str(Path(path).resolve()), {})]
    # the files are listed, never opened here (an empty schema: nothing to inspect); each is opened by read_rows as
    # every input is. Hive keys (`source=app/`) come from the folder names, as pyarrow's discovery gives them.
    d = pads.dataset(path, format="parquet", ignore_prefixes=[".", "_"], schema=pa.schema([]))
    out = []
    for frag in d.get_fragments():
        rel = Path(frag.path).resolve().relative_to(Path(path).resolve()).parts[:-1]
        keys = dict(part.split("=", 1) for part in rel if "=" in part)
        out.append((str(Path(frag.path).resolve()), {k: unquote(v) for k, v in keys.items()
                                                     if v != "__HIVE_DEFAULT_PARTITION__"}))
    return sorted(out)


def plan_inputs(inputs: list[str], outdir: Path, fmt: str, traces_per_shard: int,
                limits: IngestConfig | None = None, select: Selection | None = None,
                refresh: bool = False) -> InputPlan:
    """Shards of `inputs`; a `select` other than everything stages even canonical input (it is applied there)."""
    from masprism_batch.ingest import ingest_state

    if traces_per_shard < 1:
        raise ValueError("traces_per_shard must be >= 1")
    missing = [p for p in inputs if not os.path.lexists(p)]
    if missing:
        raise FileNotFoundError(f"input not found: {', '.join(missing)}")
    staged = not all(is_trace_dataset(p) for p in inputs) or not (select is None or select.everything)
    for p in inputs:
        state = ingest_state(p) if os.path.isdir(p) else None
        if state is not None and not state.get("complete"):
            raise ValueError(f"{p} is the output of an `ingest` that did not finish (no completion in "
                             f"_INGEST.json): it would be planned as the whole input; re-run `ingest`")
    files: list[tuple[str, str, str, dict[str, str]]] = []  # (path, shard key, label, partition)
    ingest_errors, increment_errors, inc = None, {}, None
    if staged:
        staging = outdir / "_staging"
        inc = stage_raw(inputs, staging, fmt, traces_per_shard, limits, select, refresh).as_dict()
        label = ",".join(inputs)
        for f in sorted((staging / "traces").glob("part-*.parquet")):
            files.append((str(f.resolve()), f"_staging/{f.name}", label, {}))
        by_gen: dict[int, list[pa.Table]] = {}
        for f in sorted((staging / "errors").glob("part-*.parquet")):
            require_regular(f)
            by_gen.setdefault(increment.generation_of(f.name), []).append(pq.read_table(f, schema=schema.ERRORS))
        ingest_errors = pa.concat_tables(by_gen.pop(0)) if 0 in by_gen else schema.ERRORS.empty_table()
        increment_errors = {f"{INGEST_SHARD}-g{g:04d}": pa.concat_tables(t) for g, t in sorted(by_gen.items())}
    else:
        for p in inputs:
            files += [(f, f, p, part) for f, part in _fragments(p)]
    shards, seen = [], SeenIds()
    latest = _refreshed(outdir) if staged else {}  # --refresh: a refreshed trace's newest copy wins
    for path, key, label, part in files:
        require_regular(path)
        ids = trace_id_keys(path, limits or IngestConfig())  # bounded: a repeated 1 MB id is never decoded per row
        gen = increment.generation_of(Path(path).name) if latest else 0
        dup = [i for i, tid in enumerate(ids) if tid is not None
               and (latest[tid] != gen if tid in latest else seen.repeated(tid))]
        for start in range(0, len(ids), traces_per_shard):
            stop = min(start + traces_per_shard, len(ids))
            skip = tuple(i for i in dup if start <= i < stop)
            shards.append(Shard(_shard_id(key, start, stop), path, start, stop, label, part, skip))
    return InputPlan(shards, staged, ingest_errors, increment_errors, inc)


def read_shard(shard: Shard, limits: IngestConfig | None = None) -> tuple[list[Trace], list[dict]]:
    """Rows [start, stop) of the shard's file as Traces; unreadable rows and repeated ids become errors. The
    ingest caps (`limits`) apply here too, so canonical Parquet read in place is bounded like raw input
    (a no-op on staged input, already capped)."""
    require_regular(Path(shard.path))  # a FIFO would block the open forever
    limits = limits or IngestConfig()
    skip = set(shard.skip)
    traces, errors = [], []
    # bounded pieces (ingest/parquet_rows.py): oversized row groups and rows are rejected before they are decoded
    for first, end, row in read_rows(shard.path, limits, shard.start, shard.stop):
        if isinstance(row, IngestError):
            errors.extend(error_row(input_path=shard.label, record_id=f"row:{i}", stage="ingest", reason=row.reason,
                                    message=row.message) for i in range(first, end))
            continue
        i = first
        for k, v in shard.partition.items():
            row.setdefault(k, v)
        tid = row.get("trace_id")
        if i in skip:
            errors.append(error_row(input_path=shard.label, record_id=tid, stage="ingest", reason="duplicate_trace_id",
                                    message="an earlier row of the input has the same trace_id"))
            continue
        try:
            if not tid or not row.get("source"):
                raise ValueError("trace_id and source are required")
            trace = Trace.from_row(row)
            del row
            # checked against the schema before the run binds it, as ingest checks every trace (`validate`): a
            # number where text belongs is cast, a value that cannot be (a text start_time) rejects the row
            traces.append(validate(trace, Context(shard.label, errors.append), limits))
        except IngestError as e:
            errors.append(error_row(input_path=shard.label, record_id=e.record_id or tid, stage="ingest", reason=e.reason,
                                    message=e.message))
        except Exception as e:  # noqa: BLE001 - a malformed row is rejected, not fatal
            errors.append(error_row(input_path=shard.label, record_id=tid or f"row:{i}", stage="ingest",
                                    reason="invalid_row", message=f"{e}"[:2000]))
    if limits is None or not limits.all_runs:  # succeeded runs: counted and listed, not attributed
        traces = list(attributable(traces, errors.append, shard.label))
    return traces, errors

"""Input planning: from command-line inputs to a deterministic list of shards.

Every run works on a canonical traces Parquet dataset. A directory or file of canonical Parquet (hive
partitions allowed) is used in place; anything else (raw logs) is first streamed through
`ingest.read_inputs` into `OUTDIR/_staging/` once, with its rejections (the "ingest" shard). A shard is a
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
import shutil
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
from masprism_batch.pipelines import increment
from masprism_batch.pipelines.selection import Selection

from masprism_batch import schema
from masprism_batch.config import IngestConfig
from masprism_batch.ingest import SeenIds
from masprism_batch.ingest.common import IngestError, apply_caps
from masprism_batch.ingest.parquet_rows import read_rows, trace_id_keys
from masprism_batch.ingest.status import attributable, counts_line, outcome_counts
from masprism_batch.outdir.manifest import read_json as read_marker
from masprism_batch.outdir.manifest import require_regular
from masprism_batch.outdir.parts import DatasetWriter, write_json_atomic
from masprism_batch.schema import error_row
from masprism_batch.trace import Trace

log = logging.getLogger(__name__)

INGEST_SHARD = "ingest"
STAGING_PART_CHARS = 64 * 1024**2  # flush a staged part once this much step text is buffered


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
    names = set(pq.read_schema(files[0]).names)
    return {"trace_id", "steps"} <= names


def _fragments(path: str) -> list[tuple[str, dict[str, str]]]:
    if Path(path).is_file():
        return [(str(Path(path).resolve()), {})]
    d = pads.dataset(path, format="parquet", partitioning="hive", ignore_prefixes=[".", "_"])
    out = []
    for frag in d.get_fragments():
        keys = pads.get_partition_keys(frag.partition_expression) or {}
        out.append((str(Path(frag.path).resolve()), {k: str(v) for k, v in keys.items()}))
    return sorted(out)


def _staged_rows(staging: Path) -> dict[str, int]:
    return {f"{d}/{f.name}": _parquet(f).metadata.num_rows
            for d in ("traces", "errors") for f in sorted((staging / d).glob("part-*.parquet"))}


def _parquet(path: Path) -> pq.ParquetFile:
    require_regular(path)  # a FIFO would block the open forever
    return pq.ParquetFile(path)


def _describe(key: dict) -> str:
    """A staging key as the options that made it (what a user typed), for the refusal message."""
    sel = key.get("select") or {}
    opts = [f"--{k} {sel[k]}" for k in ("limit", "sample") if sel.get(k) is not None]
    if sel.get("sample") is not None:
        opts.append(f"--seed {sel.get('seed', 0)}")
    if sel.get("dataset"):
        opts.append(f"dataset {sel['dataset']}")
    opts += [f"--format {key['fmt']}"] if key.get("fmt", "auto") != "auto" else []
    opts += [f"traces_per_shard {key['traces_per_shard']}"] if "traces_per_shard" in key else []
    return f"inputs {', '.join(key.get('inputs') or []) or '?'} ({', '.join(opts) or 'every trace'})"


def _staging_key(inputs: list[str], fmt: str, traces_per_shard: int | None, select: Selection | None) -> dict:
    key: dict = {"inputs": [os.path.abspath(p) for p in inputs], "fmt": fmt, "traces_per_shard": traces_per_shard}
    chosen = (select or Selection()).key()
    if chosen is not None:  # "everything" stays out of the key, so older stagings keep theirs
        key["select"] = chosen
    return key


def _conflict(outdir: Path, staged: dict, asked: dict) -> str:
    return (f"{outdir} holds a run of other inputs or another selection: it was started with {_describe(staged)}; "
            f"this run asks for {_describe(asked)}. Use a new OUTDIR (or re-run the first command to resume it)")


def staging_conflict(outdir: Path, inputs: list[str], fmt: str, select: Selection | None) -> str | None:
    """Read-only early answer, before a model is loaded: why OUTDIR's finished staging is not these inputs and
    this selection (None: no staging, or the same). `stage_raw` makes the binding check under the OUTDIR lock;
    shard size is left to it, since a resume may take it from the run's header."""
    done = read_marker(Path(outdir) / "_staging" / "_COMPLETE.json")
    if done is None:
        return None
    staged = done.get("key") or {}
    asked = _staging_key(inputs, fmt, staged.get("traces_per_shard"), select)
    return None if staged == asked else _conflict(Path(outdir), staged, asked)


def stage_raw(inputs: list[str], staging: Path, fmt: str, traces_per_shard: int,
              limits: IngestConfig | None = None, select: Selection | None = None) -> increment.Increment:
    """Stream raw inputs through ingest into a canonical dataset, once (a completed staging is reused).

    Atomic: everything is written under `_staging.partial/`, the marker `_COMPLETE.json` (with the row count of
    every part) last, then the folder is renamed to `_staging/`. A reused staging is checked against its marker
    (part names and row counts), so a damaged staging is refused instead of planned as the whole input. The
    caller holds the OUTDIR lock, so no other run writes here meanwhile. A completed staging whose inputs grew
    or changed since stages what is new (increment.py); returns what was new."""
    from masprism_batch import ingest

    marker = staging / "_COMPLETE.json"
    select = select or Selection()
    key = _staging_key(inputs, fmt, traces_per_shard, select)
    done = read_marker(marker, strict=True)
    now = increment.fingerprints(inputs)
    if done is not None:
        if done.get("key") != key:
            raise ValueError(_conflict(staging.parent, done.get("key") or {}, key))
        increment.drop_unlisted(staging, done)
        if "parts" in done and _staged_rows(staging) != done["parts"]:
            raise ValueError(f"{staging} does not match its completion marker (parts or row counts differ): "
                             f"it was changed after staging; use a new OUTDIR")
        if "files" not in done:  # staged by a version that did not record its files
            return increment.Increment(files=len(now), not_added="this OUTDIR's staging does not record its files "
                                       "(an older version): new logs are not picked up; use a new OUTDIR for them")
        inc = increment.compare(done, now)
        if (inc.new_files or inc.changed_files) and not select.everything:
            inc.not_added = (f"{len(inc.new_files) + len(inc.changed_files):,} new or changed file(s) not added: "
                             f"this OUTDIR holds a selection (--sample/--limit); a new OUTDIR takes them")
        elif inc.new_files or inc.changed_files:
            increment.stage_increment(staging, done, now, inc, fmt, traces_per_shard, limits, _staged_rows)
        return inc
    if staging.exists():
        shutil.rmtree(staging)  # a staging pass of an older version that did not finish: nothing was committed
    partial = staging.parent / (staging.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)  # a staging pass that did not finish (we hold the lock: no one else writes it)
    traces = DatasetWriter(partial / "traces", schema.TRACES, rows_per_part=traces_per_shard, prefix="part")
    errors = DatasetWriter(partial / "errors", schema.ERRORS, rows_per_part=4096, prefix="part")
    n, buffered = 0, 0
    reasons: Counter = Counter()
    set_aside: list[dict] = []  # succeeded_run rows of the file being read: they get its path when it ends

    def error(row: dict) -> None:
        reasons[row["reason"]] += 1
        errors.write(row)

    def file_done(path: str, *_sizes: int) -> None:  # called once a file's last trace was taken (ingest)
        for row in set_aside:
            error({**row, "input_path": path})
        set_aside.clear()

    read = ingest.read_inputs(list(inputs), fmt=fmt, on_error=error, on_file=file_done, limits=limits)
    if limits is None or not limits.all_runs:  # before the selection: --sample N / --limit N count attributed runs
        read = attributable(read, set_aside.append)
    for t in select.apply(read):
        traces.write(t.to_row())
        n += 1
        buffered += sum(len(s.content or "") for s in t.steps)
        if buffered > STAGING_PART_CHARS:  # multi-MB traces: bound the buffer by text, not only by rows
            traces.flush()
            buffered = 0
    traces.close()
    file_done(",".join(inputs))  # rows of a file cut short by the selection (--limit): named by the inputs
    errors.close()
    write_json_atomic({"key": key, "traces": n, "errors": errors.rows_written, "parts": _staged_rows(partial),
                       "files": increment.recorded(now)}, partial / "_COMPLETE.json")
    os.replace(partial, staging)
    log.info("staged %s from %d input(s)", counts_line(outcome_counts(n, dict(reasons))).replace(
        "attributed", "to attribute", 1), len(inputs))
    return increment.Increment(files=len(now), new_files=sorted(v[0] for v in now.values()), new_traces=n)


def plan_inputs(inputs: list[str], outdir: Path, fmt: str, traces_per_shard: int,
                limits: IngestConfig | None = None, select: Selection | None = None) -> InputPlan:
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
        inc = stage_raw(inputs, staging, fmt, traces_per_shard, limits, select).as_dict()
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
    for path, key, label, part in files:
        require_regular(path)
        ids = trace_id_keys(path, limits or IngestConfig())  # bounded: a repeated 1 MB id is never decoded per row
        dup = [i for i, tid in enumerate(ids) if tid is not None and seen.repeated(tid)]
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
            traces.append(apply_caps(trace, limits, lambda reason, msg, rid=None, **_: errors.append(
                error_row(input_path=shard.label, record_id=rid, stage="ingest", reason=reason, message=msg))))
        except IngestError as e:
            errors.append(error_row(input_path=shard.label, record_id=e.record_id or tid, stage="ingest", reason=e.reason,
                                    message=e.message))
        except Exception as e:  # noqa: BLE001 - a malformed row is rejected, not fatal
            errors.append(error_row(input_path=shard.label, record_id=tid or f"row:{i}", stage="ingest",
                                    reason="invalid_row", message=f"{e}"[:2000]))
    if limits is None or not limits.all_runs:  # succeeded runs: counted and listed, not attributed
        traces = list(attributable(traces, errors.append, shard.label))
    return traces, errors

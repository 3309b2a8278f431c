"""Staging raw inputs: streamed once through ingest into `OUTDIR/_staging/` (a canonical traces dataset and its
rejections), atomically, with a marker that binds it to the inputs and the selection and records each data file
read (increment.py: a re-run over inputs that grew stages what is new). plan.py plans shards over it.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
from masprism_batch.pipelines import increment
from masprism_batch.pipelines.selection import Selection

from masprism_batch import schema
from masprism_batch.config import IngestConfig
from masprism_batch.ingest import run_ids
from masprism_batch.ingest.status import attributable, counts_line, outcome_counts
from masprism_batch.outdir.manifest import read_json as read_marker
from masprism_batch.outdir.manifest import require_regular
from masprism_batch.outdir.parts import DatasetWriter, write_json_atomic

log = logging.getLogger(__name__)

STAGING_PART_CHARS = 64 * 1024**2  # flush a staged part once this much step text is buffered


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
              limits: IngestConfig | None = None, select: Selection | None = None,
              refresh: bool = False) -> increment.Increment:
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
    refused: dict[str, dict] = {}  # what the walk refuses (links leaving the folder, FIFOs): rows, increment.walk_rows
    now = increment.fingerprints(inputs, refused)
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
        inc = increment.compare(done, now, refused)
        walk = increment.walk_rows(done, refused)
        if (inc.new_files or inc.changed_files) and not select.everything:
            inc.not_added = (f"{len(inc.new_files) + len(inc.changed_files):,} new or changed file(s) not added: "
                             f"this OUTDIR holds a selection (--sample/--limit); a new OUTDIR takes them")
        elif inc.new_files or inc.changed_files or walk:
            increment.stage_increment(staging, done, now, inc, fmt, traces_per_shard, limits, _staged_rows,
                                      refresh=refresh, walk=(walk, refused))  # --refresh: pipelines/refresh.py
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
                       "files": increment.recorded(now), "refused": increment.recorded_refused(refused),
                       **run_ids.marker_fields(None)}, partial / "_COMPLETE.json")
    os.replace(partial, staging)
    log.info("staged %s from %d input(s)", counts_line(outcome_counts(n, dict(reasons))).replace(
        "attributed", "to attribute", 1), len(inputs))
    return increment.Increment(files=len(now), new_files=sorted(v[0] for v in now.values()), new_traces=n)

"""Incremental runs: re-running the same command into an OUTDIR whose input folder grew attributes exactly the
new traces (a nightly job over a log folder).

The staging marker (`_staging/_COMPLETE.json`) records every data file it read with its size and mtime. A re-run
with the same inputs and the same selection (everything) compares the folder with it:

- a new file is staged as the next *generation* of parts (`part-g0001-00000.parquet`, ...): new shards, the
  committed ones untouched (a shard's id is its part name and row range, plan.py);
- a changed file (size or mtime) is said and read again; its traces already staged are skipped (the same trace
  is never attributed twice), the others are new;
- a removed file is said; its verdicts stay.

A trace of a new file whose id was staged before is skipped too (first wins, as in one run); so is one whose
content matches a run of a part staged under an older id scheme (`ingest/run_ids.py`: its id was the file's).
The generation's rejections are committed as their own shard (`ingest-g0001`). Crash safety: the generation is
written beside the staging, its files moved in, the marker rewritten last; parts the marker does not list (a
generation cut short) are removed before anything is planned, so they are staged again, never planned half-done.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from masprism_batch import schema
from masprism_batch.config import IngestConfig
from masprism_batch.ingest import run_ids
from masprism_batch.ingest.status import attributable
from masprism_batch.outdir.manifest import require_regular
from masprism_batch.outdir.parts import DatasetWriter, write_json_atomic
from masprism_batch.trace import Trace

log = logging.getLogger(__name__)

LEGACY_DIGESTS = "_legacy_digests.parquet"  # run_ids: the runs of parts staged under an older id scheme
GENERATION = "part-g"  # prefix of an increment's parts; generation 0 (the first staging) is `part-NNNNN`


@dataclass
class Increment:
    """What this invocation found in the inputs against the staging (run.json `this_invocation.inputs`)."""

    files: int = 0  # data files under the inputs now
    new_files: list[str] = field(default_factory=list)
    changed_files: list[str] = field(default_factory=list)
    removed_files: list[str] = field(default_factory=list)
    new_traces: int = 0  # traces staged by this invocation (all of them on a first run)
    already_staged: int = 0  # traces of new or changed files whose id was staged before: skipped
    not_added: str | None = None  # why new or changed files were not staged (a --sample/--limit run)
    # --refresh (refresh.py): traces of changed files staged again, their content changed; all listed
    refreshed_ids: list[str] = field(default_factory=list)
    refresh: bool = False  # this invocation ran with --refresh

    def as_dict(self, names: int = 20) -> dict:
        """Counts, and the first `names` paths of each list (a folder of 100,000 logs stays a small run.json)."""
        d = asdict(self)
        for k in ("new_files", "changed_files", "removed_files"):
            d[f"{k}_count"], d[k] = len(d[k]), d[k][:names]
        d["refreshed_ids_count"] = len(d["refreshed_ids"])  # listed whole: refresh.purge_stale reads them
        return d


def fingerprints(inputs: list[str], refused: dict[str, dict] | None = None) -> dict[str, tuple[str, int, int]]:
    """{absolute path: (path as expanded from the inputs, size, mtime_ns)} of every data file under `inputs`;
    `refused` gets {absolute path: row} of what the walk refuses (a link leaving the folder, a FIFO, a file it
    skips): the rows a fresh ingest gives (`walk_rows`)."""
    from masprism_batch.ingest.sources import expand

    def walk_row(row: dict) -> None:
        if refused is not None:
            refused[os.path.abspath(str(row["input_path"]))] = row

    out = {}
    for f in expand(list(inputs), walk_row):
        try:
            st = os.stat(f)
        except OSError:
            continue  # gone meanwhile: ingest reports it if it is read
        out[os.path.abspath(f)] = (f, st.st_size, st.st_mtime_ns)
    return out


def recorded(now: dict[str, tuple[str, int, int]]) -> dict[str, list[int]]:
    """The marker's form of `fingerprints`: {absolute path: [size, mtime_ns]}."""
    return {k: [v[1], v[2]] for k, v in sorted(now.items())}


def compare(marker: dict, now: dict[str, tuple[str, int, int]],
            refused: dict[str, dict] | None = None) -> Increment:
    """A file read before and refused now (replaced by a link leaving the folder, a FIFO) is not "gone": its row
    says what it is (`walk_rows`)."""
    old = {k: v for k, v in (marker.get("files") or {}).items() if k not in (refused or {})}
    inc = Increment(files=len(now))
    inc.new_files = sorted(now[k][0] for k in now if k not in old)
    inc.changed_files = sorted(now[k][0] for k in now if k in old and list(old[k]) != [now[k][1], now[k][2]])
    inc.removed_files = sorted(k for k in old if k not in now)
    return inc


def walk_rows(marker: dict, refused: dict[str, dict]) -> list[dict]:
    """The walk's rows (`fingerprints`' `refused`) a rerun writes: those of paths the staging did not record as
    refused for the same reason, so a rerun gives the rows a fresh ingest gives, each once. A marker of an older
    version records none: then the files it read that are refused now."""
    old = marker.get("refused")
    if old is None:
        read = marker.get("files") or {}
        return [row for k, row in sorted(refused.items()) if k in read]
    return [row for k, row in sorted(refused.items()) if old.get(k) != row["reason"]]


def recorded_refused(refused: dict[str, dict]) -> dict[str, str]:
    """The marker's form of `fingerprints`' `refused`: {absolute path: reason}."""
    return {k: str(row["reason"]) for k, row in sorted(refused.items())}


def drop_unlisted(staging: Path, marker: dict) -> None:
    """Remove generation parts the marker does not list: a generation that did not finish (never planned)."""
    listed = set(marker.get("parts") or {})
    for d in ("traces", "errors"):
        for f in (staging / d).glob(f"{GENERATION}*.parquet"):
            if f"{d}/{f.name}" not in listed:
                log.warning("%s: part of an increment that did not finish; staged again", f)
                f.unlink()


def generation_of(name: str) -> int:
    """0 for the first staging's parts, N for `part-gNNNN-*`."""
    return int(name[len(GENERATION):].split("-", 1)[0]) if name.startswith(GENERATION) else 0


def _staged_ids(staging: Path) -> set[str]:
    ids: set[str] = set()
    for f in sorted((staging / "traces").glob("part-*.parquet")):
        ids.update(pq.read_table(f, columns=["trace_id"]).column("trace_id").to_pylist())
    return ids


def _staged_digests(files: list[Path]) -> set[str]:
    """Content digests (run_ids) of the runs in staged trace parts, one row group at a time."""
    out: set[str] = set()
    for f in files:
        require_regular(f)
        pf = pq.ParquetFile(f)
        cols = [c for c in ("source", "system", "question", "steps", "metadata", "run_status")
                if c in pf.schema_arrow.names]  # run_status: absent from parts staged before it existed
        for g in range(pf.num_row_groups):
            for row in pf.read_row_group(g, columns=cols).to_pylist():
                out.add(run_ids.content_digest(Trace.from_row({"trace_id": "", **row})))
    return out


def _legacy_digests(staging: Path, marker: dict) -> set[str]:
    """Digests of the runs in the parts staged under an older id scheme: read once, then kept beside them
    (`_staging/_legacy_digests.parquet`, naming the parts it covers; those parts never change)."""
    parts = run_ids.legacy_parts(marker)
    if not parts:
        return set()
    kept = staging / LEGACY_DIGESTS
    if kept.exists():
        require_regular(kept)
        table = pq.read_table(kept)
        if json.loads((table.schema.metadata or {}).get(b"parts", b"null")) == parts:
            return set(table.column("digest").to_pylist())
    out = _staged_digests([staging / p for p in parts])
    partial = kept.with_name(kept.name + ".partial")
    pq.write_table(pa.table({"digest": sorted(out)}).replace_schema_metadata({"parts": json.dumps(parts)}), partial)
    os.replace(partial, kept)
    return out


def stage_increment(staging: Path, marker: dict, now: dict[str, tuple[str, int, int]], inc: Increment, fmt: str,
                    traces_per_shard: int, limits: IngestConfig | None, staged_rows, refresh: bool = False,
                    walk: tuple[list[dict], dict[str, dict]] = ([], {})) -> None:
    """Stage the new and changed files of `inc` as the next generation and rewrite the marker (`staged_rows`:
    plan's part census, which the marker holds). `refresh` (--refresh, refresh.py): a changed file's
    trace staged before whose content changed is staged again (`inc.refreshed_ids`)."""
    from masprism_batch import ingest

    files = inc.new_files + inc.changed_files
    gen = 1 + max([generation_of(p.split("/", 1)[1]) for p in marker.get("parts") or {}] or [0])
    prefix = f"{GENERATION}{gen:04d}"
    partial = staging.parent / "_staging.increment"
    if partial.exists():
        shutil.rmtree(partial)
    seen = _staged_ids(staging)
    # parts staged under an older id scheme hold their runs under other ids: told apart by content (run_ids)
    legacy = _legacy_digests(staging, marker)
    traces = DatasetWriter(partial / "traces", schema.TRACES, rows_per_part=traces_per_shard, prefix=prefix)
    errors = DatasetWriter(partial / "errors", schema.ERRORS, rows_per_part=4096, prefix=prefix)
    set_aside: list[dict] = []

    def file_done(path: str, *_sizes: int) -> None:  # succeeded_run rows of the file just read get its path
        for row in set_aside:
            errors.write({**row, "input_path": path})
        set_aside.clear()

    for row in walk[0]:  # what the walk refuses now and did not before (walk_rows): the rows a fresh ingest gives
        errors.write(row)
    read = ingest.read_inputs(files, fmt=fmt, on_error=errors.write, on_file=file_done, limits=limits)
    if limits is None or not limits.all_runs:
        read = attributable(read, set_aside.append)
    inc.refresh, old = refresh, _refreshable(staging, inc, refresh)
    for t in read:
        if t.trace_id in old and t.trace_id not in inc.refreshed_ids and refresh_digest(t) != old[t.trace_id]:
            inc.refreshed_ids.append(t.trace_id)  # its content changed: staged again, re-attributed
            traces.write(t.to_row())
            continue
        if t.trace_id in seen or (legacy and run_ids.content_digest(t) in legacy):
            inc.already_staged += 1
            continue
        seen.add(t.trace_id)
        traces.write(t.to_row())
        inc.new_traces += 1
    traces.close()
    errors.close()
    for d in ("traces", "errors"):
        for f in sorted((partial / d).glob("*.parquet")):
            os.replace(f, staging / d / f.name)
    shutil.rmtree(partial)
    gens = list(marker.get("generations") or []) + [{"generation": gen, **inc.as_dict()}]
    write_json_atomic({**marker, "traces": int(marker.get("traces", 0)) + inc.new_traces,
                       "errors": int(marker.get("errors", 0)) + errors.rows_written, "parts": staged_rows(staging),
                       "files": recorded(now), "refused": recorded_refused(walk[1]), "generations": gens, **run_ids.marker_fields(marker)},
                      staging / "_COMPLETE.json")
    log.info("increment %d: %d new trace(s) from %d new and %d changed file(s); %d already staged, skipped", gen,
             inc.new_traces, len(inc.new_files), len(inc.changed_files), inc.already_staged)


def _refreshable(staging: Path, inc: Increment, refresh: bool) -> dict[str, str]:
    """{trace id: staged digest} a refresh compares with (empty without --refresh or a changed file)."""
    if not refresh or not inc.changed_files:
        return {}
    from masprism_batch.pipelines.refresh import staged_digests

    return staged_digests(sorted((staging / "traces").glob("part-*.parquet")))


def refresh_digest(trace) -> str:
    from masprism_batch.pipelines.refresh import digest

    return digest(trace)


def summary_line(inc: dict | None) -> str | None:
    """One line for the terminal: how many traces and files were new since the OUTDIR's last run."""
    if not inc:
        return None
    parts = [f"{inc['new_traces']:,} new trace(s) from {inc['files']:,} input file(s)"]
    if inc["new_files_count"]:
        parts.append(f"{inc['new_files_count']:,} new file(s)")
    if inc["changed_files_count"]:
        shown = inc["changed_files"][:3]
        parts.append(f"{inc['changed_files_count']:,} changed since the last run, read again ({', '.join(shown)}"
                     f"{', ...' if inc['changed_files_count'] > len(shown) else ''})")
    if inc.get("refreshed_ids_count"):
        parts.append(f"{inc['refreshed_ids_count']:,} trace(s) of changed files re-attributed (--refresh; "
                     f"their old verdicts in OUT/history/)")
    if inc["already_staged"]:
        parts.append(f"{inc['already_staged']:,} trace(s) already attributed, skipped"
                     + ("" if inc.get("refresh") or not inc["changed_files_count"] else
                        " (--refresh re-attributes those of changed files whose content changed)"))
    if inc["removed_files_count"]:
        parts.append(f"{inc['removed_files_count']:,} file(s) gone since (their verdicts kept)")
    if inc.get("not_added"):
        parts.append(inc["not_added"])
    return "inputs: " + "; ".join(parts)

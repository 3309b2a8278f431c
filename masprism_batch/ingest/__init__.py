"""Ingest: raw trace files (Who&When, TRAIL/OpenInference, OTLP GenAI, AG2/AutoGen, OpenAI messages and
Responses items, LangSmith/LangGraph run trees, Langfuse traces, canonical JSONL/Parquet; one module each,
chosen by `detect.py`) -> canonical `Trace` objects (`read_inputs`) -> the Parquet datasets OUTDIR/traces and OUTDIR/errors (`ingest`).

Flow for each input file: sources.expand (walk dirs) -> detect.read_file (format, adapter) ->
validate.validate (schema types) -> de-duplication by trace id -> caller. Every rejected file or record and
every repaired one becomes a `schema.ERRORS` row handed to `on_error`; nothing raises out of the stream
for bad input. Memory: one file (one trace for single-trace formats, one line / row batch otherwise) plus
the writer's buffer, which is flushed by size.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import resource
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from masprism_batch.config import IngestConfig
from masprism_batch.ingest.common import WARNING_REASONS, Context, IngestError, short, trace_bytes
from masprism_batch.ingest.detect import FORMATS, read_file
from masprism_batch.ingest.mapping import Mapping
from masprism_batch.ingest.sources import LIMITS, expand, file_size, path_ids
from masprism_batch.ingest.validate import validate
from masprism_batch.schema import error_row
from masprism_batch.trace import Trace

log = logging.getLogger(__name__)

__all__ = ["FORMATS", "IngestSummary", "WARNING_REASONS", "ingest", "read_inputs"]

TRACE_PART_BYTES = 16 * 1024**2  # flush a traces part once this much step text is buffered
FileCallback = Callable[[str, int, int], None]  # (path, bytes on disk, decompressed bytes)


class SeenIds:
    """The one duplicate trace-id check of a run's input (`read_inputs`, and `pipelines/plan.py` over Parquet read
    in place): the first occurrence of an id wins, every later one is a `duplicate_trace_id`. Ids are kept as
    16-byte digests, so hostile 1 kB ids cost no more than short ones."""

    def __init__(self):
        self._seen: set[bytes] = set()

    def repeated(self, trace_id: str) -> bool:
        """True when `trace_id` was seen before; else it is recorded as seen."""
        key = hashlib.blake2b(trace_id.encode("utf-8"), digest_size=16).digest()
        if key in self._seen:
            return True
        self._seen.add(key)
        return False


def read_inputs(paths: list[str] | str, fmt: str = "auto", on_error: Callable[[dict], None] | None = None,
                *, on_file: FileCallback | None = None, limits: IngestConfig | None = None,
                mapping: Mapping | None = None) -> Iterator[Trace]:
    """Stream validated canonical traces from files, directories (recursive), .gz and Parquet datasets.
    `mapping` (`ingest --map`): every document is read by that declarative mapping instead of a known format.

    Bad input never raises: each rejected file/record (and each repaired trace) is passed to `on_error`
    as a `schema.ERRORS` row. A trace id seen before is rejected (`duplicate_trace_id`); the first wins.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {FORMATS}")
    if mapping is not None:
        fmt = "map"
    if isinstance(paths, (str, Path)):
        paths = [str(paths)]
    sink = on_error or (lambda row: None)
    seen = SeenIds()
    limits = limits or IngestConfig()  # caps (config section `ingest`): sources.py and common.apply_caps
    files = list(expand([str(p) for p in paths], sink))
    ids = path_ids(files)  # ids taken from paths (Who&When) are unique over the whole input, not per folder
    for path in files:
        token = LIMITS.set(limits)
        ctx = Context(path, sink)
        ctx.path_id = ids[path]
        ctx.forced = fmt != "auto"
        ctx.mapping = mapping
        try:
            for trace in read_file(path, fmt, ctx):
                try:
                    trace = validate(trace, ctx, limits)
                except IngestError as e:
                    if ctx.where and e.record_id != ctx.where:  # the line of a JSON-lines record, to find it
                        e.message = f"{ctx.where}: {e.message}"
                    ctx.reject(e)
                    continue
                except Exception as e:  # a validation bug costs this record, not the rest of the file
                    log.exception("%s: unexpected error validating %s", path, short(trace.trace_id))
                    ctx.reject(IngestError("internal_error", f"{type(e).__name__}: {short(str(e), 500)}",
                                           short(trace.trace_id, 200)))
                    continue
                if seen.repeated(trace.trace_id):
                    ctx.reject(IngestError("duplicate_trace_id", "trace id already ingested from an earlier "
                                           "input; this copy was not ingested", trace.trace_id))
                    continue
                yield trace
        except IngestError as e:
            msg = ctx.label(e)
            log.warning("%s: rejected: %s (%s)", path, msg, e.reason)
            sink(error_row(input_path=path, record_id=e.record_id, stage="ingest", reason=e.reason, message=msg))
        except Exception as e:  # a bug in an adapter must not end the run; the file is reported
            log.exception("%s: unexpected error", path)
            sink(error_row(input_path=path, stage="ingest", reason="internal_error",
                           message=f"{type(e).__name__}: {short(str(e), 500)}"))
        finally:
            with contextlib.suppress(ValueError):
                LIMITS.reset(token)
        if on_file is not None:
            on_file(path, file_size(path), ctx.nbytes)


@dataclass
class IngestSummary:
    files: int = 0
    bytes_disk: int = 0
    bytes_raw: int = 0  # decompressed input bytes (the "raw JSON" of the throughput figure)
    traces: int = 0
    by_source: Counter = field(default_factory=Counter)
    rejected: Counter = field(default_factory=Counter)  # reason -> rows where input was NOT ingested
    warnings: Counter = field(default_factory=Counter)  # reason -> rows where the trace was kept, repaired
    seconds: float = 0.0
    peak_rss_mb: float = 0.0

    @property
    def error_rows(self) -> int:
        return sum(self.rejected.values()) + sum(self.warnings.values())

    @property
    def rejected_rows(self) -> int:  # inputs NOT ingested (exit code 3); warnings are kept traces
        return sum(self.rejected.values())

    @property
    def warning_rows(self) -> int:
        return sum(self.warnings.values())

    @property
    def mb_per_s(self) -> float:
        return self.bytes_raw / 1e6 / self.seconds if self.seconds else 0.0

    @property
    def traces_per_s(self) -> float:
        return self.traces / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"files": self.files, "bytes_disk": self.bytes_disk, "bytes_raw": self.bytes_raw,
                "traces": self.traces, "by_source": dict(self.by_source), "rejected": dict(self.rejected),
                "warnings": dict(self.warnings), "seconds": round(self.seconds, 3),
                "mb_per_s": round(self.mb_per_s, 2), "traces_per_s": round(self.traces_per_s, 2),
                "peak_rss_mb": round(self.peak_rss_mb, 1)}


def prepare_outdir(outdir: Path, overwrite: bool) -> None:
    """Refuse to mix runs: existing parts are an error unless `overwrite`, which removes only our parts. An
    OUTDIR that holds a `run`/`attribute` (its manifest or staging) is refused either way: overwriting its
    traces/ and errors/ would make its committed attributions unreachable and the run unable to resume."""
    held = [n for n in ("_manifest", "_staging", "_staging.partial", "attributions") if (outdir / n).exists()]
    if held:
        raise FileExistsError(f"{outdir} holds a run of `run`/`attribute` ({outdir / held[0]}); `ingest` never "
                              f"writes into one, --overwrite or not: use a new OUTDIR")
    for sub in ("traces", "errors"):
        d = outdir / sub
        parts = [p for p in d.glob("*.parquet")] + list(d.glob(".tmp-*")) if d.is_dir() else []
        if parts and not overwrite:
            raise FileExistsError(f"{d} already holds {len(parts)} Parquet parts; use --overwrite or a new OUTDIR")
        for p in parts:
            p.unlink()


INGEST_MARKER = "_INGEST.json"  # {"complete": false} while ingest writes, {"complete": true, ...} last


def ingest_state(directory: str | Path) -> dict[str, Any] | None:
    """The ingest marker of an ingest OUTDIR (or of its `traces/` folder's parent), None when there is none
    (not an ingest output, or one written before markers existed)."""
    d = Path(directory)
    for cand in (d / INGEST_MARKER, d.parent / INGEST_MARKER):
        if cand.is_file():
            try:
                return json.loads(cand.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return {"complete": False}
    return None


def ingest(paths: list[str] | str, outdir: str | Path, fmt: str = "auto", *, overwrite: bool = False,
           progress: bool = True, limits: IngestConfig | None = None, mapping: Mapping | None = None) -> IngestSummary:
    """Write OUTDIR/traces and OUTDIR/errors (Parquet datasets in `schema.TRACES` / `schema.ERRORS`), holding
    the OUTDIR lock; OUTDIR/_INGEST.json says `complete: true` only once everything is written (last)."""
    from masprism_batch.outdir.parts import OutdirLock

    with OutdirLock(outdir, "ingest"):
        return _ingest(paths, Path(outdir), fmt, overwrite, progress, limits, mapping)


def _ingest(paths, outdir: Path, fmt: str, overwrite: bool, progress: bool, limits, mapping=None) -> IngestSummary:
    from tqdm import tqdm

    from masprism_batch import schema
    from masprism_batch.outdir.parts import DatasetWriter, write_json_atomic

    prepare_outdir(outdir, overwrite)
    write_json_atomic({"complete": False, "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
                      outdir / INGEST_MARKER)
    paths = [str(paths)] if isinstance(paths, (str, Path)) else [str(p) for p in paths]
    s = IngestSummary()
    t0 = time.perf_counter()
    with DatasetWriter(outdir / "traces", schema.TRACES, rows_per_part=1024) as w_tr, \
            DatasetWriter(outdir / "errors", schema.ERRORS, rows_per_part=4096) as w_er:
        def on_error(row: dict) -> None:
            (s.warnings if row["reason"] in WARNING_REASONS else s.rejected)[row["reason"]] += 1
            w_er.write(row)

        files = list(expand(paths, on_error))
        bar = tqdm(total=sum(file_size(f) for f in files), unit="B", unit_scale=True, unit_divisor=1024,
                   desc="ingest", disable=not progress, dynamic_ncols=True)

        def on_file(path: str, disk: int, raw: int) -> None:
            s.files += 1
            s.bytes_disk += disk
            s.bytes_raw += raw
            bar.update(disk)
            raw_rate = s.bytes_raw / 1e6 / max(time.perf_counter() - t0, 1e-9)
            bar.set_postfix_str(f"{s.files} files, {raw_rate:.0f} MB/s raw JSON, {s.traces} traces, "
                                f"{s.error_rows} errors", refresh=False)

        buffered = 0
        for trace in read_inputs(files, fmt, on_error, on_file=on_file, limits=limits, mapping=mapping):
            w_tr.write(trace.to_row())
            s.traces += 1
            s.by_source[trace.source] += 1
            buffered += trace_bytes(trace)
            if buffered >= TRACE_PART_BYTES:
                w_tr.flush()
                buffered = 0
        bar.close()
    s.seconds = time.perf_counter() - t0
    s.peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    write_json_atomic({"complete": True, **s.as_dict()}, outdir / INGEST_MARKER)  # the completion point
    log.info("ingest: %d traces from %d files (%.1f MB raw) in %.2f s = %.1f MB/s, %.1f traces/s; %d error rows",
             s.traces, s.files, s.bytes_raw / 1e6, s.seconds, s.mb_per_s, s.traces_per_s, s.error_rows)
    return s

"""The stream of validated canonical traces from input paths: the one reader every command uses.

Flow for each input file: sources.expand (walk dirs) -> detect.read_file (format, adapter) ->
validate.validate (schema types) -> run_ids.run_id (a file-named id becomes the run's) -> de-duplication by
trace id -> caller. Every rejected file or record and every repaired one becomes a `schema.ERRORS` row handed
to `on_error`; nothing raises out of the stream for bad input. Memory: one file (one trace for single-trace
formats, one line / row batch otherwise).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

from masprism_batch.config import IngestConfig
from masprism_batch.ingest.common import Context, IngestError, short
from masprism_batch.ingest.detect import read_file
from masprism_batch.ingest.documents import FORMATS
from masprism_batch.ingest.limits import LIMITS
from masprism_batch.ingest.mapping import Mapping
from masprism_batch.ingest.run_ids import run_id
from masprism_batch.ingest.sources import expand, file_size, path_ids
from masprism_batch.ingest.validate import validate
from masprism_batch.schema import error_row
from masprism_batch.trace import Trace

log = logging.getLogger(__name__)

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


class _Held:
    """A file's rows, held until its next trace is named (run_ids): a warning about a kept trace (a truncated step,
    an empty one) names the id the trace is stored under, not the reader's file-named one. Bounded: past
    `MAX_HELD` rows are passed on as they are (a file of rejected lines between two traces)."""

    MAX_HELD = 1024

    def __init__(self, sink: Callable[[dict], None]):
        self.sink = sink
        self.rows: list[dict] = []

    def __call__(self, row: dict) -> None:
        self.rows.append(row)
        if len(self.rows) > self.MAX_HELD:
            self.flush()

    def flush(self, old: str | None = None, new: str | None = None) -> None:
        for row in self.rows:
            self.sink({**row, "record_id": new} if old is not None and row.get("record_id") == old else row)
        self.rows.clear()


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
    limits = limits or IngestConfig()  # caps (config section `ingest`): sources.py and caps.apply_caps
    files = list(expand([str(p) for p in paths], sink))
    ids = path_ids(files)  # ids taken from paths (Who&When) are unique over the whole input, not per folder
    for path in files:
        token = LIMITS.set(limits)
        held = _Held(sink)
        ctx = Context(path, held)
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
                named = run_id(trace, ctx.fmt, ctx.input_path)  # the run's id, not its file's (run_ids)
                held.flush(trace.trace_id, named)
                trace.trace_id = named
                if seen.repeated(trace.trace_id):
                    ctx.reject(IngestError("duplicate_trace_id", "trace id already ingested from an earlier "
                                           "input; this copy was not ingested", trace.trace_id))
                    continue
                yield trace
        except IngestError as e:
            held.flush()
            msg = ctx.label(e)
            log.warning("%s: rejected: %s (%s)", path, msg, e.reason)
            sink(error_row(input_path=path, record_id=e.record_id, stage="ingest", reason=e.reason, message=msg))
        except Exception as e:  # a bug in an adapter must not end the run; the file is reported
            log.exception("%s: unexpected error", path)
            held.flush()
            sink(error_row(input_path=path, stage="ingest", reason="internal_error",
                           message=f"{type(e).__name__}: {short(str(e), 500)}"))
        finally:
            held.flush()
            with contextlib.suppress(ValueError):
                LIMITS.reset(token)
        if on_file is not None:
            on_file(path, file_size(path), ctx.nbytes)

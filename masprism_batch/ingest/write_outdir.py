"""The `ingest` command's OUTDIR: OUTDIR/traces and OUTDIR/errors (Parquet), the `_INGEST.json` marker and
the run's summary. Memory: the trace stream's (`trace_stream.py`) plus the writer's buffer, flushed by size.
"""

from __future__ import annotations

import json
import logging
import resource
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from masprism_batch.config import IngestConfig
from masprism_batch.ingest.caps import trace_bytes
from masprism_batch.ingest.common import WARNING_REASONS
from masprism_batch.ingest.mapping import Mapping
from masprism_batch.ingest.sources import expand, file_size
from masprism_batch.ingest.trace_stream import read_inputs

log = logging.getLogger(__name__)

TRACE_PART_BYTES = 16 * 1024**2  # flush a traces part once this much step text is buffered


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

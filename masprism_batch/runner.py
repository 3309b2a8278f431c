"""In-process attribution of a stream of traces (the `attribute`, `eval` and `demo` commands).

ingest (streaming) -> chunks of traces -> stages.attribute_traces -> Parquet datasets under OUTDIR:
traces/, attributions/, step_scores/, errors/. Memory is bounded by one chunk of traces.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from . import schema
from .config import PipelineConfig
from .io import DatasetWriter
from .stages import attribute_traces
from .trace import Trace

log = logging.getLogger(__name__)


@dataclass
class RunSummary:
    traces_in: int = 0
    attributed: int = 0
    rejected: Counter = field(default_factory=Counter)
    tokens: int = 0
    seconds: float = 0.0
    seconds_pass1: float = 0.0
    seconds_pass2: float = 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


def _chunks(it: Iterable[Trace], n: int) -> Iterator[list[Trace]]:
    buf: list[Trace] = []
    for t in it:
        buf.append(t)
        if len(buf) >= n:
            yield buf
            buf = []
    if buf:
        yield buf


def attribute_stream(traces: Iterable[Trace], outdir: Path, cfg: PipelineConfig, model,
                     ingest_errors: list[dict] | None = None, total: int | None = None,
                     chunk_size: int = 4, progress: bool = True) -> RunSummary:
    """Attribute every trace of `traces`, writing all four datasets. `ingest_errors` is a list the ingest
    callback appends to; it is drained into errors/ as the stream advances so nothing is lost."""
    outdir = Path(outdir)
    summary = RunSummary()
    w_tr = DatasetWriter(outdir / "traces", schema.TRACES, rows_per_part=cfg.batch.traces_per_shard)
    w_at = DatasetWriter(outdir / "attributions", schema.ATTRIBUTIONS, rows_per_part=cfg.batch.traces_per_shard)
    w_ss = DatasetWriter(outdir / "step_scores", schema.STEP_SCORES, rows_per_part=50_000)
    w_er = DatasetWriter(outdir / "errors", schema.ERRORS, rows_per_part=1024)
    t_start = time.perf_counter()
    bar = tqdm(total=total, unit="trace", disable=not progress, desc="attribute")
    try:
        for chunk in _chunks(traces, chunk_size):
            summary.traces_in += len(chunk)
            out = attribute_traces(chunk, model, cfg)
            w_tr.write_many(t.to_row() for t in chunk)
            w_at.write_many(out.attributions)
            w_ss.write_many(out.step_scores)
            w_er.write_many(out.errors)
            summary.attributed += len(out.attributions)
            summary.rejected.update(e["reason"] for e in out.errors)
            for a in out.attributions:
                summary.tokens += a["tokens_pass1"] + a["tokens_pass2"]
                summary.seconds_pass1 += a["seconds_pass1"]
                summary.seconds_pass2 += a["seconds_pass2"]
            if ingest_errors:
                summary.rejected.update(e["reason"] for e in ingest_errors)
                w_er.write_many(ingest_errors)
                ingest_errors.clear()
            elapsed = time.perf_counter() - t_start
            bar.update(len(chunk))
            bar.set_postfix(tok_s=f"{summary.tokens / max(elapsed, 1e-9):,.0f}", rejected=sum(summary.rejected.values()))
        if ingest_errors:
            summary.rejected.update(e["reason"] for e in ingest_errors)
            w_er.write_many(ingest_errors)
            ingest_errors.clear()
    finally:
        bar.close()
        for w in (w_tr, w_at, w_ss, w_er):
            w.close()
    summary.seconds = time.perf_counter() - t_start
    return summary

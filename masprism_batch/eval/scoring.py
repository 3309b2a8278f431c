"""Which scoring a labelled trace gets (Who&When or TRAIL, by source, else by its labels) and the scoring of
attribution rows against a set of traces, every trace and row counted (`evaluate`)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from typing import Any

from masprism_batch.eval.predictions import index_rows
from masprism_batch.eval.trail_metrics import score_trail
from masprism_batch.eval.who_and_when_metrics import score_who_and_when
from masprism_batch.trace import Trace

log = logging.getLogger(__name__)


def dataset_of(trace: Trace) -> str | None:
    """Which scoring applies: by source, else by the kind of label the trace carries."""
    src = trace.source or ""
    if src.startswith("who-and-when"):
        return "who-and-when"
    if src.startswith("trail"):
        return "trail"
    lab = trace.labels
    if lab is not None and lab.mistake_step is not None:
        return "who-and-when"
    if lab is not None and lab.error_locations:
        return "trail"
    return None


def evaluate(rows: Iterable[dict[str, Any]], traces: Iterable[Trace], on_missing: str = "miss",
             ks: tuple[int, ...] = (1, 5)) -> dict[str, Any]:
    by_id = index_rows(rows)
    groups: dict[str, list[Trace]] = {"who-and-when": [], "trail": []}
    unscored: Counter = Counter()
    seen: set[str] = set()
    for t in traces:
        if t.trace_id in seen:
            raise ValueError(f"trace {t.trace_id!r} given twice")
        seen.add(t.trace_id)
        ds = dataset_of(t)
        if ds is None:
            unscored[t.source or "unknown"] += 1
        else:
            groups[ds].append(t)
    orphan = sum(1 for tid in by_id if tid not in seen)
    if orphan:
        log.warning("%d attribution rows have no matching trace among the inputs; not scored", orphan)
    out = []
    if groups["who-and-when"]:
        out.append(score_who_and_when(by_id, groups["who-and-when"], on_missing))
    if groups["trail"]:
        out.append(score_trail(by_id, groups["trail"], ks, on_missing))
    return {"datasets": out, "unscored": {"sources_without_scoring": dict(unscored), "rows_without_trace": orphan}}

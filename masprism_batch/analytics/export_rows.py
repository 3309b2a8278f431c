"""The attributions rows every export reads, their ranked candidates and their ids as backends expect them:
one reading of the verdict for the Phoenix, OTel and JSON-lines exports (`export.py`, `export_otel.py`).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from masprism_batch.analytics import ids, load

log = logging.getLogger(__name__)

ANNOTATION_NAME = "masprism_failure_attribution"
# the verdict's failure kind travels as its own annotation on the blamed span: label = the kind
CATEGORY_ANNOTATION = "masprism_failure_kind"
COLUMNS = ["trace_id", "source", "system", "n_steps", "pred_step", "pred_agent", "pred_span_id", "candidates",
         "symptoms", "method", "model_id", "config_hash", "attributed_at", "pred_step_agent", "pred_agent_rule",
         "agent_ranking", "verdict_by", "confidence", "category", "category_family", "category_confidence",
         "category_by", "read_steps", "set_size", "set_share", "set_coverage", "set_by", "localised"]


# what str.splitlines() (and other readers) end a line at that JSON keeps raw inside a string: as JSON escapes, a
# name or id holding one can never split its record over two lines (the value read back is the same)
_LINE_ENDS = {"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"}
_LINE_END_CHARS = tuple(_LINE_ENDS)


def _finite(v: Any) -> Any:
    """`v` with every NaN or infinite float as None (JSON has no form for them)."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v


def json_line(obj: Any) -> str:
    """One JSON-lines record (a newline at its end) whatever its strings and numbers hold: standard JSON (a NaN
    or infinite score in an OUTDIR is null: JSON.parse, jq, DuckDB and Langfuse's API refuse NaN)."""
    try:
        s = json.dumps(obj, ensure_ascii=False, default=str, allow_nan=False)
    except ValueError:
        s = json.dumps(_finite(obj), ensure_ascii=False, default=str, allow_nan=False)
    if any(c in s for c in _LINE_END_CHARS):
        s = "".join(_LINE_ENDS.get(c, c) for c in s)
    return s + "\n"


def hex_ids(a: dict, c: dict | None) -> tuple[str, str | None]:
    """(trace id, span id) as backends expect them (ids.py): the trace id always (the log's own in hex, else
    the stable id derived from it, `ids.export_trace_id`), the span id None where the source's is no OTel id; a
    step made of an input message gets the span that carried it (`ids.carrying_span`)."""
    dec = ids.decimal_ids(a["trace_id"])
    return ids.export_trace_id(a["trace_id"]), ids.otel_span_id(ids.carrying_span(c.get("span_id")), dec) if c else None


def say_shared_trace_ids(trace_ids: list[str]) -> None:
    """Warn where logs with different ids export to one backend trace id (`ids.export_trace_id` reads `ABC...`,
    `abc...` and `0xabc...` alike; ingest keeps both logs, their ids differ): their verdicts land on one trace and
    span, where the later annotation of a name replaces the earlier (Phoenix)."""
    by: dict[str, list[str]] = {}
    for t in dict.fromkeys(trace_ids):
        try:
            by.setdefault(ids.export_trace_id(t), []).append(t)
        except Exception:  # noqa: BLE001 - an id that cannot be mapped costs its own verdict, said when it is built
            continue
    shared = [v for v in by.values() if len(v) > 1]
    if shared:
        log.warning("export: %d backend trace id(s) named by more than one log, their verdicts on one trace (first: "
                    "%s); check these logs are not one run twice, or a log naming another's trace", len(shared),
                    ", ".join(f"{t!r:.80}" for t in shared[0][:3]))


def attributions(outdir: Path) -> Iterator[dict[str, Any]]:
    for batch in load.iter_table(Path(outdir), "attributions", COLUMNS):
        yield from batch.to_pylist()


def ranked(a: dict, top_k: int) -> list[tuple[int, dict]]:
    """Rank 1 = the attributions row's pred_step (never re-derived), then the other candidates in order. A row
    whose candidates do not hold its pred_step gives no record (another step must never be the failure source)."""
    cands = a["candidates"] or []
    first = next((c for c in cands if c["step"] == a["pred_step"]), None)
    if a["pred_step"] is None or first is None:
        return []
    rest = [c for c in cands if c["step"] != a["pred_step"] and c.get("score") is not None]
    return list(enumerate([first, *rest][:top_k], start=1))


@contextmanager
def one_verdict(a: dict, skipped: list):
    """An export never dies on one verdict (issue 61: a 5,000-digit span id made every export exit 1 writing
    nothing): the records of a verdict are built inside this block, and one that raises is skipped, said with its
    trace id and appended to `skipped`; the caller writes the verdict's records only after the block, whole."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - whatever an OUTDIR holds costs its own verdict, never the export
        skipped.append(a.get("trace_id"))
        log.warning("export: the verdict of trace %.80r skipped (%s: %.200s); the other records are written",
                    a.get("trace_id"), type(exc).__name__, exc)


def say_skipped(skipped: list, what: str) -> None:
    """One closing line for the verdicts `one_verdict` skipped (each was said above)."""
    if skipped:
        log.warning("%s: %d verdict(s) skipped, their records not written (each named above)", what, len(skipped))


def each_verdict(outdir: Path, build, what: str) -> Iterator[dict[str, Any]]:
    """The records `build(a)` gives for every verdict of `outdir`, each verdict's written whole or skipped
    (`one_verdict`), then the closing line: the loop the record-per-line exports share."""
    skipped: list = []
    for a in attributions(outdir):
        recs: list[dict] = []
        with one_verdict(a, skipped):
            recs = list(build(a))
        yield from recs
    say_skipped(skipped, what)

"""Trace validation: every trace an adapter builds is normalised to exactly what `schema.TRACES` accepts, or
rejected alone (`IngestError`), before it reaches a writer.

Strings with lone surrogates (legal JSON escapes UTF-8 cannot hold) are repaired to U+FFFD wherever they are,
metadata keys and values included, with one `invalid_utf8` warning; then the size caps (`caps.apply_caps`).
For formats whose steps are rendered from source records (`Context.rendered`), a step whose text came out
empty is reported (`empty_step` warning) and a trace whose every step is empty is rejected.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone
from typing import Any

from masprism_batch.config import IngestConfig
from masprism_batch.ingest.caps import apply_caps
from masprism_batch.ingest.common import (
    MAX_EMPTY_STEP_ROWS,
    Context,
    IngestError,
    check_trace_id,
    short,
)
from masprism_batch.ingest.outcomes import grade
from masprism_batch.ingest.status import of_field
from masprism_batch.schema import clean_text
from masprism_batch.trace import Labels, Step, Trace

_INT32 = 2**31 - 1
MAX_METADATA_DEPTH = 100  # nesting levels of a trace's metadata; a real export's facts are a few levels deep
_repairs = threading.local()


def _clean_str(s: str) -> str:
    # Lone surrogates (legal in JSON "\ud800" escapes) cannot be encoded to UTF-8 for Arrow. Each becomes
    # U+FFFD, as documented (`encode(errors="replace")` would give "?", which reads as real text).
    out = clean_text(s, "\ufffd")
    if out is not s:
        _repairs.n = getattr(_repairs, "n", 0) + 1
    return out


def _clean_meta(v: Any, depth: int = 0) -> Any:
    """Metadata with lone surrogates repaired in keys and values (a surrogate there must not cost the whole
    trace); deeper than 64 levels it is left as is and the serialisation check below decides."""
    if isinstance(v, str):
        return _clean_str(v)
    if depth > 64:
        return v
    if isinstance(v, dict):
        return {(_clean_str(k) if isinstance(k, str) else k): _clean_meta(x, depth + 1) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean_meta(x, depth + 1) for x in v]
    return v


def _too_deep(v: Any, limit: int) -> bool:
    """Whether `v` nests containers deeper than `limit` (an explicit stack: no recursion on untrusted depth)."""
    stack = [(v, 1)]
    while stack:
        x, d = stack.pop()
        if isinstance(x, dict):
            x = x.values()
        elif not isinstance(x, (list, tuple)):
            continue
        if d > limit:
            return True
        stack.extend((y, d + 1) for y in x if isinstance(y, (dict, list, tuple)))
    return False


def text_or_none(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, str):
        return _clean_str(v)
    if isinstance(v, (int, float, bool)):
        return str(v)
    raise TypeError(f"expected a string, got {type(v).__name__}")


def _utc(t: Any) -> datetime | None:
    if t is None:
        return None
    if not isinstance(t, datetime):
        raise TypeError(f"start_time must be a datetime, got {type(t).__name__}")
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)


def _str_list(v: Any) -> list[str] | None:
    if v is None:
        return None
    if not isinstance(v, list):
        raise TypeError(f"expected a list of strings, got {type(v).__name__}")
    return [text_or_none(x) or "" for x in v]


def validate(trace: Trace, ctx: Context | None = None, limits: IngestConfig | None = None) -> Trace:
    """Normalise a trace to exactly what `schema.TRACES` accepts, or raise IngestError(invalid_record).

    Adapters build traces from untrusted input; checking here (not in the Parquet writer) means one bad
    trace is rejected alone instead of failing the whole buffered part. Strings with lone surrogates are
    repaired (U+FFFD) and reported to `ctx` as one `invalid_utf8` warning. Then the size caps of `limits`
    (default `IngestConfig()`) and JSON-safe metadata are applied (`apply_caps`).
    """
    tid = check_trace_id(trace.trace_id)
    _repairs.n = 0
    out = _validate(trace, tid)
    if _repairs.n and ctx is not None:
        ctx.warn("invalid_utf8", f"{_repairs.n} strings held lone surrogates; replaced by U+FFFD", tid)
    if ctx is not None and ctx.rendered:
        _check_empty(out, ctx)
    out = apply_caps(out, limits, ctx.warn if ctx is not None else None)
    return grade(out, limits)  # the team's outcomes (--outcomes, --outcome-name): ingest/outcomes.py


def _check_empty(trace: Trace, ctx: Context) -> None:
    """Nothing lost silently: a step whose text came out empty is named in an `empty_step` warning (kept, so
    label indices stay valid); a trace whose every step is empty is rejected, since attribution would
    blame blank text."""
    empty = [s for s in trace.steps if not s.content or s.content.isspace()]
    if not empty:
        return
    if len(empty) == len(trace.steps):
        raise IngestError("empty_trace", f"all {len(empty)} steps have empty content (empty_step): nothing an "
                          f"attribution could read", trace.trace_id)
    for s in empty[:MAX_EMPTY_STEP_ROWS]:
        rec = f", record {s.span_id}" if s.span_id else ""
        ctx.warn("empty_step", f"step {s.index} ({s.kind}, agent {short(s.agent)}{rec}) has empty content although "
                 "its source record was read: nothing in it was text this reader knows", trace.trace_id)
    if len(empty) > MAX_EMPTY_STEP_ROWS:
        ctx.warn("empty_step", f"{len(empty) - MAX_EMPTY_STEP_ROWS} more steps have empty content", trace.trace_id)


def _validate(trace: Trace, tid: str) -> Trace:
    try:
        if not trace.steps:
            raise IngestError("empty_trace", "trace has no steps", tid)
        steps = []
        for i, s in enumerate(trace.steps):
            if not isinstance(s.content, str):
                raise TypeError(f"step {i}: content must be a string, got {type(s.content).__name__}")
            steps.append(Step(index=i, agent=text_or_none(s.agent), content=_clean_str(s.content),
                              role=text_or_none(s.role), kind=text_or_none(s.kind) or "other",
                              span_id=text_or_none(s.span_id), parent_span_id=text_or_none(s.parent_span_id),
                              start_time=_utc(s.start_time),
                              error=_clean_str(s.error[:8192]) if isinstance(s.error, str) and s.error else None))
        labels = trace.labels
        if labels is not None:
            ms = labels.mistake_step
            if ms is not None and (isinstance(ms, bool) or not isinstance(ms, int) or not 0 <= ms <= _INT32):
                raise TypeError(f"mistake_step must be a non-negative int32, got {short(ms)}")
            labels = Labels(mistake_step=ms, mistake_agent=text_or_none(labels.mistake_agent),
                            error_locations=_str_list(labels.error_locations),
                            error_impacts=_str_list(labels.error_impacts),
                            error_categories=_str_list(labels.error_categories))
        meta = trace.metadata if isinstance(trace.metadata, dict) else {"metadata": trace.metadata}
        if _too_deep(meta, MAX_METADATA_DEPTH):  # every later reader (json, Arrow, the report) recurses on it
            raise IngestError("invalid_record", f"metadata nested deeper than {MAX_METADATA_DEPTH} levels", tid)
        try:
            json.dumps(meta, ensure_ascii=False, default=str).encode("utf-8")  # must serialise
        except UnicodeEncodeError:  # lone surrogates: repaired like step text, not a rejection
            meta = _clean_meta(meta)
            json.dumps(meta, ensure_ascii=False, default=str).encode("utf-8")
        return Trace(trace_id=tid, source=text_or_none(trace.source) or "unknown", steps=steps,
                     system=text_or_none(trace.system), question=text_or_none(trace.question), labels=labels,
                     metadata=meta, run_status=of_field(trace.run_status))
    except (TypeError, ValueError, OverflowError) as e:
        raise IngestError("invalid_record", str(e), tid) from None
    except RecursionError:
        raise IngestError("invalid_record", "metadata nested too deeply to serialise", tid) from None



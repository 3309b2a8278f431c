"""The per-trace size caps (config section `ingest`): step text cut with a note saying how much, names cleaned
of control characters and capped, metadata made JSON-safe, and a trace over the caps rejected (`apply_caps`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Callable
from typing import Any

from masprism_batch.config import IngestConfig
from masprism_batch.ingest.common import IngestError
from masprism_batch.trace import Trace

TRUNCATION_NOTE = "\n[... {n} bytes cut at ingest (max_step_bytes) ...]\n"
# Span and parent ids read from a log: real ones are 16-36 characters (OTel hex, UUIDs). A longer one (a 2 MB id, a
# 5,000-digit decimal that every export would have to convert) is stored as its digest, the same for the span and
# the parents naming it, so the tree's links hold and the trace is kept.
MAX_SPAN_ID_CHARS = 256


def _utf8_cut(b: bytes, n: int, tail: bool = False) -> str:
    """At most n bytes of b (its head, or its tail) decoded without splitting a character."""
    part = b[len(b) - n:] if tail else b[:n]
    return part.decode("utf-8", errors="ignore")


def cap_text(s: str, cap: int) -> tuple[str, int]:
    """(text of at most `cap` UTF-8 bytes, bytes removed): 3/4 head, a marker, 1/4 tail (errors often end a
    step: the traceback's last line). Idempotent: a capped text is returned unchanged."""
    if len(s) * 4 <= cap:  # cheap: cannot exceed the cap
        return s, 0
    b = s.encode("utf-8")
    if len(b) <= cap:
        return s, 0
    note_len = len(TRUNCATION_NOTE.format(n=len(b)).encode())
    keep = max(0, cap - note_len)
    head, tail = keep * 3 // 4, keep - keep * 3 // 4
    h, t = _utf8_cut(b, head), _utf8_cut(b, tail, tail=True)
    removed = len(b) - len(h.encode()) - len(t.encode())
    return h + TRUNCATION_NOTE.format(n=removed) + t, removed


def json_safe(v: Any) -> tuple[Any, int]:
    """(value with NaN/Infinity floats replaced by None, how many were replaced): metadata must be standard
    JSON (JavaScript's JSON.parse, DuckDB and jq reject NaN)."""
    if isinstance(v, float):
        return (v, 0) if v == v and v not in (float("inf"), float("-inf")) else (None, 1)
    if isinstance(v, dict):
        out, n = {}, 0
        for k, x in v.items():
            out[k], m = json_safe(x)
            n += m
        return out, n
    if isinstance(v, (list, tuple)):
        items = [json_safe(x) for x in v]
        return [x for x, _ in items], sum(m for _, m in items)
    return v, 0


def apply_caps(trace: Trace, limits: IngestConfig | None = None,
               warn: Callable[..., None] | None = None) -> Trace:
    """The per-trace memory bound (IngestConfig): too many steps or too much text -> IngestError (the trace is
    rejected); a step longer than max_step_bytes is cut (head + marker + tail) with one `step_truncated`
    warning, an agent name longer than max_agent_bytes (and a label naming it) is cut likewise; NaN/Infinity in
    metadata become null with one `non_finite_metadata` warning. Idempotent."""
    lim = limits or _DEFAULT_LIMITS
    tid = trace.trace_id
    if len(trace.steps) > lim.max_steps:
        raise IngestError("too_many_steps", f"{len(trace.steps)} steps (max_steps {lim.max_steps})", tid)
    question, removed = cap_text(trace.question, lim.max_step_bytes) if trace.question else (trace.question, 0)
    cut, total = int(removed > 0), len((question or "").encode("utf-8", errors="replace"))
    steps = list(trace.steps)
    names = 0  # names cut or cleaned
    seen: dict[str | None, str | None] = {}  # a trace repeats few agent names: each is cleaned once
    ids = 0  # span / parent ids stored as their digest
    for i, st in enumerate(steps):
        content, r = cap_text(st.content, lim.max_step_bytes)
        agent = seen.get(st.agent, _MISSING)
        if agent is _MISSING:
            agent = seen[st.agent] = clean_name(st.agent, lim.max_agent_bytes)
        renamed = agent != st.agent  # (equal names may be distinct objects: compared by value)
        long_id = len(st.span_id or "") > MAX_SPAN_ID_CHARS or len(st.parent_span_id or "") > MAX_SPAN_ID_CHARS
        if r or renamed or long_id:
            steps[i] = dataclasses.replace(st, content=content, agent=agent, span_id=cap_id(st.span_id),
                                           parent_span_id=cap_id(st.parent_span_id))
            cut, removed = cut + bool(r), removed + r
            names += renamed
            ids += long_id
        total += len(content) if content.isascii() else len(content.encode("utf-8", errors="replace"))
        if total > lim.max_trace_bytes:
            raise IngestError("trace_too_large", f"more than {lim.max_trace_bytes} bytes of step text after the "
                              f"step cap (max_trace_bytes)", tid)
    meta, bad = json_safe(trace.metadata) if trace.metadata else (trace.metadata, 0)
    labels = trace.labels
    if labels is not None and clean_name(labels.mistake_agent, lim.max_agent_bytes) is not labels.mistake_agent:
        # cut like the step agents, so the label still names the agent it did
        labels = dataclasses.replace(labels, mistake_agent=clean_name(labels.mistake_agent, lim.max_agent_bytes))
    # system and source are copied into every row and shown by `stats`/`report`: capped and cleaned like agents
    system, source = clean_name(trace.system, lim.max_agent_bytes), clean_name(trace.source, lim.max_agent_bytes)
    names += (system != trace.system) + (source != trace.source)
    if not cut and not bad and not names and not ids and labels is trace.labels:
        return trace
    if ids and warn is not None:
        warn("step_truncated", f"{ids} step(s) with a span or parent id longer than {MAX_SPAN_ID_CHARS} characters: "
             "the id stored as its digest ('id-digest:' and 32 hex digits; the same id always gives the same digest)",
             tid)
    if names and warn is not None:
        warn("step_truncated", f"{names} name(s) from the log (agent names, system, source) cut to max_agent_bytes="
             f"{lim.max_agent_bytes} (head kept, ending in …) or holding control characters (replaced by U+FFFD)",
             tid)
    if cut and warn is not None:
        warn("step_truncated", f"{cut} step(s) (or the question) longer than max_step_bytes={lim.max_step_bytes} cut "
             f"({removed} bytes removed; head and tail kept)", tid)
    if bad and warn is not None:
        warn("non_finite_metadata", f"{bad} NaN/Infinity value(s) in metadata stored as null", tid)
    return dataclasses.replace(trace, steps=steps, question=question, metadata=meta, labels=labels, system=system,
                               source=source or "unknown")


def cap_id(span_id: str | None) -> str | None:
    """A span or parent id as stored: itself up to MAX_SPAN_ID_CHARS, else `id-digest:<blake2b-128 hex>`."""
    if span_id is None or len(span_id) <= MAX_SPAN_ID_CHARS:
        return span_id
    return "id-digest:" + hashlib.blake2b(span_id.encode("utf-8", errors="replace"), digest_size=16).hexdigest()


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")  # C0, DEL, C1, bidi overrides
_MISSING: Any = object()


def clean_name(name: str | None, cap: int) -> str | None:
    """A name from a log (agent, system, source) as stored: control characters (escape sequences, newlines,
    bidi overrides) replaced by U+FFFD, then at most `cap` UTF-8 bytes (`cap_name`). `name` itself when nothing
    changes (callers test identity); idempotent."""
    if name is not None and _CONTROL.search(name):
        name = _CONTROL.sub("\ufffd", name)
    return cap_name(name, cap)


def cap_name(name: str | None, cap: int) -> str | None:
    """`name` itself when it fits in `cap` UTF-8 bytes, else its head and "…" within `cap` (idempotent)."""
    if name is None or len(name) * 4 <= cap or len(name.encode("utf-8", errors="replace")) <= cap:
        return name
    return _utf8_cut(name.encode("utf-8", errors="replace"), cap - 3) + "…"


_DEFAULT_LIMITS = IngestConfig()


def trace_bytes(trace: Trace) -> int:
    """Approximate in-memory text size of a trace (drives when the writer flushes a part)."""
    return sum(len(s.content) for s in trace.steps) + len(trace.question or "") + 256 * len(trace.steps)

"""What every adapter shares: the rejection exception, error rows, safe JSON parsing, trace ids and the size
caps (validation of a whole trace: `validate.py`).

Reason codes are stable strings (documented in docs/schema.md). Two kinds exist:
- rejections: the file or record is not ingested (`IngestError` raised by an adapter);
- warnings (`WARNING_REASONS`): the trace *is* ingested, but something in it was repaired or dropped
  (e.g. its annotation file is invalid, so its labels are null). Both become rows of `schema.ERRORS`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import sys
import threading
from collections.abc import Callable
from typing import Any

from masprism_batch.config import IngestConfig
from masprism_batch.ingest.limits import LIMITS, PARSED_FACTOR, parsed_cost, parsed_over  # noqa: F401 - re-exported
from masprism_batch.schema import error_row
from masprism_batch.trace import Trace

log = logging.getLogger(__name__)

WARNING_REASONS = frozenset({"invalid_annotation", "invalid_utf8", "invalid_label", "annotation_mismatch",
                             "duplicate_span", "step_truncated", "non_finite_metadata", "empty_step",
                             "unreadable_reasoning", "succeeded_run", "skipped_file"})
MAX_EMPTY_STEP_ROWS = 20  # warning rows per trace; the rest are counted in the last row
# reasons whose message is about the file or the caps, not about how the format's fields were read
_UNLABELLED = frozenset({"unknown_format", "invalid_json", "too_deep", "empty_file", "duplicate_trace_id",
                         "too_many_steps", "trace_too_large", "file_too_large", "internal_error", "unreadable_file",
                         "not_a_regular_file", "invalid_gzip", "not_a_trace", "invalid_zip"})
MAX_TRACE_ID_CHARS = 1024  # longer ids are hostile or broken exports; ids are never used in paths anyway
MAX_JSON_DEPTH = 200_000  # nesting levels accepted by the deep-JSON fallback (a 5,000-deep span tree is ~10k)


class IngestError(Exception):
    """A file or record cannot be ingested. `reason` is a stable code, `record_id` the trace id / line."""

    def __init__(self, reason: str, message: str, record_id: str | None = None):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.record_id = record_id


def short(text: Any, n: int = 80) -> str:
    """Printable, bounded rendering of an untrusted value for log lines and messages."""
    r = repr(text)
    return r if len(r) <= n else r[: n - 1] + "…"


class Context:
    """Where an adapter is: the input path as given, and the callback that receives warning rows."""

    def __init__(self, input_path: str, on_error: Callable[[dict[str, Any]], None]):
        self.input_path = input_path
        self.on_error = on_error
        self.nbytes = 0  # decompressed bytes read, for throughput figures
        self.fmt: str | None = None  # the format assumed for this file (detected or forced), named in rejections
        self.forced = False
        # steps are rendered from source records (spans, observations, messages), so an empty one means
        # something was not read: checked by `validate`. Off for verbatim formats (canonical, Who&When),
        # whose empty text is the source's own.
        self.rendered = False
        self.where: str | None = None  # the record being read ("line 12"), named in its validation rejection
        self.rejected = 0  # records of this file rejected so far
        # a trace id taken from the file's path, unique over the whole input (sources.path_ids; set by read_inputs)
        self.path_id: str | None = None
        self.doc_lines: list[int] | None = None  # the JSON line of each record handed to a grouped reader

    def label(self, e: IngestError) -> str:
        """The rejection message, led by the format that was tried, so a user knows what was assumed."""
        if self.fmt is None or e.reason in _UNLABELLED or e.message.startswith(self.fmt):
            return e.message
        return f"{self.fmt} ({'--format' if self.forced else 'detected'}): {e.message}"

    def warn(self, reason: str, message: str, record_id: str | None = None, input_path: str | None = None) -> None:
        """A trace is kept but something was repaired or dropped (`input_path`: a sidecar file, if that)."""
        log.warning("%s: %s (%s)", input_path or self.input_path, message, reason)
        self.on_error(error_row(input_path=input_path or self.input_path, record_id=record_id, stage="ingest",
                                reason=reason, message=message))

    def reject_any(self, e: BaseException, record_id: str | None) -> None:
        """`reject` for any exception raised while one record was read (`as_record_error`)."""
        self.reject(as_record_error(e, record_id))

    def reject(self, e: IngestError) -> None:
        """One record of a multi-record file is rejected; the rest of the file goes on."""
        self.rejected += 1
        msg = self.label(e)
        log.warning("%s: rejected %s: %s (%s)", self.input_path, short(e.record_id), msg, e.reason)
        self.on_error(error_row(input_path=self.input_path, record_id=e.record_id, stage="ingest", reason=e.reason,
                                message=msg))


def request_id(ctx: Context, i: int) -> str:
    """Where record `i` of a grouped file is: its JSON line (`ctx.doc_lines`), else its position."""
    lines = ctx.doc_lines
    return f"line {lines[i]}" if lines is not None and i < len(lines) else f"request {i + 1}"


def as_record_error(e: BaseException, record_id: str | None) -> IngestError:
    """Any failure while one record of a multi-record file is read, as that record's rejection: untrusted values
    reach the standard library (int()'s 4,300-digit limit, float() overflow, recursion on deep values), and one
    record's failure must never end the reading of the records after it."""
    if isinstance(e, IngestError):
        e.record_id = e.record_id or record_id
        return e
    if isinstance(e, RecursionError):
        return IngestError("invalid_record", "a value nested too deeply to read", record_id)
    log.debug("record %s: %s", short(record_id), e, exc_info=e)  # the traceback, for a reader bug
    return IngestError("invalid_record", f"{type(e).__name__}: {short(str(e), 300)}", record_id)


def _loads_deep(text: str) -> Any:
    # The C decoder recurses once per nesting level and stops at the interpreter's recursion limit
    # (1,000). Deep but legitimate documents (5,000-deep span trees) are parsed again on a thread with a
    # large stack and a raised limit, so the limit is a policy (MAX_JSON_DEPTH), not a crash.
    result: dict[str, Any] = {}

    def run() -> None:
        old = sys.getrecursionlimit()
        sys.setrecursionlimit(max(old, MAX_JSON_DEPTH + 1000))
        try:
            result["value"] = json.loads(text)
        except BaseException as e:  # noqa: BLE001 - handed back to the caller's thread
            result["error"] = e
        finally:
            sys.setrecursionlimit(old)

    old_size = threading.stack_size()
    try:
        threading.stack_size(512 * 1024 * 1024)  # virtual reservation; pages are touched only as deep as used
        t = threading.Thread(target=run, name="deep-json")
        t.start()
    except (RuntimeError, ValueError, MemoryError) as e:  # no thread or no such stack here: a clear refusal
        raise RecursionError(f"cannot parse deep JSON here: {e}") from None
    finally:
        threading.stack_size(old_size)
    t.join()
    if "error" in result:
        raise result["error"]
    return result["value"]


def check_parsed(text: str, max_parsed: int, record_id: str | None = None) -> None:
    """IngestError when parsing `text` would build more than `max_parsed` bytes (`limits.parsed_cost`)."""
    cost = parsed_over(text, max_parsed)
    if cost is not None:
        what = "record_too_large" if record_id else "file_too_large"
        raise IngestError(what, f"parsing these {len(text)} characters would build about {cost} bytes of objects, "
                          f"more than {max_parsed} ({PARSED_FACTOR} x max_{'record' if record_id else 'file'}_bytes): "
                          "not parsed", record_id)


def loads(text: str, record_id: str | None = None, max_parsed: int | None = None) -> Any:
    """json.loads that turns every failure into IngestError(invalid_json | too_deep), refusing text whose parse
    would build more than `max_parsed` bytes (default: PARSED_FACTOR x max_file_bytes)."""
    check_parsed(text, PARSED_FACTOR * LIMITS.get().max_file_bytes if max_parsed is None else max_parsed, record_id)
    try:
        return json.loads(text)
    except RecursionError:
        try:
            return _loads_deep(text)
        except RecursionError:
            raise IngestError("too_deep", f"JSON nested deeper than {MAX_JSON_DEPTH} levels", record_id) from None
        except ValueError as e:
            raise IngestError("invalid_json", f"invalid JSON: {e}", record_id) from None
    except ValueError as e:
        raise IngestError("invalid_json", f"invalid JSON: {e}", record_id) from None


def decode_utf8(data: bytes, ctx: Context) -> str:
    """Strict UTF-8 (BOM stripped); invalid bytes become U+FFFD with one warning row for the file."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        ctx.warn("invalid_utf8", f"invalid UTF-8 at byte {e.start}; bad bytes replaced by U+FFFD")
        return data.decode("utf-8", errors="replace")


def check_trace_id(tid: Any, record_id: str | None = None) -> str:
    if not isinstance(tid, str) or not tid:
        raise IngestError("invalid_trace_id", f"trace id must be a non-empty string, got {short(tid)}", record_id)
    if len(tid) > MAX_TRACE_ID_CHARS:
        raise IngestError("invalid_trace_id", f"trace id of {len(tid)} characters (max {MAX_TRACE_ID_CHARS})",
                          tid[:200])
    if any(ord(c) < 32 or ord(c) == 127 or 0xD800 <= ord(c) <= 0xDFFF for c in tid):
        raise IngestError("invalid_trace_id", f"trace id contains control characters or lone surrogates: "
                          f"{short(tid)}", short(tid, 200)[1:-1])
    return tid


TRUNCATION_NOTE = "\n[... {n} bytes cut at ingest (max_step_bytes) ...]\n"


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
    for i, st in enumerate(steps):
        content, r = cap_text(st.content, lim.max_step_bytes)
        agent = seen.get(st.agent, _MISSING)
        if agent is _MISSING:
            agent = seen[st.agent] = clean_name(st.agent, lim.max_agent_bytes)
        renamed = agent != st.agent  # (equal names may be distinct objects: compared by value)
        if r or renamed:
            steps[i] = dataclasses.replace(st, content=content, agent=agent)
            cut, removed = cut + bool(r), removed + r
            names += renamed
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
    if not cut and not bad and not names and labels is trace.labels:
        return trace
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

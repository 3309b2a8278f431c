"""What every adapter shares: the rejection exception, error rows, safe JSON parsing and trace ids (the size
caps: `caps.py`; validation of a whole trace: `validate.py`).

Reason codes are stable strings (documented in docs/schema.md). Two kinds exist:
- rejections: the file or record is not ingested (`IngestError` raised by an adapter);
- warnings (`WARNING_REASONS`): the trace *is* ingested, but something in it was repaired or dropped
  (e.g. its annotation file is invalid, so its labels are null). Both become rows of `schema.ERRORS`.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Callable
from typing import Any

from masprism_batch.ingest.limits import LIMITS, PARSED_FACTOR, parsed_cost, parsed_over  # noqa: F401 - re-exported
from masprism_batch.schema import error_row

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

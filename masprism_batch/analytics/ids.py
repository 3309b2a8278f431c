"""Trace and span ids in the form tracing backends expect: 32 (trace) or 16 (span) lower-case hex digits.

Sources carry ids in several forms, and a backend matches an annotation to its span only by the exact hex
text (OpenTelemetry's `format_trace_id` / `format_span_id`, Phoenix, Jaeger, Tempo):

- hex, any case, optionally `0x`-prefixed, possibly without its leading zeros (Jaeger drops them);
- decimal text of the integer (OTel SDK span dumps: `json.dumps` of `SpanContext.trace_id`), e.g.
  `115825058289444712299650141807529952578`;
- base64 of the big-endian bytes (OTLP protobuf JSON as written by some exporters);
- a UUID (Langfuse, LangSmith trace ids): its 128 bits.

A log whose id is none of these (a chat log's `ww/HC-32`) gets a derived trace id in every export
(`export_trace_id`), so each record has one.

`otel_trace_id` / `otel_span_id` return the hex form, or None where the text is no id of that width (a chat
log's `chat-3`, an all-zero id, which OTel defines as invalid). Exports keep the source's text beside it.
"""

from __future__ import annotations

import base64
import binascii
import re

_HEX = re.compile(r"^[0-9a-f]+$")
_DEC = re.compile(r"^[0-9]+$")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_B64 = re.compile(r"^[A-Za-z0-9+/_-]+={0,2}$")
_MAX_TEXT = 64  # the longest form of a 128-bit id: 39 decimal digits, 36 of a UUID, 34 of 0x-hex, 24 of base64


def _normalise(raw: object, digits: int, decimal_hint: bool) -> str | None:
    if raw is None or isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        value = raw
    else:
        text = str(raw).strip()
        low = text.lower()
        low = low[2:] if low.startswith("0x") else low
        value = None
        if _UUID.match(low):
            low = low.replace("-", "")  # Langfuse / LangSmith UUIDs: the same 128 bits their OTel exports carry
        if len(low) > _MAX_TEXT:  # no id of any form is this long: never parsed (int() of 5,000 digits raises)
            return None
        if _DEC.match(low) and (len(low) > digits or (decimal_hint and len(low) != digits)):
            if len(low) > len(str(1 << (4 * digits))):
                return None  # more decimal digits than an id of this width can have
            value = int(low)  # more digits than hex of this width can have: decimal text of the integer
        elif _HEX.match(low) and len(low) <= digits:
            value = int(low, 16)
        elif _B64.match(text):
            value = _from_base64(text, digits // 2)
        if value is None:
            return None
    if not 0 < value < 1 << (4 * digits):
        return None  # all-zero ids are invalid in OTel; a larger integer is no id of this width
    return f"{value:0{digits}x}"


def _from_base64(text: str, nbytes: int) -> int | None:
    padded = text + "=" * (-len(text) % 4)
    try:
        raw = base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        return None
    return int.from_bytes(raw, "big") if len(raw) == nbytes else None


def otel_trace_id(raw: object) -> str | None:
    """32 lower-case hex digits, or None when `raw` is no 128-bit id."""
    return _normalise(raw, 32, False)


def decimal_ids(trace_id: object) -> bool:
    """Whether a trace's ids are decimal text: its trace id has more digits than 32 hex digits can hold. Its
    span ids are then decimal too, also the rare one short enough to read as hex (the one case the span id's
    text alone cannot decide)."""
    text = str(trace_id or "").strip()
    return bool(_DEC.match(text)) and len(text) > 32


def otel_span_id(raw: object, decimal: bool = False) -> str | None:
    """16 lower-case hex digits, or None when `raw` is no 64-bit id; `decimal`: the trace's ids are decimal
    text (`decimal_ids`)."""
    return _normalise(raw, 16, decimal)


def carrying_span(span_id: object) -> str | None:
    """The span a step belongs to in its backend: a step made of a span's input message has the id
    `<span>#input<j>` (ingest/context.py), which no backend knows; the span that carried it is `<span>`."""
    if span_id is None:
        return None
    text = str(span_id).split("#", 1)[0].strip()
    return text or None


def export_trace_id(trace_id: object) -> str:
    """The trace id every export writes for a log (32 lower-case hex digits, never empty): the log's own id in
    hex where it is an OTel-width id (`otel_trace_id`), else one derived from it, stable across runs and
    machines: the first 16 bytes of SHA-256 of the id's UTF-8 text, in hex (`ww/HC-32` ->
    `sha256(b"ww/HC-32").hexdigest()[:32]`), the derivation of Langfuse's `create_trace_id(seed=...)`. A team
    maps its own ids the same way (docs/reporting.md)."""
    import hashlib

    own = otel_trace_id(trace_id)
    if own:
        return own
    return hashlib.sha256(str(trace_id).encode("utf-8", "surrogatepass")).hexdigest()[:32]

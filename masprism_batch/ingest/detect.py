"""One input file -> canonical traces: pick the format (by name, then by content) and call its adapter.

`auto` decides per file: `.parquet` -> Parquet; `.jsonl`/`.ndjson` -> JSON lines (canonical traces, or OTLP
export requests when the first line has `resourceSpans`); anything else is parsed as one JSON document and
classified by its keys: `history` -> Who&When, `spans` (or a list of spans) -> TRAIL/OpenInference,
`resourceSpans` -> OTLP, `trace_id` + `steps` -> one canonical trace. A document followed by more
documents ("Extra data") is read as JSON lines.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..trace import Trace
from . import canonical, openinference, otel_genai, who_and_when
from .common import Context, IngestError, decode_utf8, loads
from .sources import iter_lines, read_bytes

FORMATS = ("auto", "who-and-when", "trail", "otel", "jsonl", "parquet")
_LINE_SUFFIXES = (".jsonl", ".ndjson", ".jsonl.gz", ".ndjson.gz")


def classify(doc: Any) -> str | None:
    if isinstance(doc, dict):
        if "history" in doc:
            return "who-and-when"
        if "resourceSpans" in doc:
            return "otel"
        if "spans" in doc:
            return "trail"
        if "trace_id" in doc and "steps" in doc:
            return "jsonl"
        if isinstance(doc.get("errors"), list) and ("scores" in doc or "trace_id" in doc):
            return "trail-annotation"
    elif isinstance(doc, list) and doc and isinstance(doc[0], dict) and "span_id" in doc[0]:
        return "trail"
    return None


def _lines(path: str, ctx: Context) -> Iterator[tuple[int, str]]:
    for n, raw in iter_lines(path):
        ctx.nbytes += len(raw)
        yield n, decode_utf8(raw, ctx)


def _from_lines(lines: Iterator[tuple[int, str]], fmt: str, ctx: Context) -> Iterator[Trace]:
    first = None
    for n, text in lines:
        if text.strip():
            first = (n, text)
            break
    if first is None:
        raise IngestError("empty_file", "no JSON lines in file")
    head = None
    if fmt != "jsonl":
        try:
            head = loads(first[1], f"line {first[0]}")
        except IngestError:
            head = None  # a bad first line is rejected alone by the canonical reader below
    if fmt == "otel" or (fmt == "auto" and isinstance(head, dict) and "resourceSpans" in head):
        docs = [head] if head is not None else []
        for n, t in lines:  # spans of one trace may be spread over lines: group the whole file first
            if t.strip():
                try:
                    docs.append(loads(t, f"line {n}"))
                except IngestError as e:
                    ctx.reject(e)
        yield from otel_genai.parse(docs, ctx)
        return

    def again() -> Iterator[tuple[int, str]]:
        yield first
        yield from lines

    yield from canonical.parse_jsonl(again(), ctx, loads)


def read_file(path: str, fmt: str, ctx: Context) -> Iterator[Trace]:
    """Traces of one file. File-level problems raise IngestError; record-level ones go to ctx.reject."""
    low = path.lower()
    if fmt == "parquet" or (fmt == "auto" and low.endswith(".parquet")):
        yield from canonical.parse_parquet(path, ctx)
        return
    if fmt in ("jsonl", "auto") and low.endswith(_LINE_SUFFIXES) or (fmt == "otel" and low.endswith(_LINE_SUFFIXES)):
        yield from _from_lines(_lines(path, ctx), fmt, ctx)
        return
    data = read_bytes(path)
    ctx.nbytes += len(data)
    text = decode_utf8(data, ctx)
    del data
    if not text.strip():
        raise IngestError("empty_file", "file is empty")
    try:
        doc = loads(text)
    except IngestError as e:
        if e.reason == "invalid_json" and "Extra data" in e.message and fmt in ("auto", "jsonl", "otel"):
            yield from _from_lines(((i, t) for i, t in enumerate(text.splitlines(), 1)), fmt, ctx)
            return
        raise
    del text
    kind = classify(doc) if fmt == "auto" else fmt
    if kind == "who-and-when":
        yield from who_and_when.parse(doc, ctx)
    elif kind == "trail":
        yield from openinference.parse(doc, ctx)
    elif kind == "otel":
        yield from otel_genai.parse([doc], ctx)
    elif kind == "jsonl":
        yield canonical.from_obj(doc, None)
    elif kind == "trail-annotation":
        raise IngestError("not_a_trace", "a TRAIL annotation (labels only): it is read with its trace when the "
                          "dataset folder (with traces/ beside annotations/) is the input")
    else:
        keys = sorted(doc)[:8] if isinstance(doc, dict) else type(doc).__name__
        raise IngestError("unknown_format", f"cannot tell the format of this JSON (top level: {keys}); "
                          f"use --format")

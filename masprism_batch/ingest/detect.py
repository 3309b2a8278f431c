"""One input file -> canonical traces: pick the format (by name, then by content) and call its adapter.

`auto` decides per file: `.parquet` -> Parquet; a zip (`.zip`, Inspect `.eval`) -> its members; `.jsonl` /
`.ndjson` -> JSON lines, each line in its own format; anything else is one JSON document classified by its keys
(`classify`; docs/formats.md has the table). Text is UTF-8, or UTF-16/32 by its BOM (`containers.py`). A document
followed by more ("Extra data") is read as JSON lines, or as concatenated pretty-printed OTel SDK spans. Grouped
formats (OTLP, SDK spans, LangSmith, Langfuse, Claude Code) read a whole JSON-lines file. `ctx.fmt` is the format
assumed, so every rejection names it; `unknown_format` lists the near misses (`near_miss.py`). `--map`: every
document is read by the user's declarative mapping (`mapping.py`). A document's reader by kind: `documents.py`;
JSON lines: `json_lines.py`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from masprism_batch.ingest import (
    canonical,
    containers,
    crewai_log,
    inspect_ai,
    otel_sdk,
)
from masprism_batch.ingest.classify import classify
from masprism_batch.ingest.common import (
    Context,
    IngestError,
    loads,
)
from masprism_batch.ingest.documents import LABELS, parse_doc
from masprism_batch.ingest.file_bytes import open_stream, read_bytes
from masprism_batch.ingest.json_lines import decoded_lines, from_lines
from masprism_batch.trace import Trace

_LINE_SUFFIXES = (".jsonl", ".ndjson", ".jsonl.gz", ".ndjson.gz")


def _one_per_line(text: str) -> bool:
    first = text.lstrip().split("\n", 1)[0].strip()
    return first.startswith("{") and first.endswith("}")


def _concatenated(text: str) -> list | None:
    """JSON documents written one after another (not one per line); None when that is not what this is."""
    dec, i, out = json.JSONDecoder(), 0, []
    n = len(text)
    try:
        while True:
            while i < n and text[i].isspace():
                i += 1
            if i >= n:
                return out
            doc, i = dec.raw_decode(text, i)
            out.append(doc)
    except (ValueError, RecursionError):
        return None


_DOC_SUFFIXES = (".json", ".traj", ".af", ".zip", ".eval")  # JSON documents and zips: never a CrewAI text log


def _crewai_head(path: str) -> bool:
    """Whether the file (gzip decompressed) opens as a CrewAI text log; 256 bytes are read."""
    with open_stream(path, lambda: 0) as f:
        head = f.read(256)
    return crewai_log.is_text_log(head.decode("utf-8", errors="ignore"))


def read_file(path: str, fmt: str, ctx: Context) -> Iterator[Trace]:
    """Traces of one file. File-level problems raise IngestError; record-level ones go to ctx.reject."""
    low = path.lower()
    if fmt == "parquet" or (fmt == "auto" and low.endswith(".parquet")):
        yield from canonical.parse_parquet(path, ctx)
        return
    by_line = fmt not in ("who-and-when", "trail", "parquet")
    if by_line and low.endswith(_LINE_SUFFIXES):
        yield from from_lines(decoded_lines(path, ctx), fmt, ctx)
        return
    maybe_text_log = fmt == "crewai" or fmt == "auto" and not low.removesuffix(".gz").endswith(_DOC_SUFFIXES)
    if maybe_text_log and _crewai_head(path):
        ctx.fmt, ctx.rendered = LABELS["crewai"], True  # CrewAI's text log: streamed, never read whole
        yield from crewai_log.parse_lines(decoded_lines(path, ctx), ctx)
        return
    data = read_bytes(path)
    ctx.nbytes += len(data)
    if containers.is_zip(data):
        yield from _zip(path, data, fmt, ctx)
        return
    held = [containers.decode_text(data, ctx)]
    del data  # the bytes, then the text (popped by the reader), are freed as soon as they are parsed
    yield from _read_text(held, low, fmt, ctx)


def _zip(path: str, data: bytes, fmt: str, ctx: Context) -> Iterator[Trace]:
    """A zip container: an Inspect AI `.eval` log as one, else each data member as the file it would be alone.
    Members are read one at a time; a member that cannot be read or parsed is one row, the others go on."""
    arc = containers.ZipArchive(data)
    del data
    if fmt in ("auto", "inspect") and inspect_ai.is_eval_zip(arc.names):
        ctx.fmt, ctx.rendered = LABELS["inspect"], True
        yield from inspect_ai.parse_zip(arc, ctx)
        return
    if not arc.names:
        raise IngestError("unknown_format", "a zip archive without .json / .jsonl / .traj members")
    outer = ctx.input_path
    try:
        for name, body in arc.members():
            ctx.input_path = f"{outer}/{name}"  # rows name the member; ids built from file names use its stem
            try:
                if isinstance(body, IngestError):
                    raise body
                held, body = [containers.decode_text(body, ctx)], None  # one member's text at a time
                yield from _read_text(held, name.lower(), fmt, ctx)
            except Exception as e:  # noqa: BLE001 - one member's failure is that member's row
                ctx.reject_any(e, name)
    finally:
        ctx.input_path = outer


def _read_text(held: list[str], low: str, fmt: str, ctx: Context) -> Iterator[Trace]:
    text = held.pop()  # the caller keeps no reference, so the text is freed once parsed (big files)
    by_line = fmt not in ("who-and-when", "trail", "parquet")
    if by_line and low.endswith(_LINE_SUFFIXES):
        yield from from_lines(enumerate(text.splitlines(), 1), fmt, ctx)
        return
    if not text.strip():
        raise IngestError("empty_file", "file is empty")
    if fmt in ("auto", "crewai") and crewai_log.is_text_log(text):  # CrewAI's text output_log_file: not JSON
        ctx.fmt, ctx.rendered = LABELS["crewai"], True
        yield from crewai_log.parse_text(text, ctx)
        return
    try:
        doc = loads(text)
    except IngestError as e:
        if e.reason == "invalid_json" and "Extra data" in e.message and by_line:
            # pretty-printed spans one after another: what OTel's ConsoleSpanExporter writes
            docs = None if _one_per_line(text) or fmt not in ("auto", "otel-sdk") else _concatenated(text)
            if docs and otel_sdk.is_sdk_span(docs[0]):
                ctx.fmt, ctx.rendered = LABELS["otel-sdk"], True
                yield from otel_sdk.parse_sdk(docs, ctx)
                return
            yield from from_lines(((i, t) for i, t in enumerate(text.splitlines(), 1)), fmt, ctx)
            return
        raise
    del text
    yield from parse_doc(doc, classify(doc) if fmt == "auto" else fmt, ctx)

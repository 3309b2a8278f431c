"""One input file -> canonical traces: pick the format (by name, then by content) and call its adapter.

`auto` decides per file: `.parquet` -> Parquet; `.jsonl`/`.ndjson` -> JSON lines; anything else is parsed as
one JSON document and classified by its keys (`classify`; docs/formats.md has the table): Who&When, TRAIL,
OTLP / Tempo, OTel SDK span dumps, Jaeger, canonical, AG2/AutoGen, OpenAI messages, Responses items and
Chat Completions responses, LangGraph message state, LangSmith runs and batch payloads, Langfuse exports,
SWE-agent `.traj`, OpenHands events, τ-bench results. A document followed by more documents ("Extra data")
is read as JSON lines, or as concatenated pretty-printed OTel SDK spans. JSON lines are classified by their
first record: grouped formats (OTLP, LangSmith, Langfuse) read the whole file, message formats (AG2,
OpenAI, τ-bench) make one trace per line, anything else is canonical. `ctx.fmt` is set to the format
assumed, so every rejection names it; `unknown_format` lists the near misses (`near_miss.py`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from ..trace import Trace
from . import (
    ag2,
    canonical,
    langfuse,
    langsmith,
    openai_chat,
    openhands,
    openinference,
    otel_genai,
    otel_sdk,
    swe_agent,
    taubench,
    who_and_when,
)
from .classify import classify
from .common import Context, IngestError, decode_utf8, loads
from .near_miss import near_misses
from .sources import iter_lines, read_bytes

FORMATS = ("auto", "who-and-when", "trail", "otel", "tempo", "otel-sdk", "jaeger", "ag2", "autogen", "openai",
           "langsmith", "langgraph", "langfuse", "swe-agent", "openhands", "tau-bench", "jsonl", "parquet")
ALIASES = {"autogen": "ag2", "langgraph": "langsmith", "tempo": "otel"}
# what each kind is called in messages (a rejection names the format it assumed)
LABELS = {"who-and-when": "Who&When", "trail": "TRAIL/OpenInference", "otel": "OTLP JSON", "otel-sdk":
          "OTel SDK span dump", "jaeger": "Jaeger JSON", "ag2": "AG2/AutoGen", "openai": "OpenAI messages",
          "langgraph-messages": "LangGraph message state",
          "langsmith": "LangSmith/LangGraph", "langfuse": "Langfuse", "swe-agent": "SWE-agent trajectory",
          "openhands": "OpenHands events", "tau-bench": "τ-bench", "jsonl": "canonical JSON lines",
          "trail-annotation": "TRAIL annotation", "parquet": "canonical Parquet"}
TRIED = ", ".join(v for k, v in LABELS.items() if k not in ("trail-annotation", "parquet"))
CANONICAL_EXAMPLE = ('{"trace_id": "t1", "source": "my-app", "steps": [{"agent": "planner", "role": "assistant", '
                     '"content": "..."}]}')
_LINE_SUFFIXES = (".jsonl", ".ndjson", ".jsonl.gz", ".ndjson.gz")
_GROUPED = ("otel", "otel-sdk", "langsmith", "langfuse")  # JSON lines whose records are grouped into traces per file
_PER_LINE = ("ag2", "openai", "langgraph-messages", "tau-bench")  # JSON lines with one trace per line
_VERBATIM = ("jsonl", "parquet", "who-and-when")  # step text copied as given: no empty-step check


def unknown_format(doc: Any) -> IngestError:
    keys = sorted(doc)[:8] if isinstance(doc, dict) else type(doc).__name__
    near = near_misses(doc)
    hint = f" Near misses: {'; '.join(near)}." if near else ""
    return IngestError("unknown_format", f"cannot tell the format of this JSON (top level: {keys}); tried {TRIED}."
                       f"{hint} Force one with --format (see `masprism-batch ingest --help`), or convert to "
                       f"canonical JSON lines (docs/schema.md), one trace per line: {CANONICAL_EXAMPLE}")


def parse_doc(doc: Any, kind: str | None, ctx: Context, line: int | None = None) -> Iterator[Trace]:
    """One parsed JSON document of a known kind (None: not recognised)."""
    kind = ALIASES.get(kind, kind)
    if kind is not None:
        ctx.fmt, ctx.rendered = LABELS.get(kind, kind), kind not in _VERBATIM
    if kind == "langsmith" and isinstance(doc, dict) and isinstance(doc.get("messages"), list) and not (
            langsmith.is_run(doc) or "runs" in doc):
        kind = "langgraph-messages"  # --format langgraph on a graph's message state, not a run tree
        ctx.fmt = LABELS[kind]
    if kind == "who-and-when":
        yield from who_and_when.parse(doc, ctx)
    elif kind == "trail":
        yield from openinference.parse(doc, ctx)
    elif kind == "otel":
        yield from otel_genai.parse([doc], ctx)
    elif kind == "otel-sdk":
        yield from otel_sdk.parse_sdk(doc, ctx)
    elif kind == "jaeger":
        yield from otel_sdk.parse_jaeger(doc, ctx)
    elif kind == "ag2":
        yield from ag2.parse(doc, ctx, line)
    elif kind in ("openai", "langgraph-messages"):
        yield from openai_chat.parse(doc, ctx, line)
    elif kind == "langsmith":
        yield from langsmith.parse(doc, ctx)
    elif kind == "langfuse":
        yield from langfuse.parse(doc, ctx)
    elif kind == "swe-agent":
        yield from swe_agent.parse(doc, ctx)
    elif kind == "openhands":
        yield from openhands.parse(doc, ctx)
    elif kind == "tau-bench":
        yield from taubench.parse(doc, ctx, line)
    elif kind == "jsonl":
        yield canonical.from_obj(doc, None)
    elif kind == "trail-annotation":
        raise IngestError("not_a_trace", "a TRAIL annotation (labels only): it is read with its trace when the "
                          "dataset folder (with traces/ beside annotations/) is the input")
    else:
        raise unknown_format(doc)


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
            head = None  # a bad first line is rejected alone by the reader below
    kind = ALIASES.get(fmt, fmt) if fmt != "auto" else (classify(head) if head is not None else None) or "jsonl"
    ctx.fmt, ctx.rendered = LABELS.get(kind, kind), kind not in _VERBATIM
    if fmt == "auto" and kind == "jsonl" and isinstance(head, dict) and head and not (
            "trace_id" in head or "steps" in head):
        raise unknown_format(head)  # the first record is an object of no known format, not canonical: name them

    def again() -> Iterator[tuple[int, str]]:
        yield first
        yield from lines

    if kind in _GROUPED:
        docs = []
        for n, t in again():  # records of one trace may be spread over lines: group the whole file first
            if t.strip():
                try:
                    docs.append(loads(t, f"line {n}"))
                except IngestError as e:
                    ctx.reject(e)
        if kind == "otel":
            yield from otel_genai.parse(docs, ctx)
        elif kind == "otel-sdk":
            yield from otel_sdk.parse_sdk(docs, ctx)
        elif kind == "langsmith":
            yield from langsmith.parse_lines(docs, ctx)
        else:
            yield from langfuse.parse_docs(docs, ctx)
        return
    if kind in _PER_LINE:
        for n, t in again():
            if not t.strip():
                continue
            try:
                yield from parse_doc(loads(t, f"line {n}"), kind, ctx, line=n)
            except IngestError as e:
                e.record_id = e.record_id or f"line {n}"
                ctx.reject(e)
        return
    yield from canonical.parse_jsonl(again(), ctx, loads)


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


def read_file(path: str, fmt: str, ctx: Context) -> Iterator[Trace]:
    """Traces of one file. File-level problems raise IngestError; record-level ones go to ctx.reject."""
    low = path.lower()
    if fmt == "parquet" or (fmt == "auto" and low.endswith(".parquet")):
        yield from canonical.parse_parquet(path, ctx)
        return
    by_line = fmt not in ("who-and-when", "trail", "parquet")
    if by_line and low.endswith(_LINE_SUFFIXES):
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
        if e.reason == "invalid_json" and "Extra data" in e.message and by_line:
            # pretty-printed spans one after another: what OTel's ConsoleSpanExporter writes
            docs = None if _one_per_line(text) or fmt not in ("auto", "otel-sdk") else _concatenated(text)
            if docs and otel_sdk.is_sdk_span(docs[0]):
                ctx.fmt, ctx.rendered = LABELS["otel-sdk"], True
                yield from otel_sdk.parse_sdk(docs, ctx)
                return
            yield from _from_lines(((i, t) for i, t in enumerate(text.splitlines(), 1)), fmt, ctx)
            return
        raise
    del text
    yield from parse_doc(doc, classify(doc) if fmt == "auto" else fmt, ctx)

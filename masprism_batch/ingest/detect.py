"""One input file -> canonical traces: pick the format (by name, then by content) and call its adapter.

`auto` decides per file: `.parquet` -> Parquet; `.jsonl`/`.ndjson` -> JSON lines (canonical traces, or OTLP
export requests when the first line has `resourceSpans`); anything else is parsed as one JSON document and
classified by its keys: `history` -> Who&When, `spans` (or a list of spans) -> TRAIL/OpenInference,
`resourceSpans` -> OTLP, `trace_id` + `steps` -> one canonical trace, and the chat / run-tree formats
(`classify`): AG2/AutoGen message lists, OpenAI messages or Responses items, LangSmith runs, Langfuse traces
and observations. A document followed by more documents ("Extra data") is read as JSON lines; JSON lines
are classified by their first record: grouped formats (OTLP, LangSmith, Langfuse) read the whole file,
message formats (AG2, OpenAI) make one trace per line, anything else is canonical.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..trace import Trace
from . import ag2, canonical, langfuse, langsmith, openai_chat, openinference, otel_genai, who_and_when
from .common import Context, IngestError, decode_utf8, loads
from .sources import iter_lines, read_bytes

FORMATS = ("auto", "who-and-when", "trail", "otel", "ag2", "autogen", "openai", "langsmith", "langgraph",
           "langfuse", "jsonl", "parquet")
ALIASES = {"autogen": "ag2", "langgraph": "langsmith"}
TRIED = "Who&When, TRAIL/OpenInference, OTLP, AG2/AutoGen, OpenAI, LangSmith/LangGraph, Langfuse, canonical"
CANONICAL_EXAMPLE = ('{"trace_id": "t1", "source": "my-app", "steps": [{"agent": "planner", "role": "assistant", '
                     '"content": "..."}]}')
_LINE_SUFFIXES = (".jsonl", ".ndjson", ".jsonl.gz", ".ndjson.gz")
_GROUPED = ("otel", "langsmith", "langfuse")  # JSON lines whose records are grouped into traces per file
# Who&When's own fields: a `history` without any of them is an AG2 chat, not a Who&When log
_WW_KEYS = ("question", "question_ID", "mistake_agent", "mistake_step", "mistake_reason", "ground_truth",
            "is_correct", "system_prompt", "level")


def _chat_list_kind(msgs: list) -> str | None:
    dicts = [m for m in msgs[:64] if isinstance(m, dict)]
    if not dicts:
        return None
    if any(ag2.is_autogen_message(m) for m in dicts):
        return "ag2"
    if any(openai_chat.is_response_item(m) for m in dicts):
        return "openai"
    if all("role" in m and ("content" in m or "tool_calls" in m) for m in dicts):
        # AG2 names the speaker of every message; OpenAI messages name one rarely
        named = [m for m in dicts if m.get("role") not in ("tool", "function")]
        return "ag2" if named and all(isinstance(m.get("name"), str) for m in named) else "openai"
    return None


def classify(doc: Any) -> str | None:
    if isinstance(doc, dict):
        if "history" in doc:
            if any(k in doc for k in _WW_KEYS) or not isinstance(doc["history"], list):
                return "who-and-when"
            return _chat_list_kind(doc["history"]) and "ag2" or "who-and-when"
        if "resourceSpans" in doc:
            return "otel"
        if "spans" in doc:
            return "trail"
        if "trace_id" in doc and "steps" in doc:
            return "jsonl"
        if isinstance(doc.get("errors"), list) and ("scores" in doc or "trace_id" in doc):
            return "trail-annotation"
        if "chat_history" in doc:
            return "ag2"
        if langfuse.is_trace(doc) or langfuse.is_observation(doc):
            return "langfuse"
        if langsmith.is_run(doc) or (isinstance(doc.get("runs"), list) and doc["runs"]
                                     and langsmith.is_run(doc["runs"][0])):
            return "langsmith"
        if isinstance(doc.get("data"), list) and doc["data"] and (
                langfuse.is_trace(doc["data"][0]) or langfuse.is_observation(doc["data"][0])):
            return "langfuse"
        if isinstance(doc.get("messages"), list):
            return "ag2" if any(ag2.is_autogen_message(m) for m in doc["messages"][:64]) else "openai"
        if doc.get("object") == "response" or isinstance(doc.get("input"), list) and (
                _chat_list_kind(doc["input"]) == "openai"):
            return "openai"
    elif isinstance(doc, list) and doc and isinstance(doc[0], dict):
        if "span_id" in doc[0]:
            return "trail"
        if langsmith.is_run(doc[0]):
            return "langsmith"
        if langfuse.is_trace(doc[0]) or langfuse.is_observation(doc[0]):
            return "langfuse"
        return _chat_list_kind(doc)
    return None


def unknown_format(doc: Any) -> IngestError:
    keys = sorted(doc)[:8] if isinstance(doc, dict) else type(doc).__name__
    return IngestError("unknown_format", f"cannot tell the format of this JSON (top level: {keys}); tried {TRIED}. "
                       f"Force one with --format (see `masprism-batch ingest --help`), or convert to canonical "
                       f"JSON lines (docs/schema.md), one trace per line: {CANONICAL_EXAMPLE}")


def parse_doc(doc: Any, kind: str | None, ctx: Context, line: int | None = None) -> Iterator[Trace]:
    """One parsed JSON document of a known kind (None: not recognised)."""
    kind = ALIASES.get(kind, kind)
    if kind == "who-and-when":
        yield from who_and_when.parse(doc, ctx)
    elif kind == "trail":
        yield from openinference.parse(doc, ctx)
    elif kind == "otel":
        yield from otel_genai.parse([doc], ctx)
    elif kind == "ag2":
        yield from ag2.parse(doc, ctx, line)
    elif kind == "openai":
        yield from openai_chat.parse(doc, ctx, line)
    elif kind == "langsmith":
        yield from langsmith.parse(doc, ctx)
    elif kind == "langfuse":
        yield from langfuse.parse(doc, ctx)
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
        elif kind == "langsmith":
            yield from langsmith.parse_lines(docs, ctx)
        else:
            yield from langfuse.parse_docs(docs, ctx)
        return
    if kind in ("ag2", "openai"):
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
            yield from _from_lines(((i, t) for i, t in enumerate(text.splitlines(), 1)), fmt, ctx)
            return
        raise
    del text
    yield from parse_doc(doc, classify(doc) if fmt == "auto" else fmt, ctx)

"""A JSON-lines file -> canonical traces: each line read as its own format (auto), the records of a grouped
format (OTLP, SDK spans, LangSmith, Langfuse, Claude Code, smolagents bus) held and read together at the end,
unknown lines before any known one held back so an application log is one `unknown_format` row.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from masprism_batch.ingest import (
    canonical,
    claude_code,
    containers,
    langfuse,
    langsmith,
    otel_genai,
    otel_sdk,
    smolagents_runs,
)
from masprism_batch.ingest.classify import classify
from masprism_batch.ingest.common import (
    LIMITS,
    PARSED_FACTOR,
    Context,
    IngestError,
    decode_utf8,
    loads,
    parsed_cost,
)
from masprism_batch.ingest.documents import ALIASES, LABELS, VERBATIM, parse_doc, unknown_format
from masprism_batch.ingest.file_bytes import iter_lines
from masprism_batch.trace import Trace

_GROUPED = ("otel", "otel-sdk", "langsmith", "langfuse", "claude-code", "smolagents-bus")  # JSON lines whose records are grouped into traces per file
MAX_HELD = 1000  # unknown JSON lines held back before a file of no known format is rejected whole


def decoded_lines(path: str, ctx: Context) -> Iterator[tuple[int, str]]:
    for n, raw in iter_lines(path, ctx.reject):  # an overlong line is rejected alone, the file goes on
        if n == 1 and containers.bom_codec(raw[:4]):  # UTF-16/32: lines are not split at a 0x0A byte
            codec, _ = containers.bom_codec(raw[:4])
            unit, bad = (2 if "16" in codec else 4), containers.bad_units()
            for m, text in containers.iter_text_lines(path, codec, ctx.reject):  # decoded and split as it streams
                ctx.nbytes += unit * len(text)
                yield m, text
            if containers.bad_units() > bad:
                ctx.warn("invalid_utf8", f"{containers.bad_units() - bad} invalid {codec.upper()} unit(s) replaced by U+FFFD")
            return
        ctx.nbytes += len(raw)
        yield n, decode_utf8(raw, ctx)


def _line_kind(doc: Any, kind: str, fmt: str) -> str:
    """The format of one JSON line: its own (auto), so a file mixing formats reads each line as what it is."""
    if fmt != "auto" or kind == "jsonl" and isinstance(doc, dict) and "trace_id" in doc and "steps" in doc:
        return kind  # forced, or canonical among canonical lines (the common case, not classified again)
    k = classify(doc)
    if k in _GROUPED or k is None:  # a grouped record among message lines, or no known format
        if isinstance(doc, dict) and ("steps" in doc or k is None and "trace_id" in doc):
            return "jsonl"  # (a LangSmith run also has a trace_id: it is read as one)
        if k is None:
            raise unknown_format(doc)
    return k


def _group_kind(doc: Any, kind: str, fmt: str) -> str:
    """In a file whose first line is of grouped format `kind`: the format of this line. A record of `kind`, or of
    no known format (its reader rejects it alone), joins the group; another grouped format its own group; a
    canonical trace or a one-trace-per-line format is read as itself."""
    if fmt != "auto":
        return kind
    if isinstance(doc, dict) and "trace_id" in doc and isinstance(doc.get("steps"), list) and "spans" not in doc:
        return "jsonl"
    k = classify(doc)
    return kind if k is None else ALIASES.get(k, k)


def _per_line(doc: Any, k: str, n: int, ctx: Context) -> Iterator[Trace]:
    """The traces of JSON line `n` (parsed: `doc`) read as format `k`; any failure is the line's rejection."""
    if k == "jsonl":  # canonical: its reader, handed the parsed line ("{}" stands for its text)
        ctx.fmt, ctx.rendered = LABELS["jsonl"], False
        yield from canonical.parse_jsonl((((n, "{}"),)), ctx, lambda _t, _r, d=doc: d)
        return
    try:
        yield from parse_doc(doc, k, ctx, line=n)
    except Exception as e:  # noqa: BLE001 - any failure is this line's rejection
        ctx.reject_any(e, f"line {n}")


_GROUP_READERS = {"otel": otel_genai.parse, "otel-sdk": otel_sdk.parse_sdk, "langsmith": langsmith.parse_lines,
                  "claude-code": claude_code.parse_lines, "langfuse": langfuse.parse_docs,
                  "smolagents-bus": smolagents_runs.parse_bus}


def _grouped(lines: Iterator[tuple[int, str]], kind: str, fmt: str, ctx: Context) -> Iterator[Trace]:
    """A JSON-lines file whose first record is of a grouped format: its records of each grouped format are held
    (a trace's records may be spread over the file) and read together at the end, within PARSED_FACTOR x
    max_file_bytes of parsed objects; lines of another format are read as themselves as they come."""
    groups: dict[str, tuple[list, list[int]]] = {kind: ([], [])}
    held, budget = 0, PARSED_FACTOR * LIMITS.get().max_file_bytes
    rec_cap = PARSED_FACTOR * LIMITS.get().max_record_bytes
    for n, t in lines:
        if not t or t.isspace():
            continue
        try:
            doc = loads(t, f"line {n}", rec_cap)
            k = _group_kind(doc, kind, fmt)
        except Exception as e:  # noqa: BLE001 - this line's rejection
            ctx.reject_any(e, f"line {n}")
            continue
        if k not in _GROUPED:
            yield from _per_line(doc, k, n, ctx)
            continue
        held += parsed_cost(t)
        if held > budget:
            raise IngestError("file_too_large", f"the records to group (up to line {n}) would build more than "
                              f"{budget} bytes of objects ({PARSED_FACTOR} x max_file_bytes): the file was not read")
        docs, at = groups.setdefault(k, ([], []))
        docs.append(doc)
        at.append(n)
    for k, (docs, at) in groups.items():
        if not docs:
            continue
        ctx.fmt, ctx.rendered, ctx.doc_lines = LABELS.get(k, k), True, at
        try:
            yield from _GROUP_READERS[k](docs, ctx)
        except IngestError as e:
            if k == kind and len(groups) == 1:
                raise  # the file's one format: a file-level row, as before
            ctx.reject_any(e, f"line {at[0]}")
        finally:
            ctx.doc_lines = None


def from_lines(lines: Iterator[tuple[int, str]], fmt: str, ctx: Context) -> Iterator[Trace]:
    first = None
    for n, text in lines:
        if text.strip():
            first = (n, text)
            break
    if first is None:
        if ctx.rejected:  # its lines were rejected one by one (a row each): not an empty file
            return
        raise IngestError("empty_file", "no JSON lines in file")
    rec_cap = PARSED_FACTOR * LIMITS.get().max_record_bytes
    head = None
    if fmt != "jsonl":
        try:
            head = loads(first[1], f"line {first[0]}", rec_cap)
        except IngestError:
            head = None  # a bad first line is rejected alone by the reader below
    kind = ALIASES.get(fmt, fmt) if fmt != "auto" else (classify(head) if head is not None else None) or "jsonl"
    ctx.fmt, ctx.rendered = LABELS.get(kind, kind), kind not in VERBATIM

    def again() -> Iterator[tuple[int, str]]:
        yield first
        yield from lines

    if kind in _GROUPED:
        yield from _grouped(again(), kind, fmt, ctx)
        return
    if fmt == "jsonl":
        yield from canonical.parse_jsonl(again(), ctx, lambda t, r: loads(t, r, rec_cap))
        return
    # unknown lines before any known one are held back: a file none of whose lines is known (an application
    # log) is one `unknown_format` row, not one per line; after a known line each is rejected alone
    known, held = False, []
    for n, t in again():  # one trace per line, each line in its own format (auto)
        if not t or t.isspace():  # (no strip(): it copies every long line)
            continue
        try:
            doc = loads(t, f"line {n}", rec_cap)
            k = _line_kind(doc, kind, fmt)
        except Exception as e:  # noqa: BLE001 - any failure is this line's rejection
            if not known and isinstance(e, IngestError) and e.reason == "unknown_format":
                held.append((n, e))
                if len(held) >= MAX_HELD:
                    raise held[0][1] from None
            else:
                ctx.reject_any(e, f"line {n}")
            continue
        if not known:
            known = True
            for m, e in held:
                ctx.reject_any(e, f"line {m}")
            held = []
        yield from _per_line(doc, k, n, ctx)
    if held:
        raise held[0][1]

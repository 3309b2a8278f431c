"""One input file -> canonical traces: pick the format (by name, then by content) and call its adapter.

`auto` decides per file: `.parquet` -> Parquet; a zip (`.zip`, Inspect `.eval`) -> its members; `.jsonl` /
`.ndjson` -> JSON lines, each line in its own format; anything else is one JSON document classified by its keys
(`classify`; docs/formats.md has the table). Text is UTF-8, or UTF-16/32 by its BOM (`containers.py`). A document
followed by more ("Extra data") is read as JSON lines, or as concatenated pretty-printed OTel SDK spans. Grouped
formats (OTLP, SDK spans, LangSmith, Langfuse, Claude Code) read a whole JSON-lines file. `ctx.fmt` is the format
assumed, so every rejection names it; `unknown_format` lists the near misses (`near_miss.py`). `--map`: every
document is read by the user's declarative mapping (`mapping.py`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from masprism_batch.ingest import (
    adk_session,
    ag2,
    agent_logs,
    agentops,
    autogen_recorder,
    canonical,
    claude_code,
    containers,
    crewai_log,
    inspect_ai,
    langfuse,
    langsmith,
    letta,
    mapping,
    openai_chat,
    openhands,
    openinference,
    otel_genai,
    otel_sdk,
    smolagents_runs,
    swe_agent,
    taubench,
    who_and_when,
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
from masprism_batch.ingest.near_miss import near_misses
from masprism_batch.ingest.sources import iter_lines, read_bytes
from masprism_batch.trace import Trace

FORMATS = ("auto", "who-and-when", "trail", "otel", "tempo", "otel-sdk", "jaeger", "ag2", "autogen", "openai",
           "langsmith", "langgraph", "langfuse", "swe-agent", "openhands", "tau-bench", "inspect", "smolagents",
           "mini-swe-agent", "claude-code", "agentops", "crewai", "adk", "letta", "jsonl", "parquet")
ALIASES = {"autogen": "ag2", "langgraph": "langsmith", "tempo": "otel"}
# what each kind is called in messages (a rejection names the format it assumed)
LABELS = {"who-and-when": "Who&When", "trail": "TRAIL/OpenInference", "otel": "OTLP JSON", "otel-sdk":
          "OTel SDK span dump", "jaeger": "Jaeger JSON", "ag2": "AG2/AutoGen", "openai": "OpenAI messages",
          "langgraph-messages": "LangGraph message state",
          "langsmith": "LangSmith/LangGraph", "langfuse": "Langfuse", "swe-agent": "SWE-agent trajectory",
          "openhands": "OpenHands events", "tau-bench": "τ-bench", "inspect": "Inspect AI log",
          "smolagents": "smolagents memory", "mini-swe-agent": "mini-swe-agent trajectory",
          "claude-code": "Claude Code transcript", "agentops": "AgentOps trace export", "map": "--map mapping",
          "jsonl": "canonical JSON lines", "smolagents-bus": "smolagents message bus", "crewai": "CrewAI output log",
          "autogen-recorder": "AutoGen recorder session", "adk": "Google ADK session", "letta": "Letta agent file",
          "trail-annotation": "TRAIL annotation", "parquet": "canonical Parquet"}
TRIED = ", ".join(v for k, v in LABELS.items() if k not in ("trail-annotation", "parquet"))
CANONICAL_EXAMPLE = ('{"trace_id": "t1", "source": "my-app", "steps": [{"agent": "planner", "role": "assistant", '
                     '"content": "..."}]}')
_LINE_SUFFIXES = (".jsonl", ".ndjson", ".jsonl.gz", ".ndjson.gz")
_GROUPED = ("otel", "otel-sdk", "langsmith", "langfuse", "claude-code", "smolagents-bus")  # JSON lines whose records are grouped into traces per file
_PER_LINE = ("ag2", "openai", "langgraph-messages", "tau-bench")  # JSON lines with one trace per line
_VERBATIM = ("jsonl", "parquet", "who-and-when")  # step text copied as given: no empty-step check
MAX_HELD = 1000  # unknown JSON lines held back before a file of no known format is rejected whole


def unknown_format(doc: Any) -> IngestError:
    keys = sorted(doc)[:8] if isinstance(doc, dict) else type(doc).__name__
    near = near_misses(doc)
    hint = f" Near misses: {'; '.join(near)}." if near else ""
    return IngestError("unknown_format", f"cannot tell the format of this JSON (top level: {keys}); tried {TRIED}."
                       f"{hint} Force one with --format (see `masprism-batch ingest --help`), or convert to "
                       f"canonical JSON lines (docs/schema.md), one trace per line: {CANONICAL_EXAMPLE}")


_DOC_READERS = {"who-and-when": who_and_when.parse, "trail": openinference.parse, "otel-sdk": otel_sdk.parse_sdk,
                "jaeger": otel_sdk.parse_jaeger, "langsmith": langsmith.parse, "langfuse": langfuse.parse,
                "swe-agent": swe_agent.parse, "openhands": openhands.parse, "inspect": inspect_ai.parse,
                "agentops": agentops.parse, "crewai": crewai_log.parse_entries,
                "autogen-recorder": autogen_recorder.parse, "adk": adk_session.parse, "letta": letta.parse}


def parse_doc(doc: Any, kind: str | None, ctx: Context, line: int | None = None) -> Iterator[Trace]:
    """One parsed JSON document of a known kind (None: not recognised)."""
    kind = ALIASES.get(kind, kind)
    if kind is not None:
        ctx.fmt, ctx.rendered = LABELS.get(kind, kind), kind not in _VERBATIM
    if kind == "langsmith" and isinstance(doc, dict) and isinstance(doc.get("messages"), list) and not (
            langsmith.is_run(doc) or "runs" in doc):
        kind = "langgraph-messages"  # --format langgraph on a graph's message state, not a run tree
        ctx.fmt = LABELS[kind]
    simple = _DOC_READERS.get(kind)
    if simple is not None:
        yield from simple(doc, ctx)
    elif kind == "otel":
        yield from otel_genai.parse([doc], ctx)
    elif kind in ("ag2", "openai", "langgraph-messages", "tau-bench"):
        yield from {"ag2": ag2.parse, "tau-bench": taubench.parse}.get(kind, openai_chat.parse)(doc, ctx, line)
    elif kind in ("smolagents", "mini-swe-agent"):
        yield from agent_logs.parse(doc, ctx, kind, line)
    elif kind == "claude-code":
        yield from claude_code.parse_lines(doc if isinstance(doc, list) else [doc], ctx)
    elif kind == "smolagents-bus":
        yield from smolagents_runs.parse_bus(doc if isinstance(doc, list) else [doc], ctx)
    elif kind == "map":  # ingest --map: the user's declarative mapping (mapping.py)
        yield from mapping.parse(doc, ctx, ctx.mapping, line)
    elif kind == "jsonl":
        yield canonical.from_obj(doc, None)
    elif kind == "trail-annotation":
        raise IngestError("not_a_trace", "a TRAIL annotation (labels only): it is read with its trace when the "
                          "dataset folder (with traces/ beside annotations/) is the input")
    else:
        raise unknown_format(doc)


def _lines(path: str, ctx: Context) -> Iterator[tuple[int, str]]:
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


def _from_lines(lines: Iterator[tuple[int, str]], fmt: str, ctx: Context) -> Iterator[Trace]:
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
    ctx.fmt, ctx.rendered = LABELS.get(kind, kind), kind not in _VERBATIM

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
        yield from _from_lines(enumerate(text.splitlines(), 1), fmt, ctx)
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
            yield from _from_lines(((i, t) for i, t in enumerate(text.splitlines(), 1)), fmt, ctx)
            return
        raise
    del text
    yield from parse_doc(doc, classify(doc) if fmt == "auto" else fmt, ctx)

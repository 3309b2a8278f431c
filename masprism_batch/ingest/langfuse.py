"""Langfuse trace exports (`--format langfuse`): a trace with its observations.

A trace (`GET /api/public/traces/{traceId}`, or the UI's JSON export): `id`, `name`, `timestamp`, `input`,
`output`, `sessionId`, `userId`, `metadata`, `tags`, `observations`. An observation: `id`, `traceId`, `type`
(`GENERATION` | `SPAN` | `EVENT`, and in newer SDKs `AGENT` | `TOOL` | `CHAIN` | `RETRIEVER` | `EMBEDDING` |
`EVALUATOR` | `GUARDRAIL`), `name`, `startTime`, `endTime`, `parentObservationId`, `input`, `output`,
`model`, `level` (`DEBUG` | `DEFAULT` | `WARNING` | `ERROR`), `statusMessage`, `metadata`. Accepted shapes:
one trace, a list of traces, `{"data": [...]}` (the list APIs), observations alone (grouped by `traceId`),
and JSON lines of either.

Steps, ordered by `startTime` (ties: tree position): GENERATION (kind `llm`: the output message and its tool
calls), TOOL and RETRIEVER observations and SPANs without children that carry an output (kind `tool`:
name, input, output), EVENT (kind `other`: name, input/output). `statusMessage` of a WARNING/ERROR
observation is appended. agent = the nearest enclosing SPAN/AGENT/CHAIN observation's name, else the trace's
name. source `langfuse`, system = the trace's name.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..trace import Trace
from .common import Context, IngestError, check_trace_id, short
from .messages import content_text, dumps, join, question_of, tool_calls_text
from .spantree import Node, build_steps, parse_time

OBS_TYPES = {"GENERATION", "SPAN", "EVENT", "AGENT", "TOOL", "CHAIN", "RETRIEVER", "EMBEDDING", "EVALUATOR",
             "GUARDRAIL"}
STEP_KINDS = {"LLM": "llm", "TOOL": "tool", "EVENT": "other"}
MAX_TEXT = 200_000


def is_observation(d: Any) -> bool:
    return isinstance(d, dict) and str(d.get("type", "")).upper() in OBS_TYPES and "traceId" in d


def is_trace(d: Any) -> bool:
    return isinstance(d, dict) and isinstance(d.get("observations"), list) and "id" in d


def _text(v: Any) -> str:
    s = v if isinstance(v, str) else dumps(v)
    return s if len(s) <= MAX_TEXT else s[:MAX_TEXT] + "…"


def _generation_text(out: Any) -> str:
    if isinstance(out, str) or out is None:
        return out or ""
    if isinstance(out, list) and out and isinstance(out[0], dict) and ("role" in out[0] or "message" in out[0]):
        out = out[-1]
    if isinstance(out, dict):
        if isinstance(out.get("choices"), list) and out["choices"] and isinstance(out["choices"][0], dict):
            out = out["choices"][0].get("message") or out["choices"][0]
        elif isinstance(out.get("message"), dict):
            out = out["message"]
        if "content" in out or "tool_calls" in out:
            return join(content_text(out.get("content")), tool_calls_text(out.get("tool_calls")))
    return _text(out)


def _node(o: dict, trace_name: str | None, has_children: bool) -> Node:
    typ = str(o.get("type")).upper()
    name = o.get("name") if isinstance(o.get("name"), str) else None
    n = Node(id=str(o["id"]), parent=str(o["parentObservationId"]) if o.get("parentObservationId") else None,
             name=name, start=parse_time(o.get("startTime")), service=trace_name)
    status = (f"{o.get('level')}: {o['statusMessage']}" if isinstance(o.get("statusMessage"), str)
              and o["statusMessage"] and o.get("level") in ("WARNING", "ERROR") else "")
    if typ == "GENERATION":
        n.kind, n.role, n.content = "LLM", "assistant", join(_generation_text(o.get("output")), status)
    elif typ in ("TOOL", "RETRIEVER") or (typ == "SPAN" and not has_children and o.get("output") is not None):
        parts = [f"Tool: {name or '?'}"]
        if o.get("input") is not None:
            parts.append(f"Input: {_text(o['input'])}")
        if o.get("output") is not None:
            parts.append(f"Output: {_text(o['output'])}")
        n.kind, n.role, n.content = "TOOL", "tool", join("\n".join(parts), status)
    elif typ == "EVENT":
        body = o.get("output") if o.get("output") is not None else o.get("input")
        n.kind, n.role = "EVENT", "event"
        n.content = join(f"Event: {name or '?'}", _text(body) if body is not None else "", status)
    elif typ in ("SPAN", "AGENT", "CHAIN"):
        n.kind, n.agent_name = "AGENT", name
    else:
        n.kind = typ
    return n


def _trace(head: dict, observations: list, ctx: Context) -> Trace:
    raw_tid = head.get("id")
    if raw_tid is None:
        raise IngestError("invalid_record", "Langfuse trace without 'id'")
    tid = check_trace_id(str(raw_tid))
    obs = []
    for i, o in enumerate(observations):
        if isinstance(o, str):
            raise IngestError("invalid_record", "observations are ids only (the trace list API); export each "
                              "trace with GET /api/public/traces/{id} to get full observations", tid)
        if not isinstance(o, dict) or o.get("id") in (None, "") or str(o.get("type", "")).upper() not in OBS_TYPES:
            raise IngestError("invalid_record", f"observations[{i}] is not a Langfuse observation (needs 'id' and "
                              f"'type' in {sorted(OBS_TYPES)}): {short(o, 120)}", tid)
        obs.append(o)
    parents = {str(o["parentObservationId"]) for o in obs if o.get("parentObservationId")}
    name = head.get("name") if isinstance(head.get("name"), str) else None
    nodes = [_node(o, name, str(o["id"]) in parents) for o in obs]
    steps, facts = build_steps(nodes, tid, STEP_KINDS)
    if not steps:
        raise IngestError("empty_trace", f"no GENERATION, TOOL or EVENT observations among {len(obs)}", tid)
    if facts["n_duplicate_spans_dropped"]:
        ctx.warn("duplicate_span", f"{facts['n_duplicate_spans_dropped']} exact copies of observations dropped", tid)
    facts["format"] = "langfuse"
    for k in ("sessionId", "userId"):
        if isinstance(head.get(k), str):
            facts[k] = head[k]
    return Trace(trace_id=tid, source="langfuse", system=name, question=question_of(head.get("input")),
                 steps=steps, labels=None, metadata=facts)


def parse_docs(docs: list, ctx: Context) -> Iterator[Trace]:
    """Traces and/or bare observations of one input, grouped by trace id."""
    traces: list[dict] = []
    loose: dict[str, list[dict]] = {}
    for i, d in enumerate(docs):
        if isinstance(d, dict) and isinstance(d.get("data"), list):
            docs.extend(d["data"])  # list API page: its items are handled as they come
            continue
        if is_trace(d):
            traces.append(d)
        elif is_observation(d):
            loose.setdefault(str(d["traceId"]), []).append(d)
        else:
            ctx.reject(IngestError("invalid_record", "neither a Langfuse trace (with 'observations') nor an "
                                   f"observation (with 'traceId' and 'type'): {short(d, 120)}", f"record {i + 1}"))
    if not traces and not loose and not docs:
        raise IngestError("empty_trace", "no traces or observations in the Langfuse export")
    for t in traces:
        tid = str(t.get("id"))
        try:
            yield _trace(t, list(t["observations"]) + loose.pop(tid, []), ctx)
        except IngestError as e:
            e.record_id = e.record_id or short(tid, 200)
            ctx.reject(e)
    for tid, obs in loose.items():
        try:
            yield _trace({"id": tid}, obs, ctx)
        except IngestError as e:
            e.record_id = e.record_id or short(tid, 200)
            ctx.reject(e)


def parse(doc: Any, ctx: Context) -> Iterator[Trace]:
    if not isinstance(doc, (dict, list)):
        raise IngestError("invalid_record", f"a Langfuse export is a trace object or a list, got {type(doc).__name__}")
    yield from parse_docs(list(doc) if isinstance(doc, list) else [doc], ctx)

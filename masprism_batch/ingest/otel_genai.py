"""OpenTelemetry traces in OTLP/JSON (`{"resourceSpans": [...]}`) carrying GenAI semantic conventions.

One file may hold many traces (grouped by `traceId`) and a JSON-lines file may hold one export request
per line (the OTel collector's file exporter); a whole file is grouped in memory before traces are built.
Step spans: `gen_ai.operation.name` chat / text_completion / generate_content (kind `llm`) and execute_tool
(kind `tool`); `invoke_agent` / `create_agent` spans name the agent (`gen_ai.agent.name`) of the spans they
enclose. Spans that only carry OpenInference attributes (`openinference.span.kind`) are read the same way.
LLM content: `gen_ai.output.messages` (JSON parts), else legacy `gen_ai.completion.N.content`, else
`gen_ai.choice` events. Tool content: tool name, `gen_ai.tool.call.arguments`, `gen_ai.tool.call.result`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from ..trace import Trace
from .common import Context, IngestError, check_trace_id, short
from .spantree import Node, build_steps, parse_time

_LLM_OPS = {"chat", "text_completion", "generate_content"}
_AGENT_OPS = {"invoke_agent", "create_agent"}


def _value_d(v: Any, depth: int = 0) -> Any:
    """OTLP AnyValue -> Python value. Nested arrays/kvlists deeper than 32 levels are left raw, which
    bounds the recursion however deep a hostile document is."""
    if not isinstance(v, dict) or depth > 32:
        return v
    for k in ("stringValue", "boolValue", "doubleValue", "bytesValue"):
        if k in v:
            return v[k]
    if "intValue" in v:
        try:
            return int(v["intValue"])
        except (TypeError, ValueError):
            return v["intValue"]
    if "arrayValue" in v:
        return [_value_d(x, depth + 1) for x in (v["arrayValue"] or {}).get("values", []) or []]
    if "kvlistValue" in v:
        return {str(x.get("key")): _value_d(x.get("value"), depth + 1)
                for x in (v["kvlistValue"] or {}).get("values", []) or [] if isinstance(x, dict)}
    return None


def attrs(items: Any) -> dict[str, Any]:
    if isinstance(items, dict):  # already a map (some SDK JSON dumps)
        return items
    out: dict[str, Any] = {}
    for it in items if isinstance(items, list) else []:
        if isinstance(it, dict) and isinstance(it.get("key"), str):
            out[it["key"]] = _value_d(it.get("value"))
    return out


def _messages_text(v: Any) -> tuple[str, str | None]:
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except ValueError:
            return v, None
    parts, role = [], None
    for m in v if isinstance(v, list) else [v]:
        if not isinstance(m, dict):
            parts.append(str(m))
            continue
        role = role or m.get("role")
        for p in m.get("parts") or ([{"type": "text", "content": m["content"]}] if m.get("content") else []):
            if not isinstance(p, dict):
                parts.append(str(p))
            elif p.get("type") == "tool_call":
                parts.append(f"Tool call: {p.get('name', '?')}({json.dumps(p.get('arguments'), ensure_ascii=False)})")
            elif p.get("content") is not None:
                parts.append(str(p["content"]))
    return "\n".join(parts), role


def _llm_content(a: dict[str, Any], events: list[dict]) -> tuple[str, str | None]:
    if a.get("gen_ai.output.messages") is not None:
        return _messages_text(a["gen_ai.output.messages"])
    legacy = sorted((k for k in a if k.startswith("gen_ai.completion.") and k.endswith(".content")),
                    key=lambda k: (len(k), k))  # numeric order: .2. before .10.
    if legacy:
        return "\n".join(str(a[k]) for k in legacy), a.get("gen_ai.completion.0.role")
    for ev in events:
        if ev.get("name") == "gen_ai.choice":
            ea = attrs(ev.get("attributes"))
            body = ev.get("body", ea.get("message", ea))
            return _messages_text(body if not isinstance(body, dict) else [body])
    if a.get("output.value") is not None:
        return str(a["output.value"]), "assistant"
    return "", "assistant"


def _node(span: dict[str, Any], service: str | None) -> Node:
    a = attrs(span.get("attributes"))
    events = [e for e in span.get("events") or [] if isinstance(e, dict)]
    op = a.get("gen_ai.operation.name")
    kind = ("LLM" if op in _LLM_OPS else "TOOL" if op == "execute_tool" else "AGENT" if op in _AGENT_OPS
            else a.get("openinference.span.kind"))
    n = Node(id=str(span["spanId"]), parent=span.get("parentSpanId") or None, name=span.get("name"),
             kind=kind if isinstance(kind, str) else None, start=parse_time(span.get("startTimeUnixNano")),
             service=service)
    if n.kind == "LLM":
        n.content, n.role = _llm_content(a, events)
        n.role = n.role or "assistant"
    elif n.kind == "TOOL":
        parts = [f"Tool: {a.get('gen_ai.tool.name') or a.get('tool.name') or n.name or '?'}"]
        for key, label in (("gen_ai.tool.call.arguments", "Input"), ("input.value", "Input"),
                           ("gen_ai.tool.call.result", "Output"), ("output.value", "Output")):
            if a.get(key) is not None:
                parts.append(f"{label}: {a[key]}")
        for ev in events:
            if ev.get("name") == "exception":
                ea = attrs(ev.get("attributes"))
                parts.append(f"{ea.get('exception.type') or 'Error'}: {ea.get('exception.message')}")
        n.content, n.role = "\n".join(parts), "tool"
    if n.kind == "AGENT" or a.get("gen_ai.agent.name"):  # an LLM/TOOL span may name its own agent
        n.agent_name = a.get("gen_ai.agent.name") or a.get("agent.name") or n.name
    return n


def parse(docs: list[Any], ctx: Context) -> Iterator[Trace]:
    """`docs`: the export requests of one file (one object, or one per JSON line)."""
    groups: dict[str, list[Node]] = {}
    bad = 0
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict) or not isinstance(doc.get("resourceSpans"), list):
            ctx.reject(IngestError("invalid_record", "OTLP JSON must be an object with a 'resourceSpans' list",
                                   f"request {i + 1}"))
            bad += 1
            continue
        for rs in doc["resourceSpans"]:
            if not isinstance(rs, dict):
                continue
            service = attrs((rs.get("resource") or {}).get("attributes")).get("service.name")
            for ss in (rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or []):
                for span in (ss.get("spans") or []) if isinstance(ss, dict) else []:
                    if not isinstance(span, dict) or not span.get("spanId") or not span.get("traceId"):
                        ctx.warn("invalid_record", f"span without traceId/spanId skipped: {short(span)}")
                        continue
                    groups.setdefault(str(span["traceId"]), []).append(_node(span, service))
    if not groups and not bad:
        raise IngestError("empty_trace", "no spans in the OTLP export")
    for raw_tid, nodes in groups.items():
        try:
            tid = check_trace_id(raw_tid)
            steps, facts = build_steps(nodes, tid)
            if facts["n_duplicate_spans_dropped"]:
                ctx.warn("duplicate_span", f"{facts['n_duplicate_spans_dropped']} exact copies of spans dropped",
                         tid)
            roots = [n for n in nodes if n.parent is None]
            yield Trace(trace_id=tid, source="otel", system=(roots[0].service if roots else nodes[0].service),
                        question=None, steps=steps, labels=None, metadata=facts)
        except IngestError as e:
            if e.record_id is None:
                e.record_id = raw_tid
            ctx.reject(e)

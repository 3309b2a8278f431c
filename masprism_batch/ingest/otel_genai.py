"""OpenTelemetry traces in OTLP/JSON (`{"resourceSpans": [...]}`; Grafana Tempo's `{"batches": [...]}`) with
GenAI content in any attribute dialect (`genai_attrs`: semantic conventions, OpenLLMetry, OpenInference,
Google ADK `gcp.vertex.agent.*`, any-agent) or in span events, including GenAI events exported as OTLP logs
(`resourceLogs`, joined to their span by `traceId` + `spanId`).

One file may hold many traces (grouped by `traceId`) and a JSON-lines file may hold one export request
per line (the OTel collector's file exporter); a whole file is grouped in memory before traces are built.
Step spans: LLM calls (`gen_ai.operation.name` chat / text_completion / generate_content / call_llm,
OpenInference kind LLM, OpenLLMetry `llm.request.type`, ADK `call_llm`) and tool calls (`execute_tool`,
kind TOOL); `invoke_agent` / `agent_run [x]` / AGENT spans name the agent of the spans they enclose.
`node_of` and `traces_from_groups` are shared with `otel_sdk` (SDK dumps, Jaeger).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from masprism_batch.ingest import status
from masprism_batch.ingest.common import Context, IngestError, check_trace_id, request_id, short
from masprism_batch.ingest.context import attr_inputs, event_inputs, with_context
from masprism_batch.ingest.envelopes import value_text
from masprism_batch.ingest.genai_attrs import agent_name, attrs, llm_output, tool_text
from masprism_batch.ingest.genai_attrs import value_d as _value_d
from masprism_batch.ingest.messages import join
from masprism_batch.ingest.spantree import Node, build_steps, parse_time
from masprism_batch.trace import Trace

_LLM_OPS = {"chat", "text_completion", "generate_content", "call_llm"}  # call_llm: any-agent
_AGENT_OPS = {"invoke_agent", "create_agent"}


def _kind(a: dict[str, Any], name: str | None) -> str | None:
    """LLM | TOOL | AGENT | other, from the attribute dialects (see genai_attrs)."""
    op = a.get("gen_ai.operation.name")
    op = op if isinstance(op, str) else None  # attribute values are untrusted: a list or map is no operation
    if op in _LLM_OPS:
        return "LLM"
    if op == "execute_tool":
        return "TOOL"
    if op in _AGENT_OPS:
        return "AGENT"
    oi = a.get("openinference.span.kind")
    if isinstance(oi, str):
        return oi.upper()
    tl = a.get("traceloop.span.kind")  # OpenLLMetry
    if tl in ("tool", "agent"):
        return str(tl).upper()
    if "llm.request.type" in a or any(k.startswith("gen_ai.completion.") for k in a) or (
            "gcp.vertex.agent.llm_response" in a and name and "tool" not in name):
        return "LLM"
    if name and (name.startswith("invoke_agent") or name.startswith("agent_run")):
        return "AGENT"
    return None


def node_of(span: dict[str, Any], service: str | None, inputs: dict[str, list[dict]] | None = None) -> Node:
    """One span in OTLP/JSON key names (`spanId`, `parentSpanId`, `name`, `startTimeUnixNano`, `attributes`
    as a KeyValue list or a map, `events` with `attributes` either way) -> Node with its step text; an LLM
    span's input history (`context.attr_inputs`, prompt events) goes into `inputs` by span id."""
    a = attrs(span.get("attributes"))
    events = [{**e, "attributes": attrs(e.get("attributes"))} for e in span.get("events") or [] if isinstance(e, dict)]
    name = span.get("name") if isinstance(span.get("name"), str) else None
    kind = _kind(a, name)
    n = Node(id=str(span["spanId"]), parent=str(span["parentSpanId"]) if span.get("parentSpanId") else None,
             name=name, kind=kind, start=parse_time(span.get("startTimeUnixNano")), service=service,
             status=status.span_status(span, a))
    if kind == "LLM":
        n.content, n.role = llm_output(a, events), "assistant"
        if inputs is not None:
            msgs = attr_inputs(a) or event_inputs(events)
            if msgs:
                inputs[n.id] = msgs
    elif kind == "TOOL":
        n.content, n.role = tool_text(a, events, name), "tool"
    n.error = status.span_error(span, events, n.status == status.FAILED)
    if kind in ("LLM", "TOOL") and n.error:  # what the call raised, in the step the model reads
        n.content = join(n.content, n.error)
    if kind == "AGENT" or a.get("gen_ai.agent.name") or a.get("agent.name"):  # a step span may name its agent
        n.agent_name = agent_name(a, name) or (a.get("traceloop.entity.name") if kind == "AGENT" else None) or (
            (name[:-4] if name and name.endswith(".run") else name) if kind == "AGENT" else None)
    return n


def _items(d: Any, key: str) -> list:
    v = d.get(key) if isinstance(d, dict) else None
    return v if isinstance(v, list) else []


def _container(d: Any, key: str, where: str) -> list:
    """`d[key]` when it is a list (absent: empty); `d` not an object, or `d[key]` not a list, is an IngestError."""
    if not isinstance(d, dict):
        raise IngestError("invalid_record", f"{where} must be an object, got {short(d)}")
    v = d.get(key)
    if v is not None and not isinstance(v, list):
        raise IngestError("invalid_record", f"{where}.{key} must be a list, got {short(v)}")
    return v or []


def _log_events(docs: list[Any], ctx: Context | None = None) -> dict[tuple[str, str], list[dict]]:
    """GenAI events exported as OTLP logs (`resourceLogs`), by (traceId, spanId), as span events. A request that
    cannot be read (a list where an object belongs) is its own row; the other requests' events are kept."""
    out: dict[tuple[str, str], list[dict]] = {}
    for i, doc in enumerate(docs):
        got: list[tuple[tuple[str, str], dict]] = []
        try:  # a container of the wrong type (`"logRecords": 5`, `resourceLogs: [5]`) is the request's row
            for j, rl in enumerate(_items(doc, "resourceLogs")):  # a request that is no object: parse() says so
                for k, sl in enumerate(_container(rl, "scopeLogs", f"resourceLogs[{j}]")):
                    for m, rec in enumerate(_container(sl, "logRecords", f"resourceLogs[{j}].scopeLogs[{k}]")):
                        if not isinstance(rec, dict):
                            raise IngestError("invalid_record", f"resourceLogs[{j}].scopeLogs[{k}].logRecords[{m}] "
                                              f"must be an object, got {short(rec)}")
                        a = attrs(rec.get("attributes"))
                        ev = {"name": rec.get("eventName") or a.get("event.name") or a.get("gen_ai.event.name"),
                              "attributes": a, "body": _value_d(rec.get("body")),
                              "timeUnixNano": rec.get("timeUnixNano") or rec.get("observedTimeUnixNano")}
                        got.append(((str(rec.get("traceId") or ""), str(rec.get("spanId") or "")), ev))
        except Exception as e:  # noqa: BLE001 - this request's rejection, the file goes on
            if ctx is None:
                raise
            ctx.reject_any(e, request_id(ctx, i))
            continue
        for key, ev in got:
            out.setdefault(key, []).append(ev)
    return out


def _log_only_nodes(events: list[dict], tid: str, sid: str) -> list[Node]:
    """Steps from GenAI log events whose span is not in the file: answers and tool results only (the
    input history is repeated context, not a step)."""
    nodes = []
    for j, ev in enumerate(events):
        body = ev.get("body")
        if ev.get("name") in ("gen_ai.choice", "gen_ai.assistant.message"):
            kind, role = "LLM", "assistant"
            text = llm_output({}, [ev])
        elif ev.get("name") == "gen_ai.tool.message":
            kind, role = "TOOL", "tool"
            text = value_text(body.get("content") if isinstance(body, dict) and "content" in body else body)
        else:
            continue
        nodes.append(Node(id=f"{sid or tid}#log{j}", parent=sid or None, name=ev.get("name"), kind=kind,
                          start=parse_time(ev.get("timeUnixNano")), content=text, role=role))
    return nodes


_UNNAMED = ("unknown_service", "")  # the SDK's default service.name names no agent


def _merge_nested(nodes: list[Node], inputs: dict[str, list[dict]]) -> None:
    """A framework's LLM span and the client library's LLM span inside it (ADK `call_llm` around
    `generate_content`, agent frameworks around OpenAI calls) are one model call: the outer one stays the step,
    taking the inner one's text or input history when it has none."""
    by_id = {n.id: n for n in nodes}
    for n in nodes:
        if n.kind != "LLM":
            continue
        cur, hops = by_id.get(n.parent or ""), 0
        while cur is not None and cur.kind != "LLM" and hops < 64:
            cur, hops = by_id.get(cur.parent or ""), hops + 1
        if cur is None or cur.kind != "LLM" or cur is n:
            continue
        if not cur.content.strip():
            cur.content = n.content
        if n.id in inputs and not inputs.get(cur.id):
            inputs[cur.id] = inputs[n.id]
        n.kind = "LLM_COPY"  # structure only from here on


def _root_agent(r: Node) -> str | None:
    """A root span names the agent only as a service someone named (never a span's housekeeping name)."""
    return r.service if r.service and not r.service.startswith(_UNNAMED[0]) else None


def traces_from_groups(groups: dict[str, list[Node]], ctx: Context, fmt: str,
                       inputs: dict[str, dict[str, list[dict]]] | None = None, source: str = "otel",
                       task: str | None = None) -> Iterator[Trace]:
    """Traces of grouped span nodes; `inputs`: trace id -> span id -> input history (`context.with_context`);
    `task`: the run's task where the source records it outside model calls (a step unless an input repeats it)."""
    for raw_tid, nodes in groups.items():
        try:
            tid = check_trace_id(raw_tid)
            ins = (inputs or {}).get(raw_tid, {})
            _merge_nested(nodes, ins)
            steps, facts = build_steps(nodes, tid, root_agent=_root_agent)
            if not steps:
                raise IngestError("empty_trace", f"none of {len(nodes)} spans is an LLM call or a tool call (no "
                                  "gen_ai.operation.name chat/execute_tool, openinference.span.kind LLM/TOOL or "
                                  "GenAI content attributes)", tid)
            if facts["n_duplicate_spans_dropped"]:
                ctx.warn("duplicate_span", f"{facts['n_duplicate_spans_dropped']} exact copies of spans dropped",
                         tid)
            for s in steps:  # no enclosing agent: the model speaks as `assistant`, a tool as itself
                if s.agent is None:
                    s.agent = "assistant" if s.kind == "llm" else tool_of(s.content)
            steps, question = with_context(steps, ins, task, task_step=task is not None)
            roots = [n for n in nodes if n.parent is None]
            facts["format"] = fmt
            yield Trace(trace_id=tid, source=source, system=(roots[0].service if roots else nodes[0].service),
                        question=question, steps=steps, labels=None, metadata=facts,
                        run_status=status.combine_statuses(n.status for n in nodes))
        except Exception as e:  # noqa: BLE001 - any failure is this trace's rejection, the file goes on
            ctx.reject_any(e, raw_tid)


def tool_of(content: str) -> str:
    head = content.split("\n", 1)[0]
    return head[len("Tool: "):][:200] if head.startswith("Tool: ") else "tool"


def resource_spans(doc: dict) -> Any:
    """OTLP `resourceSpans`; Grafana Tempo writes the same as `batches` (or `{"trace": {...}}` in API v2)."""
    if isinstance(doc.get("trace"), dict):
        doc = doc["trace"]
    return doc.get("resourceSpans", doc.get("batches"))


def _request_spans(rss: list, logs: dict, ctx: Context, where: str) -> Iterator[tuple[str, dict, Any]]:
    """(trace id, span with its log events, service name) of one export request's `resourceSpans`."""
    for j, rs in enumerate(rss):
        if not isinstance(rs, dict):  # each container of the wrong type is a row: never a trace gone unsaid
            ctx.reject(IngestError("invalid_record", f"resourceSpans[{j}] must be an object, got {short(rs)}", where))
            continue
        res = rs.get("resource") if isinstance(rs.get("resource"), dict) else {}
        service = attrs(res.get("attributes")).get("service.name")
        key = "scopeSpans" if "scopeSpans" in rs else "instrumentationLibrarySpans"
        scopes = rs.get(key)
        if scopes is not None and not isinstance(scopes, list):
            ctx.reject(IngestError("invalid_record", f"resourceSpans[{j}].{key} must be a list, got "
                                   f"{short(scopes)}", where))
            continue
        for k, ss in enumerate(scopes or ()):
            spans = ss.get("spans") if isinstance(ss, dict) else None
            if not isinstance(ss, dict) or not (spans is None or isinstance(spans, list)):
                what = (f"resourceSpans[{j}].{key}[{k}].spans must be a list" if isinstance(ss, dict)
                        else f"resourceSpans[{j}].{key}[{k}] must be an object")
                ctx.reject(IngestError("invalid_record", f"{what}, got {short(spans if isinstance(ss, dict) else ss)}",
                                       where))
                continue
            for span in spans or ():
                if not isinstance(span, dict) or not span.get("spanId") or not span.get("traceId"):
                    ctx.warn("invalid_record", f"{where}: span without traceId/spanId skipped: {short(span)}", where)
                    continue
                ev = logs.pop((str(span["traceId"]), str(span["spanId"])), None)
                if ev:
                    span = {**span, "events": _items(span, "events") + ev}
                yield str(span["traceId"]), span, service


def parse(docs: list[Any], ctx: Context) -> Iterator[Trace]:
    """`docs`: the export requests of one file (one object, or one per JSON line): `resourceSpans` (or
    Tempo's `batches`) and/or `resourceLogs` (GenAI events, attached to their spans)."""
    groups: dict[str, list[Node]] = {}
    inputs: dict[str, dict[str, list[dict]]] = {}
    rejected_before = ctx.rejected
    logs = _log_events(docs, ctx)
    bad = 0
    for i, doc in enumerate(docs):
        rss = resource_spans(doc) if isinstance(doc, dict) else None
        if rss is None and isinstance(doc, dict) and isinstance(doc.get("resourceLogs"), list):
            continue
        if not isinstance(rss, list):
            ctx.reject(IngestError("invalid_record", f"request {i + 1}: 'resourceSpans' (Tempo: 'batches') must be a list, "
                                   f"got {type(rss).__name__}", request_id(ctx, i)))
            bad += 1
            continue
        try:  # a request is read whole before its spans join the groups: a bad one costs itself only
            got = []
            for tid, span, service in _request_spans(rss, logs, ctx, request_id(ctx, i)):
                ins: dict[str, list[dict]] = {}
                got.append((tid, node_of(span, service, ins), ins))
        except Exception as e:  # noqa: BLE001 - this request's rejection, the file goes on
            ctx.reject_any(e, request_id(ctx, i))
            bad += 1
            continue
        for tid, node, ins in got:
            groups.setdefault(tid, []).append(node)
            inputs.setdefault(tid, {}).update(ins)
    for (tid, sid), evs in logs.items():  # events of spans this file does not hold
        if tid:
            groups.setdefault(tid, []).extend(_log_only_nodes(evs, tid, sid))
    if not groups and not bad and ctx.rejected == rejected_before:
        raise IngestError("empty_trace", "no spans in the OTLP export")
    yield from traces_from_groups(groups, ctx, "otlp", inputs)

"""Span dumps that are not OTLP: the OpenTelemetry SDK's `ReadableSpan.to_json()` lists and Jaeger UI JSON.

- OTel SDK (`--format otel-sdk`): `{"spans": [span, ...]}` or a bare list of spans, as written by
  `ConsoleSpanExporter` / `span.to_json()` and by tools built on it (any-agent's `AgentTrace`, which adds
  `final_output`), also one span per JSON line. A span: `name`, `context: {"trace_id", "span_id"}` (hex text `0x...` or integers),
  `parent_id` (hex) or `parent: {"span_id"}`, `start_time` (ISO text or integer ns), `attributes` (a map),
  `events: [{"name", "timestamp", "attributes"}]`, `resource: {"attributes"}` (its `service.name`).
- Jaeger (`--format jaeger`): the UI's "Download JSON" / query API `{"data": [{"traceID", "spans": [...],
  "processes": {...}}]}`; a span: `traceID`, `spanID`, `operationName`, `references: [{"refType": "CHILD_OF",
  "spanID"}]`, `startTime` (µs), `tags: [{"key", "type", "value"}]`, `logs: [{"timestamp", "fields"}]`,
  `processID` (its `serviceName`).
Both are rewritten to OTLP key names and read by `otel_genai.node_of`, so every GenAI dialect is read the same.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from masprism_batch.ingest.common import Context, IngestError, request_id, short
from masprism_batch.ingest.otel_genai import node_of, traces_from_groups
from masprism_batch.ingest.spantree import Node
from masprism_batch.trace import Trace


def _id(v: Any) -> str | None:
    if v is None or v == "" or isinstance(v, bool):
        return None
    return str(v)


def is_sdk_span(s: Any) -> bool:
    return isinstance(s, dict) and isinstance(s.get("context"), dict) and "span_id" in s["context"] and "name" in s


def is_jaeger(doc: Any) -> bool:
    return (isinstance(doc, dict) and isinstance(doc.get("data"), list) and bool(doc["data"])
            and isinstance(doc["data"][0], dict) and "spans" in doc["data"][0] and "traceID" in doc["data"][0])


def _sdk_span(s: Any, i: int) -> tuple[str, dict[str, Any], str | None]:
    if not isinstance(s, dict):
        raise IngestError("invalid_record", f"spans[{i}] must be an object (an OTel SDK span), got "
                          f"{type(s).__name__}")
    ctx_ = s.get("context")
    if not isinstance(ctx_, dict) or _id(ctx_.get("span_id")) is None or _id(ctx_.get("trace_id")) is None:
        raise IngestError("invalid_record", f"spans[{i}].context must hold trace_id and span_id, got "
                          f"{short(ctx_)}")
    parent = s.get("parent_id")
    if parent is None and isinstance(s.get("parent"), dict):
        parent = s["parent"].get("span_id")
    attrs = s.get("attributes") if isinstance(s.get("attributes"), dict) else {}
    events = [{"name": e.get("name"), "attributes": e.get("attributes") or {}, "timeUnixNano": e.get("timestamp")}
              for e in _list(s.get("events")) if isinstance(e, dict)]
    res = s.get("resource") if isinstance(s.get("resource"), dict) else {}
    service = (res.get("attributes") or {}).get("service.name") if isinstance(res.get("attributes"), dict) else None
    span = {"spanId": _id(ctx_["span_id"]), "parentSpanId": _id(parent), "name": s.get("name"),
            "startTimeUnixNano": s.get("start_time"), "attributes": attrs, "events": events, "status": s.get("status")}
    return str(ctx_["trace_id"]), span, service if isinstance(service, str) else None


def parse_sdk(doc: Any, ctx: Context) -> Iterator[Trace]:
    spans = [doc] if is_sdk_span(doc) else doc.get("spans") if isinstance(doc, dict) else doc
    if not isinstance(spans, list):
        raise IngestError("invalid_record", f"'spans' must be a list of OTel SDK spans, got {type(spans).__name__}")
    if not spans:
        raise IngestError("empty_trace", "'spans' is empty")
    groups: dict[str, list[Node]] = {}
    inputs: dict[str, dict[str, list[dict]]] = {}
    for i, s in enumerate(spans):
        try:  # a span that cannot be read is its own row; its trace is built from the others
            tid, span, service = _sdk_span(s, i)
            ins: dict[str, list[dict]] = {}
            node = node_of(span, service, ins)
        except Exception as e:  # noqa: BLE001 - this span's rejection, the file goes on
            ctx.reject_any(e, request_id(ctx, i) if doc is spans else f"spans[{i}]")
            continue
        groups.setdefault(tid, []).append(node)
        inputs.setdefault(tid, {}).update(ins)
    yield from _traces_of(groups, inputs, ctx, "otel-sdk", "no readable OTel SDK span")


def _traces_of(groups: dict, inputs: dict, ctx: Context, kind: str, empty: str) -> Iterator[Trace]:
    """The traces of the span groups read; none at all is `empty_trace` (`empty` says of what), unless every span
    or trace was rejected alone, a row each."""
    if not groups:
        if ctx.rejected:
            return
        raise IngestError("empty_trace", empty)
    yield from traces_from_groups(groups, ctx, kind, inputs)


def _list(v: Any) -> list:
    return v if isinstance(v, list) else []


def _kv(items: Any) -> dict[str, Any]:
    """Jaeger `tags` / log `fields`: `[{"key", "type", "value"}]` as a map (entries without a text key dropped)."""
    return {t["key"]: t.get("value") for t in _list(items) if isinstance(t, dict) and isinstance(t.get("key"), str)}


def _jaeger_nodes(tr: Any, i: int) -> Iterator[tuple[str, Node, dict[str, list[dict]]]]:
    """(trace id, node, input histories) of each span of Jaeger trace `data[i]`."""
    if not isinstance(tr, dict) or not isinstance(tr.get("spans"), list):
        raise IngestError("invalid_record", f"data[{i}].spans must be a list (a Jaeger trace)")
    procs = tr.get("processes") if isinstance(tr.get("processes"), dict) else {}
    for j, s in enumerate(tr["spans"]):
        if not isinstance(s, dict) or _id(s.get("spanID")) is None:
            raise IngestError("invalid_record", f"data[{i}].spans[{j}].spanID is missing (a Jaeger span)")
        refs = [r for r in _list(s.get("references")) if isinstance(r, dict) and r.get("refType") == "CHILD_OF"]
        tags = _kv(s.get("tags"))
        events = []
        for lg in _list(s.get("logs")):
            if isinstance(lg, dict):
                f = _kv(lg.get("fields"))
                events.append({"name": f.pop("event", None), "attributes": f, "timeUnixNano": lg.get("timestamp")})
        pid = s.get("processID")
        proc = procs.get(pid) if isinstance(pid, str) and isinstance(procs.get(pid), dict) else {}
        span = {"spanId": str(s["spanID"]), "parentSpanId": _id(refs[0].get("spanID")) if refs else None,
                "name": s.get("operationName"), "startTimeUnixNano": s.get("startTime"), "attributes": tags,
                "events": events}
        tid = _id(s.get("traceID")) or _id(tr.get("traceID"))
        if tid is None:
            raise IngestError("invalid_record", f"data[{i}].spans[{j}].traceID is missing")
        ins: dict[str, list[dict]] = {}
        yield tid, node_of(span, proc.get("serviceName"), ins), ins


def parse_jaeger(doc: Any, ctx: Context) -> Iterator[Trace]:
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list):
        raise IngestError("invalid_record", "'data' must be a list of Jaeger traces")
    groups: dict[str, list[Node]] = {}
    inputs: dict[str, dict[str, list[dict]]] = {}
    for i, tr in enumerate(data):
        try:  # a Jaeger trace is read whole before it joins the groups: a bad one costs itself only
            got = list(_jaeger_nodes(tr, i))
        except Exception as e:  # noqa: BLE001 - this trace's rejection, the document goes on
            tid = tr.get("traceID") if isinstance(tr, dict) and isinstance(tr.get("traceID"), str) else None
            ctx.reject_any(e, short(tid, 200)[1:-1] if tid else f"data[{i}]")
            continue
        for tid, node, ins in got:
            groups.setdefault(tid, []).append(node)
            inputs.setdefault(tid, {}).update(ins)
    yield from _traces_of(groups, inputs, ctx, "jaeger", "no spans in the Jaeger export")

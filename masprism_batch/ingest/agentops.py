"""AgentOps trace exports (`--format agentops`, source `agentops`): what the AgentOps API returns for one trace
(`{"trace": {"trace_id", "root_span_name", ...}, "spans": [...]}`), e.g. a CrewAI crew.

A span: `span_id`, `parent_span_id` (empty at the root), `span_name`, `start_time` (ISO), `status_code`,
`span_attributes` as *nested* objects (`agentops.span.kind`: `workflow` / `workflow.step` (a task) / `agent` /
`llm` / `tool`; `agentops.entity.input|output`; `agent.role`; `gen_ai.prompt` / `gen_ai.completion` as lists of
`{"role", "content"}`; `crewai.task.*`). The attributes are flattened to the dotted keys the OTel dialects use
(lists of objects numbered: `gen_ai.completion.0.content`) and read by `otel_genai` like any span: LLM spans
(their prompts give the context steps), tool spans, agent spans named by `agent.role`. The first task's
description is the question (a step, first, unless a model call's input repeats it).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from masprism_batch.ingest.common import Context, IngestError
from masprism_batch.ingest.otel_genai import node_of, traces_from_groups
from masprism_batch.ingest.spantree import Node
from masprism_batch.trace import Trace

_KINDS = {"llm": {"llm.request.type": "chat"}, "tool": {"traceloop.span.kind": "tool"},
          "agent": {"traceloop.span.kind": "agent"}}
MAX_FLAT_DEPTH = 16


def is_export(d: Any) -> bool:
    spans = d.get("spans") if isinstance(d, dict) else None
    return isinstance(d.get("trace"), dict) and isinstance(spans, list) and bool(spans) and isinstance(
        spans[0], dict) and "span_attributes" in spans[0]


def flatten(v: Any, prefix: str = "", out: dict | None = None, depth: int = 0) -> dict[str, Any]:
    """Nested attribute objects -> dotted keys; lists of objects numbered (`gen_ai.prompt.0.role`)."""
    out = {} if out is None else out
    if depth < MAX_FLAT_DEPTH and isinstance(v, dict):
        for k, x in v.items():
            flatten(x, f"{prefix}.{k}" if prefix else str(k), out, depth + 1)
    elif depth < MAX_FLAT_DEPTH and isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
        for i, x in enumerate(v):
            flatten(x, f"{prefix}.{i}", out, depth + 1)
    elif prefix:
        out[prefix] = v
    return out


def parse(doc: Any, ctx: Context) -> Iterator[Trace]:
    if not is_export(doc):
        raise IngestError("invalid_record", "an AgentOps export needs 'trace' and 'spans' with 'span_attributes'")
    head = doc["trace"]
    tid = str(head.get("trace_id") or "")
    nodes: list[Node] = []
    inputs: dict[str, list[dict]] = {}
    task = None
    for i, s in enumerate(doc["spans"]):
        if not isinstance(s, dict) or not s.get("span_id"):
            raise IngestError("invalid_record", f"spans[{i}].span_id is missing (an AgentOps span)", tid or None)
        a = flatten(s.get("span_attributes"))
        kind = a.get("agentops.span.kind")
        a.update(_KINDS.get(kind, {}) if isinstance(kind, str) else {})
        if kind == "agent" and isinstance(a.get("agent.role"), str):
            a["agent.name"] = a["agent.role"]
        if kind == "workflow.step" and task is None:
            task = a.get("agentops.entity.input") or a.get("crewai.task.name")
        span = {"spanId": str(s["span_id"]), "parentSpanId": s.get("parent_span_id") or None,
                "name": s.get("span_name"), "startTimeUnixNano": s.get("start_time"), "attributes": a}
        nodes.append(node_of(span, None, inputs))
    if not nodes:
        raise IngestError("empty_trace", "no spans in the AgentOps export", tid or None)
    yield from traces_from_groups({tid: nodes}, ctx, "agentops", {tid: inputs}, source="agentops",
                                  task=task if isinstance(task, str) else None)

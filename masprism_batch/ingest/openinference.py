"""TRAIL / OpenInference span trees: `{"trace_id", "spans": [span, ...]}` with nested `child_spans`
(or a flat span list linked by `parent_span_id`).

Which spans become steps (see docs/schema.md):
- LLM spans (kind `llm`): what the model *produced*: the output message text, then one line per tool call
  (`Tool call: name(arguments)`); `output.value` when no output messages are logged; the error the span
  records (status message, exception type, message and stack head: `status.error_text`). The repeated input history (`llm.input_messages.*`) is never copied.
- TOOL spans (kind `tool`): tool name, input and output, and the error if the tool raised. The error of a span
  that is no step (smolagents' `Step N`) goes to the last step under it (`spantree.attach_errors`).
- AGENT / CHAIN / unlabelled spans give structure only. A step's agent is the nearest enclosing AGENT span
  (`agent named 'x'` in its task text, else its span name without `.run`, e.g. `CodeAgent`), else the root
  span's service name.
Labels come from `<dataset>/annotations/<trace_id>.json` beside the `traces/` folder, matched by trace id
through a listing of that folder (the trace id is never used to build a path).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from masprism_batch.ingest import status
from masprism_batch.ingest.common import Context, IngestError, check_trace_id, decode_utf8, loads, short
from masprism_batch.ingest.file_bytes import read_bytes
from masprism_batch.ingest.sources import base_name
from masprism_batch.ingest.spantree import Node, build_steps, parse_time
from masprism_batch.trace import Labels, Trace

_SMOL_STEP = re.compile(r"Step \d+$")
_AGENT_NAMED = re.compile(r"agent named '([^'\n]{1,100})'")
_OUT = re.compile(r"llm\.output_messages\.(\d+)\.message\.(content|role|tool_calls\.(\d+)\.tool_call\.function\."
                  r"(name|arguments))$")


def _attrs(span: dict[str, Any]) -> dict[str, Any]:
    a = span.get("span_attributes", span.get("attributes"))
    if isinstance(a, str):  # some exports store the attribute map as JSON text
        try:
            a = json.loads(a)
        except ValueError:
            a = None
    return a if isinstance(a, dict) else {}


def _llm_content(a: dict[str, Any]) -> tuple[str, str | None]:
    msgs: dict[int, dict[str, Any]] = {}
    for k, v in a.items():
        if k.startswith("llm.output_messages."):
            m = _OUT.match(k)
            if m:
                msg = msgs.setdefault(int(m.group(1)), {"calls": {}})
                if m.group(4):
                    msg["calls"].setdefault(int(m.group(3)), {})[m.group(4)] = v
                else:
                    msg[m.group(2)] = v
    parts, role = [], None
    for i in sorted(msgs):
        msg = msgs[i]
        role = role or msg.get("role")
        if msg.get("content"):
            parts.append(str(msg["content"]))
        for j in sorted(msg["calls"]):
            c = msg["calls"][j]
            parts.append(f"Tool call: {c.get('name', '?')}({c.get('arguments', '')})")
    if not parts and a.get("output.value") is not None:
        parts.append(str(a["output.value"]))
    return "\n".join(parts), role or "assistant"


def _tool_content(a: dict[str, Any], name: str | None) -> str:
    parts = [f"Tool: {a.get('tool.name') or name or '?'}"]
    if a.get("input.value") is not None:
        parts.append(f"Input: {a['input.value']}")
    if a.get("output.value") is not None:
        parts.append(f"Output: {a['output.value']}")
    return "\n".join(parts)


def _agent_name(a: dict[str, Any], name: str | None) -> str | None:
    for key in ("agent.name", "gen_ai.agent.name", "smolagents.agent.name"):
        if isinstance(a.get(key), str) and a[key]:
            return a[key]
    m = _AGENT_NAMED.search(str(a.get("input.value", ""))[:2000])
    if m:
        return m.group(1)
    return name[:-4] if name and name.endswith(".run") else name


def _norm_id(v: Any) -> str | None:
    return None if v is None or v in ("", "None", "null") else str(v)


def to_nodes(spans: list[Any], trace_id: str) -> tuple[list[Node], str | None]:
    """Flatten nested `child_spans` iteratively; returns the nodes and the task text of the first AGENT."""
    nodes: list[Node] = []
    question = None
    stack: list[tuple[Any, str | None]] = [(s, None) for s in reversed(spans)]
    while stack:
        span, enclosing = stack.pop()
        if not isinstance(span, dict) or _norm_id(span.get("span_id")) is None:
            raise IngestError("invalid_record", f"span must be an object with a span_id, got {short(span)}", trace_id)
        sid = _norm_id(span["span_id"])
        a = _attrs(span)
        kind = a.get("openinference.span.kind")
        name = span.get("span_name", span.get("name"))
        name = name if isinstance(name, str) else None
        node = Node(id=sid, parent=enclosing if enclosing is not None else _norm_id(span.get("parent_span_id")),
                    name=name, kind=kind if isinstance(kind, str) else None, start=parse_time(span.get("timestamp")),
                    service=span.get("service_name") if isinstance(span.get("service_name"), str) else None,
                    status=status.span_status(span, a))
        node.error = status.span_error(span, span.get("events"), node.status == status.FAILED)
        if node.kind == "LLM":
            node.content, node.role = _llm_content(a)
        elif node.kind == "TOOL":
            node.content, node.role = _tool_content(a, name), "tool"
        if node.kind in ("LLM", "TOOL") and node.error:  # what the call raised, in the step the model reads
            node.content = "\n".join(x for x in (node.content, node.error) if x)
        elif node.kind == "AGENT":
            node.agent_name = _agent_name(a, name)
            if question is None:
                question = _task(a)
        nodes.append(node)
        kids = span.get("child_spans")
        if isinstance(kids, list):
            stack.extend((c, sid) for c in reversed(kids))
    return nodes, question


def _task(a: dict[str, Any]) -> str | None:
    if isinstance(a.get("smolagents.task"), str):
        return a["smolagents.task"]
    v = a.get("input.value")
    if isinstance(v, str) and v.startswith("{"):
        try:
            t = json.loads(v).get("task")
            return t if isinstance(t, str) else None
        except (ValueError, AttributeError):
            return None
    return None


@lru_cache(maxsize=64)
def _annotation_index(ann_dir: str) -> dict[str, str]:
    try:
        return {base_name(n): os.path.join(ann_dir, n) for n in os.listdir(ann_dir) if n.endswith(".json")}
    except OSError:
        return {}


def _labels(tid: str, ctx: Context) -> tuple[Labels | None, str | None]:
    """(labels, dataset name) from the sibling annotations folder; invalid annotations warn, never reject."""
    traces_dir = os.path.dirname(os.path.abspath(ctx.input_path))
    root = os.path.dirname(traces_dir)
    dataset = os.path.basename(root) if os.path.basename(traces_dir) == "traces" else None
    path = _annotation_index(os.path.join(root, "annotations")).get(tid) if dataset else None
    if path is None:
        return None, dataset
    try:
        ann = loads(decode_utf8(read_bytes(path), ctx), tid)
        if not isinstance(ann, dict) or not isinstance(ann.get("errors"), list):
            raise IngestError("invalid_annotation", "annotation must be an object with an 'errors' list", tid)
        if ann.get("trace_id") not in (None, tid):
            ctx.warn("annotation_mismatch", f"annotation names trace {short(ann.get('trace_id'))}, not the trace "
                     f"of its file name; labels left null", tid, input_path=path)
            return None, dataset
        locs, impacts, cats = [], [], []
        for e in ann["errors"]:
            if not isinstance(e, dict) or not isinstance(e.get("location"), str):
                raise IngestError("invalid_annotation", f"error entry without a string location: {short(e)}", tid)
            locs.append(e["location"])
            impacts.append(str(e.get("impact") or ""))
            cats.append(str(e.get("category") or ""))
        return Labels(error_locations=locs, error_impacts=impacts, error_categories=cats), dataset
    except IngestError as e:
        ctx.warn("invalid_annotation", f"{e.message}; its trace ({ctx.input_path}) was kept with labels null",
                 tid, input_path=path)
        return None, dataset


def parse(doc: Any, ctx: Context) -> Iterator[Trace]:
    if isinstance(doc, list):
        doc = {"spans": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("spans"), list):
        raise IngestError("invalid_record", "OpenInference trace must be an object with a 'spans' list")
    spans = doc["spans"]
    first = spans[0] if spans and isinstance(spans[0], dict) else {}
    tid = check_trace_id(doc.get("trace_id") or first.get("trace_id") or base_name(ctx.input_path))
    if not spans:
        raise IngestError("empty_trace", "trace has no spans", tid)
    nodes, question = to_nodes(spans, tid)
    steps, facts = build_steps(nodes, tid)
    if facts["n_duplicate_spans_dropped"]:
        ctx.warn("duplicate_span", f"{facts['n_duplicate_spans_dropped']} exact copies of spans dropped", tid)
    labels, dataset = _labels(tid, ctx)
    meta: dict[str, Any] = {**facts, "service_name": nodes[0].service}
    if dataset:
        meta["dataset"] = dataset
    if labels is not None:
        # Gold spans that are not steps cannot be predicted; evaluation reads this to stay honest.
        step_ids = {s.span_id for s in steps}
        meta["label_locations_unmapped"] = sum(loc not in step_ids for loc in labels.error_locations or [])
    # smolagents names agent spans `<Class>Agent.run` and step spans `Step N`; fragments may lack the former
    system = "smolagents" if any(n.name and (n.kind == "AGENT" and n.name.endswith("Agent.run") or
                                             n.kind == "CHAIN" and _SMOL_STEP.match(n.name)) for n in nodes) else None
    yield Trace(trace_id=tid, source=f"trail/{dataset}" if dataset else "openinference", system=system,
                question=question, steps=steps, labels=labels, metadata=meta,
                run_status=status.FAILED if labels is not None else status.combine_statuses(n.status for n in nodes))

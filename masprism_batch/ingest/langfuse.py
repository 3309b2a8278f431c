"""Langfuse trace exports (`--format langfuse`): a trace with its observations.

Shapes read: the UI's "download trace" JSON (`{"trace": {...}, "observations": [...]}`, written by Langfuse's
`downloadTrace.ts`), the server download (`{"observations": [...], "scores": [...]}`, observations carry
`traceId`), the public API (`GET /api/public/traces/{traceId}`: a trace holding `observations`), a list of
traces, `{"data": [...]}` (the list APIs), observations alone (grouped by `traceId`), and JSON lines of either.
A trace: `id`, `name`, `timestamp`, `input`, `output`, `sessionId`, `userId`, `metadata`. An observation:
`id`, `traceId`, `type` (`GENERATION` | `SPAN` | `EVENT` | `AGENT` | `TOOL` | `CHAIN` | `RETRIEVER` |
`EMBEDDING` | `EVALUATOR` | `GUARDRAIL`), `name`, `startTime`, `parentObservationId`, `input`, `output`,
`level`, `statusMessage`, `metadata` (an object or JSON text; OTel-based SDKs put span attributes under
`metadata.attributes`). `input`/`output` may be JSON-encoded strings.

Steps, ordered by `startTime` (ties: tree position):
- GENERATION (kind `llm`): the answer and its tool calls in whichever envelope the SDK stored
  (`envelopes.output_text`: LangChain messages with `additional_kwargs.tool_calls`, `parts`, Responses
  objects, Chat Completions responses, ADK `LlmResponse`), else the span attributes (`genai_attrs`). A
  GENERATION inside another GENERATION (two instrumentations of one call) is the same call: skipped.
- TOOL / RETRIEVER observations, and SPANs without children that carry an output (kind `tool`): tool name,
  input, output (falling back to the ADK / pydantic-ai / OpenInference attributes). In a LangGraph trace a
  childless span that is neither a graph node nor a tool the model called (a router such as
  `should_continue`) is control flow, not a step.
- EVENT (kind `other`): name, input/output. `statusMessage` of a WARNING/ERROR observation is appended.
agent = the nearest enclosing agent: an AGENT observation (`agent_run [x]` -> `x`), a span naming one
(`gen_ai.agent.name`, `agent_name`, a LangGraph node), or a plain SPAN/CHAIN that is not only a wrapper of
tool calls (pydantic-ai's `running 3 tools`); else the root observation's or the trace's name.
source `langfuse`, system = the trace's name.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from masprism_batch.ingest import status
from masprism_batch.ingest.common import Context, IngestError, check_trace_id, short
from masprism_batch.ingest.context import attr_inputs, input_messages, with_context
from masprism_batch.ingest.envelopes import maybe_json, output_text, value_text
from masprism_batch.ingest.genai_attrs import agent_name, llm_output, tool_text
from masprism_batch.ingest.messages import join, question_of
from masprism_batch.ingest.otel_genai import tool_of
from masprism_batch.ingest.spantree import Node, build_steps, parse_time
from masprism_batch.trace import Trace

OBS_TYPES = {"GENERATION", "SPAN", "EVENT", "AGENT", "TOOL", "CHAIN", "RETRIEVER", "EMBEDDING", "EVALUATOR",
             "GUARDRAIL"}
STEP_KINDS = {"LLM": "llm", "TOOL": "tool", "EVENT": "other"}


def is_observation(d: Any) -> bool:
    return isinstance(d, dict) and str(d.get("type", "")).upper() in OBS_TYPES and "traceId" in d


def is_trace(d: Any) -> bool:
    return isinstance(d, dict) and isinstance(d.get("observations"), list) and "id" in d


def _obs_attrs(o: dict) -> dict[str, Any]:
    """Observation metadata as one flat map: its keys plus the OTel span attributes under `attributes`."""
    meta = maybe_json(o.get("metadata"))
    if not isinstance(meta, dict):
        return {}
    inner = meta.get("attributes")
    return {**meta, **inner} if isinstance(inner, dict) else meta


def _status(o: dict) -> str:
    """A WARNING's message as `WARNING: msg`; an ERROR as `status.error_text` renders it (`Error: msg`)."""
    msg = o.get("statusMessage")
    if str(o.get("level", "")).upper() == "ERROR":
        return status.error_text(msg if isinstance(msg, str) and msg.strip() else "observation level ERROR")
    return f"{o.get('level')}: {msg}" if isinstance(msg, str) and msg and o.get("level") == "WARNING" else ""


def _error(o: dict) -> str:
    return _status(o) if str(o.get("level", "")).upper() == "ERROR" else ""


def _graph_node(a: dict[str, Any]) -> str | None:
    node = a.get("langgraph_node")
    return node if isinstance(node, str) and node and not node.startswith("__") else None


def _is_router(o: dict, a: dict[str, Any], name: str | None, called: set[str]) -> bool:
    """A childless LangGraph span that is no graph node and no tool the model called: control flow."""
    return "langgraph_node" in a and name != _graph_node(a) and name not in called and str(o.get("type")).upper() == "SPAN"


_CALLED = re.compile(r"^Tool call: ([^(\n]{1,200})\(", re.M)


def _inputs(o: dict, a: dict[str, Any]) -> list[dict]:
    """A generation's input history; a Responses object's `instructions` (kept only in the output) first."""
    msgs = input_messages(o.get("input")) or attr_inputs(a)
    out = maybe_json(o.get("output"))
    if isinstance(out, dict) and isinstance(out.get("instructions"), str) and not any(
            m["role"] == "system" for m in msgs):
        msgs = input_messages({"instructions": out["instructions"]}) + msgs
    return msgs


def _nodes(obs: list[dict], trace_name: str | None) -> tuple[list[Node], dict[str, list[dict]]]:
    by_id = {str(o["id"]): o for o in obs}
    kids: dict[str, list[str]] = {}
    for o in obs:
        if o.get("parentObservationId") not in (None, "", "None"):
            kids.setdefault(str(o["parentObservationId"]), []).append(str(o["id"]))
    attrs = {oid: _obs_attrs(o) for oid, o in by_id.items()}
    nodes: dict[str, Node] = {}
    inputs: dict[str, list[dict]] = {}
    for oid, o in by_id.items():  # generations first: the tools they call decide which spans are tools
        if str(o.get("type")).upper() != "GENERATION":
            continue
        n = _node(o, trace_name)
        pid = n.parent
        if pid is not None and str(by_id.get(pid, {}).get("type", "")).upper() == "GENERATION":
            # an instrumentation's copy of its parent generation: one step; its input read if the parent's is not
            if not inputs.get(pid):
                inputs[pid] = _inputs(o, attrs[oid])
            continue
        inputs[oid] = inputs.get(oid) or _inputs(o, attrs[oid])
        text = output_text(o.get("output")) or llm_output(attrs[oid], [])
        if not text and o.get("output") is None and not _status(o):
            continue  # a stream's lifecycle record (BeeAI `chat.start-14`): no call's answer, no step
        n.kind, n.role, n.content = "LLM", "assistant", join(text, _status(o))
        nodes[oid] = n
    called = {m.group(1).strip() for n in nodes.values() for m in _CALLED.finditer(n.content)}
    for oid, o in by_id.items():
        if oid in nodes or str(o.get("type")).upper() == "GENERATION":
            continue
        typ, a, n = str(o.get("type")).upper(), attrs[oid], _node(o, trace_name)
        name = n.name
        children = kids.get(oid, [])
        if typ in ("TOOL", "RETRIEVER") or (typ == "SPAN" and not children and o.get("output") is not None
                                            and not _is_router(o, a, name, called)):
            n.kind, n.role = "TOOL", "tool"
            n.content = join(tool_text(a, [], name, o.get("input"), o.get("output")), _status(o))
            n.agent_name = _graph_node(a)
        elif typ == "EVENT":
            body = o.get("output") if o.get("output") is not None else o.get("input")
            n.kind, n.role = "EVENT", "event"
            n.content = join(f"Event: {name or '?'}", value_text(body) if body is not None else "", _status(o))
        elif typ in ("SPAN", "AGENT", "CHAIN"):
            n.kind = "AGENT"
            n.agent_name = _agent_of(typ, a, name, n.parent is None,
                                     [str(by_id[k].get("type")).upper() for k in children if k in by_id])
        else:
            n.kind = typ
        nodes[oid] = n
    return [nodes[oid] for oid in by_id if oid in nodes], inputs


def _agent_of(typ: str, a: dict[str, Any], name: str | None, root: bool, child_types: list[str]) -> str | None:
    """The agent a SPAN / AGENT / CHAIN observation names, or None when it is only structure."""
    named = agent_name(a, name)
    if named:
        return named
    if "langgraph_node" in a:  # inside a graph only its nodes are agents
        return _graph_node(a) if name == _graph_node(a) else None
    if housekeeping(name):
        return None  # a framework's internal span name, never an agent's
    if typ == "AGENT" or root:
        return name[:-4] if name and name.endswith(".run") else name
    if child_types and all(t in ("TOOL", "RETRIEVER") for t in child_types):
        return None  # a wrapper that runs tool calls (pydantic-ai `running 3 tools`)
    return name


# internal span names: ids (`run.<uuid>`, `agent.<uuid>`), counters (`agent.react.start-4`, `iteration-1`)
_HOUSEKEEPING = re.compile(r"(?:^|[.\-_ ])[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-|^iteration-\d+$|^[a-z_]+(?:\.[a-z_]+)+-\d+$")


def housekeeping(name: str | None) -> bool:
    return bool(name) and _HOUSEKEEPING.search(name) is not None


def _node(o: dict, trace_name: str | None) -> Node:
    name = o.get("name") if isinstance(o.get("name"), str) else None
    parent = o.get("parentObservationId")
    return Node(id=str(o["id"]), parent=str(parent) if parent not in (None, "", "None") else None, name=name,
                start=parse_time(o.get("startTime")), service=trace_name, error=_error(o))


def _fold_bare_events(steps: list) -> list:
    """An EVENT with nothing but its name is no action: its `Event: name` line joins the step before it."""
    out: list = []
    for s in steps:
        if s.kind == "other" and out and "\n" not in s.content and s.content.startswith("Event: "):
            out[-1].content = join(out[-1].content, s.content)
        else:
            out.append(s)
    return out


def _trace(head: dict, observations: list, ctx: Context) -> Trace:
    raw_tid = head.get("id")
    if raw_tid is None:
        raise IngestError("invalid_record", "trace.id is missing (a Langfuse trace needs 'id')")
    tid = check_trace_id(str(raw_tid))
    obs = []
    for i, o in enumerate(observations):
        if isinstance(o, str):
            raise IngestError("invalid_record", "observations are ids only (the trace list API); export each "
                              "trace with GET /api/public/traces/{id} to get full observations", tid)
        if not isinstance(o, dict) or o.get("id") in (None, "") or str(o.get("type", "")).upper() not in OBS_TYPES:
            bad = "id" if isinstance(o, dict) and o.get("id") in (None, "") else "type"
            raise IngestError("invalid_record", f"observations[{i}].{bad} is not a Langfuse observation's (needs "
                              f"'id' and 'type' in {sorted(OBS_TYPES)}): {short(o, 120)}", tid)
        obs.append(o)
    name = head.get("name") if isinstance(head.get("name"), str) else None
    nodes, inputs = _nodes(obs, name)
    steps, facts = build_steps(nodes, tid, STEP_KINDS,
                               root_agent=lambda r: None if housekeeping(r.service or r.name) else r.service or r.name)
    for s in steps:  # no agent named anywhere above: the model speaks as `assistant`, a tool as itself
        if s.agent is None:
            s.agent = "assistant" if s.kind == "llm" else tool_of(s.content)
    steps = _fold_bare_events(steps)
    task = question_of(maybe_json(head.get("input")))
    if task is None and "input" not in head:  # a server download keeps no trace object: its root's input
        task = next((q for o in obs if o.get("parentObservationId") in (None, "", "None")
                     and (q := question_of(maybe_json(o.get("input"))))), None)
    steps, question = with_context(steps, inputs, task, task_step=task is not None)
    if not steps:
        raise IngestError("empty_trace", f"no GENERATION, TOOL or EVENT observations among {len(obs)}", tid)
    if facts["n_duplicate_spans_dropped"]:
        ctx.warn("duplicate_span", f"{facts['n_duplicate_spans_dropped']} exact copies of observations dropped", tid)
    facts["format"] = "langfuse"
    for k in ("sessionId", "userId"):
        if isinstance(head.get(k), str):
            facts[k] = head[k]
    if scores := status.recorded_scores(head):  # a run graded in Langfuse: `--outcome-name` reads them
        facts["scores"] = scores
    return Trace(trace_id=tid, source="langfuse", system=name, question=question,
                 steps=steps, labels=None, metadata=facts, run_status=status.of_langfuse(head, obs))


def is_download(d: Any) -> bool:
    """The UI download `{"trace", "observations"}` or the server download `{"observations", "scores"}`."""
    return isinstance(d, dict) and isinstance(d.get("observations"), list) and (
        isinstance(d.get("trace"), dict) or "scores" in d) and "id" not in d


def parse_docs(docs: list, ctx: Context) -> Iterator[Trace]:
    """Traces and/or bare observations of one input, grouped by trace id."""
    traces: list[dict] = []
    loose: dict[str, list[dict]] = {}
    for i, d in enumerate(docs):
        if isinstance(d, dict) and isinstance(d.get("data"), list):
            docs.extend(d["data"])  # list API page: its items are handled as they come
            continue
        if is_download(d):
            if isinstance(d.get("trace"), dict):
                traces.append({**d["trace"], "observations": d["observations"]})
            else:
                docs.extend(d["observations"])
            continue
        if is_trace(d):
            traces.append(d)
        elif is_observation(d):
            loose.setdefault(str(d["traceId"]), []).append(d)
        else:
            ctx.reject(IngestError("invalid_record", f"record {i + 1} is neither a Langfuse trace (with "
                                   "'observations'), a download ({'trace', 'observations'}) nor an observation "
                                   f"(with 'traceId' and 'type'): {short(d, 120)}", f"record {i + 1}"))
    if not traces and not loose and not docs:
        raise IngestError("empty_trace", "no traces or observations in the Langfuse export")
    for t in traces:
        tid = str(t.get("id"))
        try:
            yield _trace(t, list(t["observations"]) + loose.pop(tid, []), ctx)
        except Exception as e:  # noqa: BLE001 - any failure is this trace's rejection, the file goes on
            ctx.reject_any(e, short(tid, 200))
    for tid, obs in loose.items():
        try:
            yield _trace({"id": tid}, obs, ctx)
        except Exception as e:  # noqa: BLE001 - any failure is this trace's rejection, the file goes on
            ctx.reject_any(e, short(tid, 200))


def parse(doc: Any, ctx: Context) -> Iterator[Trace]:
    if not isinstance(doc, (dict, list)):
        raise IngestError("invalid_record", f"a Langfuse export is a trace object or a list, got {type(doc).__name__}")
    yield from parse_docs(list(doc) if isinstance(doc, list) else [doc], ctx)

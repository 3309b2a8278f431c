"""OpenHands event streams (`--format openhands`): a list of events, one trace per file, source `openhands`.

An event (OpenHands' `event_to_dict`, as in its trajectory files and `/api/.../trajectory` downloads):
`{"id", "timestamp", "source": "user"|"agent"|"environment", "message", "action": "message"|"run"|"edit"|
"finish"|..., "args": {...}, "tool_call_metadata": {"function_name", "tool_call_id", "model_response"}}` or
an observation `{"id", "source", "observation": "run"|"edit"|"error"|..., "content", "extras", "cause"}`.
Also read: `{"history": [events]}` / `{"trajectory": [events]}`.

Steps in event order. An action speaks as its `source` (`agent`, `user`): its thought, its message, and the
tool call it makes (`Tool call: name(arguments)`, arguments from the model's own tool call when
`tool_call_metadata.model_response` holds it, else from `args`). An observation speaks as `environment`
(kind `tool`): its content (`message`, else `extras`, when the content is empty). State changes
(`change_agent_state`, `agent_state_changed`) and `null` observations are bookkeeping, not steps. Trace id =
`openhands/<file stem>` (ingest adds the run's digest: run_ids.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from masprism_batch.ingest import status
from masprism_batch.ingest.common import Context, IngestError
from masprism_batch.ingest.messages import (
    content_text,
    dumps,
    join,
    require_list,
    require_obj,
    tool_call_line,
)
from masprism_batch.ingest.sources import base_name
from masprism_batch.trace import Step, Trace

_QUIET_ARGS = {"thought", "content", "image_urls", "wait_for_response", "outputs", "security_risk"}
# bookkeeping events, not steps: the controller's state changes and the placeholder observation
_SKIP = {"change_agent_state", "agent_state_changed", "null"}


def is_event(e: Any) -> bool:
    return isinstance(e, dict) and isinstance(e.get("source"), str) and ("action" in e or "observation" in e)


def events_of(doc: Any) -> list | None:
    if isinstance(doc, dict):
        doc = doc.get("history", doc.get("trajectory"))
    if isinstance(doc, list) and any(is_event(e) for e in doc[:16]):
        return doc
    return None


def _model_call(meta: dict) -> dict | None:
    """The tool call the model made for this action, from the stored model response."""
    resp = meta.get("model_response") if isinstance(meta.get("model_response"), dict) else {}
    choices = resp.get("choices") if isinstance(resp.get("choices"), list) else []
    msg = choices[0].get("message") if choices and isinstance(choices[0], dict) else None
    calls = msg.get("tool_calls") if isinstance(msg, dict) and isinstance(msg.get("tool_calls"), list) else []
    for c in calls:
        if isinstance(c, dict) and (c.get("id") == meta.get("tool_call_id") or len(calls) == 1):
            return c
    return None


def _action_text(e: dict, i: int, tid: str) -> str:
    args = e.get("args") if e.get("args") is not None else {}
    if not isinstance(args, dict):
        raise IngestError("invalid_record", f"events[{i}].args must be an object, got {type(args).__name__}", tid)
    thought = content_text(args.get("thought"))
    said = content_text(e.get("message")) if e.get("action") != "message" else content_text(
        args.get("content") or e.get("message"))
    meta = e.get("tool_call_metadata") if isinstance(e.get("tool_call_metadata"), dict) else None
    call = ""
    if meta is not None:
        mc = _model_call(meta)
        call = tool_call_line(mc) if mc else tool_call_line(
            {"name": meta.get("function_name"), "arguments": {k: v for k, v in args.items() if k not in _QUIET_ARGS}})
    elif e.get("action") not in ("message", "finish", "system", "recall"):
        rest = {k: v for k, v in args.items() if k not in _QUIET_ARGS}
        call = f"Action: {e.get('action')}" + (f" {dumps(rest)}" if rest else "")
    if said == thought:
        said = ""
    return join(thought, said, call)


def parse(doc: Any, ctx: Context) -> Iterator[Trace]:
    events = events_of(doc)
    tid = f"openhands/{base_name(ctx.input_path)}"
    events = require_list(events if events is not None else doc, "the event list", tid)
    steps: list[Step] = []
    question = None
    for i, e in enumerate(events):
        e = require_obj(e, f"events[{i}]", tid)
        src = e.get("source")
        if not isinstance(src, str):
            raise IngestError("invalid_record", f"events[{i}].source must be a string (agent, user, environment), "
                              f"got {dumps(src)[:40]}", tid)
        what = e.get("action", e.get("observation"))
        if isinstance(what, str) and what in _SKIP:
            continue
        if "observation" in e:
            extras = e.get("extras") if isinstance(e.get("extras"), dict) else {}
            text = content_text(e.get("content")) or content_text(e.get("message")) or (
                dumps({k: v for k, v in extras.items() if k != "metadata"}) if extras else "")
            agent = "user" if src == "user" else "environment"
            steps.append(Step(index=len(steps), agent=agent, content=join(f"Observation ({e['observation']}):", text)
                              if text else "", role="tool", kind="tool"))
        elif "action" in e:
            text = _action_text(e, i, tid)
            if src == "user" and question is None and text:
                question = text
            steps.append(Step(index=len(steps), agent=src, content=text,
                              role="user" if src == "user" else "assistant", kind="message"))
        else:
            raise IngestError("invalid_record", f"events[{i}] has neither 'action' nor 'observation'", tid)
    yield Trace(trace_id=tid, source="openhands", system="openhands", question=question, steps=steps,
                labels=None, metadata={"format": "openhands", "n_events": len(events)},
                run_status=status.of_openhands(events))

"""Letta / MemGPT agent files (`.af`, letta-ai/agent-file; `--format letta`, source `letta`): one agent's state
with its message history, `{name, agent_type, system, llm_config, core_memory, tools, messages: [{role,
content: [{type: text, text}] | text, tool_calls, tool_call_id, name, created_at}], in_context_message_indices}`,
or the newer `{"agents": [that], "blocks", "tools", ...}`. Some exports hold the document JSON-encoded once more.

One trace per agent (every agent of `{"agents": [...]}`; agents of one file sharing a name get `#<n>`, their place
in the list; an agent that cannot be read is its own row), messages in `created_at` order (a message of an
unexpected shape is its own `invalid_record` row, the agent's others are read):
- `system`: the agent's system prompt, re-rendered with its memory before every step: kept once (the first);
  a later system message that is a re-render (same opening) is skipped, counted in metadata `skipped_messages`;
- `user`: Letta wraps every input in a JSON envelope: `user_message` becomes a `user` step with its `message`;
  `login` and `heartbeat` (the client's login notice, the automatic continuation after a tool call) are skipped
  by name (counted); a `system_alert` speaks as `system`;
- `assistant`: the inner monologue as `Reasoning:` plus one `Tool call:` line per call (`send_message` is how
  the agent talks to the user), one step, speaking as the agent (`name`);
- `tool`: the result speaks as the tool its `tool_call_id` names; `"status": "Failed"` fills `Step.error`.
question = the first `user_message`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

from masprism_batch.ingest.common import Context, IngestError, check_trace_id, loads
from masprism_batch.ingest.messages import content_text, join, tool_calls_text
from masprism_batch.ingest.sources import base_name
from masprism_batch.ingest.spantree import parse_time
from masprism_batch.ingest.status import error_text
from masprism_batch.trace import Step, Trace

SKIPPED_ENVELOPES = {"login", "heartbeat"}


def _agents(doc: Any) -> list | None:
    """Every agent of the file: the newer `{"agents": [...]}` holds several (each its own trace), the older
    shape is one agent."""
    if isinstance(doc, dict) and isinstance(doc.get("agents"), list) and any(
            isinstance(a, dict) and isinstance(a.get("messages"), list) for a in doc["agents"]):
        return doc["agents"]
    return [doc] if isinstance(doc, dict) else None


def _agent(doc: Any) -> dict | None:
    """The first agent (what detection looks at)."""
    return next((a for a in _agents(doc) or () if isinstance(a, dict) and isinstance(a.get("messages"), list)),
                doc if isinstance(doc, dict) else None)


def is_agent_file(doc: Any) -> bool:
    ag = _agent(doc)
    return ag is not None and isinstance(ag.get("messages"), list) and "llm_config" in ag and (
        "agent_type" in ag or "core_memory" in ag or "memory_blocks" in ag)


def unwrap(doc: Any) -> Any:
    """An export that holds the document as one JSON string."""
    if isinstance(doc, str) and doc.lstrip().startswith("{"):
        try:
            return loads(doc)  # bounded as the file's own parse is (limits.parsed_cost): refused before it builds
        except IngestError as e:
            if e.reason in ("invalid_json", "too_deep"):
                return doc
            raise
    return doc


def _text(m: dict) -> str:
    c = m.get("content")
    if c is None and isinstance(m.get("text"), str):
        c = m["text"]
    return content_text(c).strip()


def _json_obj(text: str) -> dict | None:
    if not text.startswith("{"):
        return None
    try:
        d = json.loads(text)
    except ValueError:
        return None
    return d if isinstance(d, dict) else None


def _envelope(text: str) -> dict | None:
    d = _json_obj(text)
    return d if d is not None and isinstance(d.get("type"), str) else None


def parse(doc: Any, ctx: Context) -> Iterator[Trace]:
    """One trace per agent of the file; an agent that cannot be read is its own row, the others go on."""
    agents = _agents(unwrap(doc))
    if agents is None:
        raise IngestError("invalid_record", "a Letta agent file holds an agent with a 'messages' list")
    tids: list[str] = []
    for ag in agents:
        name = ag.get("name") if isinstance(ag, dict) and isinstance(ag.get("name"), str) and ag["name"] else "agent"
        tids.append(f"letta/{name}" if name != "agent" else f"letta/{base_name(ctx.input_path)}")
    several, count = len(agents) > 1, Counter(tids)
    for k, (ag, tid) in enumerate(zip(agents, tids, strict=True)):
        if several and count[tid] > 1:  # agents of one file sharing a name: told apart by their place
            tid = f"{tid}#{k + 1}"
        where = f"agents[{k}]" if several else None
        try:
            if not isinstance(ag, dict) or not isinstance(ag.get("messages"), list):
                raise IngestError("invalid_record", f"{where or 'the file'}: a Letta agent holds a 'messages' list",
                                  where)
            yield _trace(ag, check_trace_id(tid), ctx)
        except Exception as e:  # noqa: BLE001 - one agent's failure is its row, the file's other agents go on
            if not several:
                raise
            ctx.reject_any(e, where)


def _trace(ag: dict, tid: str, ctx: Context) -> Trace:
    name = ag.get("name") if isinstance(ag.get("name"), str) and ag["name"] else "agent"
    msgs = [m for m in ag["messages"] if isinstance(m, dict)]
    msgs.sort(key=lambda m: (parse_time(m.get("created_at")) is None, str(m.get("created_at") or "")))
    calls = {str(c.get("id")): str((c.get("function") or {}).get("name") or "tool")
             for m in msgs if isinstance(m.get("tool_calls"), list) for c in m["tool_calls"]
             if isinstance(c, dict) and isinstance(c.get("function"), dict)}
    steps: list[Step] = []
    skipped: dict[str, int] = {}
    state: dict[str, Any] = {"system_head": None, "question": None}
    for i, m in enumerate(msgs):
        try:  # a message of an unexpected shape is its own row (`invalid_record`), the agent's others go on
            _message(m, name, calls, steps, skipped, state)
        except Exception as e:  # noqa: BLE001
            ctx.reject_any(e, f"{tid} message {i + 1}")
    if not steps:
        raise IngestError("empty_trace", "the agent file holds no messages", tid)
    meta: dict[str, Any] = {"format": "letta-agent-file", "agent_type": ag.get("agent_type")}
    if skipped:
        meta["skipped_messages"] = skipped
    return Trace(trace_id=tid, source="letta", system="letta", question=state["question"], steps=steps,
                 metadata=meta)


def _message(m: dict, name: str, calls: dict[str, str], steps: list[Step], skipped: dict[str, int],
             state: dict[str, Any]) -> None:
    role, text, when = m.get("role"), _text(m), parse_time(m.get("created_at"))
    if m.get("tool_calls") is not None and not isinstance(m["tool_calls"], (list, dict)):
        raise IngestError("invalid_record", f"'tool_calls' must be a list, got {type(m['tool_calls']).__name__}")
    if role == "system":
        if state["system_head"] is not None and text[:200] == state["system_head"]:
            skipped["system re-render"] = skipped.get("system re-render", 0) + 1
            return
        state["system_head"] = state["system_head"] or text[:200]
        steps.append(Step(index=len(steps), agent="system", content=text, role="system", kind="message",
                          start_time=when))
    elif role == "user":
        env = _envelope(text)
        kind = env.get("type") if env else None
        if kind in SKIPPED_ENVELOPES:
            skipped[kind] = skipped.get(kind, 0) + 1
            return
        body = content_text(env.get("message")).strip() if env and env.get("message") is not None else text
        who = "system" if kind == "system_alert" else "user"
        if who == "user" and state["question"] is None:
            state["question"] = body
        steps.append(Step(index=len(steps), agent=who, content=body or "(empty message)", role=who,
                          kind="message", start_time=when))
    elif role == "assistant":
        said = join(f"Reasoning: {text}" if text else "", tool_calls_text(m.get("tool_calls")))
        steps.append(Step(index=len(steps), agent=str(m.get("name") or name), content=said or "(empty message)",
                          role="assistant", kind="message", start_time=when))
    elif role == "tool":
        tool = calls.get(str(m.get("tool_call_id")), "tool")
        env = _json_obj(text) or {}
        msg = env.get("message")
        body = (content_text(msg) if msg not in (None, "None") else f"status: {env['status']}") if (
            "status" in env) else text  # the envelope's message; `send_message` returns only its status
        err = error_text(content_text(msg) or "tool failed") if str(
            env.get("status", "")).lower() in ("failed", "error") else None
        steps.append(Step(index=len(steps), agent=tool, content=join(body, err or "") or "(empty result)",
                          role="tool", kind="tool", start_time=when, error=err))
    else:  # a role this reader does not know (approvals, ...): counted, never dropped unsaid
        key = f"role {str(role)[:40]}"
        skipped[key] = skipped.get(key, 0) + 1

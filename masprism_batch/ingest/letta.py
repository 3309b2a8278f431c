"""Letta / MemGPT agent files (`.af`, letta-ai/agent-file; `--format letta`, source `letta`): one agent's state
with its message history, `{name, agent_type, system, llm_config, core_memory, tools, messages: [{role,
content: [{type: text, text}] | text, tool_calls, tool_call_id, name, created_at}], in_context_message_indices}`,
or the newer `{"agents": [that], "blocks", "tools", ...}`. Some exports hold the document JSON-encoded once more.

One trace per agent, messages in `created_at` order:
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
from collections.abc import Iterator
from typing import Any

from masprism_batch.ingest.common import Context, IngestError, check_trace_id
from masprism_batch.ingest.messages import content_text, join, tool_calls_text
from masprism_batch.ingest.sources import base_name
from masprism_batch.ingest.spantree import parse_time
from masprism_batch.ingest.status import error_text
from masprism_batch.trace import Step, Trace

SKIPPED_ENVELOPES = {"login", "heartbeat"}


def _agent(doc: Any) -> dict | None:
    if isinstance(doc, dict) and isinstance(doc.get("agents"), list) and doc["agents"] and isinstance(
            doc["agents"][0], dict) and isinstance(doc["agents"][0].get("messages"), list):
        return doc["agents"][0]
    return doc if isinstance(doc, dict) else None


def is_agent_file(doc: Any) -> bool:
    ag = _agent(doc)
    return ag is not None and isinstance(ag.get("messages"), list) and "llm_config" in ag and (
        "agent_type" in ag or "core_memory" in ag or "memory_blocks" in ag)


def unwrap(doc: Any) -> Any:
    """An export that holds the document as one JSON string."""
    if isinstance(doc, str) and doc.lstrip().startswith("{"):
        try:
            return json.loads(doc)
        except ValueError:
            return doc
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
    ag = _agent(unwrap(doc))
    if ag is None or not isinstance(ag.get("messages"), list):
        raise IngestError("invalid_record", "a Letta agent file holds an agent with a 'messages' list")
    name = ag.get("name") if isinstance(ag.get("name"), str) and ag["name"] else "agent"
    tid = check_trace_id(f"letta/{name}" if name != "agent" else f"letta/{base_name(ctx.input_path)}")
    msgs = [m for m in ag["messages"] if isinstance(m, dict)]
    msgs.sort(key=lambda m: (parse_time(m.get("created_at")) is None, str(m.get("created_at") or "")))
    calls = {str(c.get("id")): str((c.get("function") or {}).get("name") or "tool")
             for m in msgs for c in (m.get("tool_calls") or []) if isinstance(c, dict) and isinstance(c.get("function"), dict)}
    steps: list[Step] = []
    skipped: dict[str, int] = {}
    system_head, question = None, None
    for m in msgs:
        role, text, when = m.get("role"), _text(m), parse_time(m.get("created_at"))
        if role == "system":
            if system_head is not None and text[:200] == system_head:
                skipped["system re-render"] = skipped.get("system re-render", 0) + 1
                continue
            system_head = system_head or text[:200]
            steps.append(Step(index=len(steps), agent="system", content=text, role="system", kind="message",
                              start_time=when))
        elif role == "user":
            env = _envelope(text)
            kind = env.get("type") if env else None
            if kind in SKIPPED_ENVELOPES:
                skipped[kind] = skipped.get(kind, 0) + 1
                continue
            body = content_text(env.get("message")).strip() if env and env.get("message") is not None else text
            who = "system" if kind == "system_alert" else "user"
            if who == "user" and question is None:
                question = body
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
    if not steps:
        raise IngestError("empty_trace", "the agent file holds no messages", tid)
    meta: dict[str, Any] = {"format": "letta-agent-file", "agent_type": ag.get("agent_type")}
    if skipped:
        meta["skipped_messages"] = skipped
    yield Trace(trace_id=tid, source="letta", system="letta", question=question, steps=steps, metadata=meta)

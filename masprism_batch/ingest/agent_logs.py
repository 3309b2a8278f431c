"""Agent frameworks' own run logs that are message lists with their own conventions: smolagents agent memory
(`--format smolagents`) and mini-swe-agent trajectories (`--format mini-swe-agent`).

- smolagents: `agent.write_memory_to_messages()` (ToolCallingAgent and CodeAgent), as a list or under
  `messages`: roles `system`, `user` (the task as `New task:\\n...`), `assistant` (the model's output),
  `tool-call` (`Calling tools:\\n[{'id', 'type', 'function': {'name', 'arguments'}}]`, a Python repr) and
  `tool-response` (`Call id: ...\\nObservation:\\n...` or `Error:`); roles may be written `MessageRole.TOOL_CALL`;
  content is text or `[{"type": "text", "text"}]`. The model's output and its tool call are one action: one
  step, the call as `Tool call: name(arguments)`; a tool response speaks as the tool it answers.
- mini-swe-agent: `save_traj` files `{"info": {"exit_status", "submission", "model_stats", "config"},
  "messages": [...], "trajectory_format": "mini-swe-agent-1"}` (also the bare message list of its tests): after
  the task, `user` messages are the shell's observations (`<returncode>`, `<output>`): they speak as
  `environment` (kind `tool`); `exit_status` and the submission are kept in metadata.
question = the task (the first user message, without smolagents' `New task:` prefix).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Any

from masprism_batch.ingest.common import Context, IngestError
from masprism_batch.ingest.messages import content_text, dumps, join, tool_call_line
from masprism_batch.ingest.sources import base_name
from masprism_batch.trace import Step, Trace

SMOL_ROLES = {"tool-call", "tool-response"}
_CALL_ID = re.compile(r"^Call id: ?(\S+)\n", re.M)
_ERR_TOOL = re.compile(r"^Error:\s*Error (?:executing|when executing) tool '([^'\n]{1,100})'")
_MAX_REPR = 1_000_000  # a tool-call repr longer than this is shown as text, not evaluated


def _role(m: dict) -> str:
    r = str(m.get("role", ""))
    return r.split(".", 1)[1].lower().replace("_", "-") if r.startswith("MessageRole.") else r


def is_smolagents(msgs: Any) -> bool:
    return isinstance(msgs, list) and any(isinstance(m, dict) and _role(m) in SMOL_ROLES for m in msgs[:64])


def is_mini_swe(doc: Any) -> bool:
    if isinstance(doc, dict):
        fmt = doc.get("trajectory_format")
        return isinstance(doc.get("messages"), list) and (
            isinstance(fmt, str) and fmt.startswith("mini-swe-agent") or
            isinstance(doc.get("info"), dict) and "exit_status" in doc["info"] and "mini_version" in doc["info"])
    return isinstance(doc, list) and any(  # the bare list of its tests: observations in <returncode> tags
        isinstance(m, dict) and m.get("role") == "user" and str(m.get("content", "")).startswith("<returncode>")
        for m in doc[2:64])


def _calls(text: str) -> list[tuple[str | None, str]]:
    """smolagents' `Calling tools:\\n[...]` -> [(call id, `Tool call:` line)]; the raw text when unreadable."""
    body = text.split("\n", 1)[1] if text.startswith("Calling tools:") else text
    try:
        calls = ast.literal_eval(body.strip()) if len(body) <= _MAX_REPR else None
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        calls = None
    if not isinstance(calls, list):
        return [(None, text)]
    return [(c.get("id") if isinstance(c, dict) else None, tool_call_line(c)) for c in calls]


def smolagents_trace(msgs: list, tid: str) -> Trace:
    steps: list[Step] = []
    names: dict[str, str] = {}
    question = None
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise IngestError("invalid_record", f"messages[{i}] must be an object, got {type(m).__name__}", tid)
        role, text = _role(m), content_text(m.get("content")).strip()
        if role == "tool-call":
            calls = _calls(text)
            for cid, line in calls:
                if cid:
                    names[str(cid)] = line[len("Tool call: "):].split("(", 1)[0]
            line = "\n".join(c for _, c in calls)
            if steps and steps[-1].role == "assistant":  # the model's output and its call: one action
                steps[-1].content = join(steps[-1].content, line)
            else:
                steps.append(Step(index=len(steps), agent="agent", content=line, role="assistant", kind="message"))
        elif role == "tool-response":
            cid = _CALL_ID.match(text)
            tool = names.get(cid.group(1)) if cid else None
            named = _ERR_TOOL.search(text[:300]) if not tool else None  # an error before any recorded call
            tool = tool or (named.group(1) if named else None) or (next(reversed(names.values())) if names else "tool")
            steps.append(Step(index=len(steps), agent=tool, content=text or "(empty result)", role="tool", kind="tool"))
        elif role in ("system", "user", "assistant"):
            if not text:
                continue
            if role == "user" and question is None:
                question = text.removeprefix("New task:").strip()
            agent = {"assistant": "agent"}.get(role, role)
            steps.append(Step(index=len(steps), agent=agent, content=text, role=role, kind="message"))
        else:
            raise IngestError("invalid_record", f"messages[{i}].role {dumps(m.get('role'))[:40]} is not a smolagents "
                              "role (system, user, assistant, tool-call, tool-response)", tid)
    if not steps:
        raise IngestError("empty_trace", "no messages with text", tid)
    return Trace(trace_id=tid, source="smolagents", system="smolagents", question=question, steps=steps,
                 labels=None, metadata={"format": "smolagents-memory"})


def mini_swe_trace(doc: Any, tid: str) -> Trace:
    msgs = doc.get("messages") if isinstance(doc, dict) else doc
    info = doc.get("info") if isinstance(doc, dict) and isinstance(doc.get("info"), dict) else {}
    steps: list[Step] = []
    question, said = None, False
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise IngestError("invalid_record", f"messages[{i}] must be an object, got {type(m).__name__}", tid)
        role, text = str(m.get("role")), content_text(m.get("content")).strip()
        if role == "assistant":
            said = True
            text = join(text, "\n".join(tool_call_line(c) for c in m.get("tool_calls") or [] if isinstance(c, dict)))
            steps.append(Step(index=len(steps), agent="mini-swe-agent", content=text, role="assistant", kind="message"))
        elif role in ("user", "tool") and said:  # the shell's answer to the last command
            if not text and steps and steps[-1].role == "assistant":
                steps[-1].content = join(steps[-1].content, "Output: (empty)")
                continue
            steps.append(Step(index=len(steps), agent="environment", content=text or "(empty output)", role="tool",
                              kind="tool"))
        elif role in ("system", "user") and text:
            question = question or (text if role == "user" else None)
            steps.append(Step(index=len(steps), agent=role, content=text, role=role, kind="message"))
        elif role == "exit" and text:
            steps.append(Step(index=len(steps), agent="environment", content=f"Exit: {text}", role="tool",
                              kind="other"))
    if not steps:
        raise IngestError("empty_trace", "no messages with text", tid)
    meta: dict[str, Any] = {"format": "mini-swe-agent"}
    for k in ("exit_status", "submission", "mini_version"):
        if isinstance(info.get(k), str):
            meta[k] = info[k]
    model = (info.get("config") or {}).get("model") if isinstance(info.get("config"), dict) else None
    if isinstance(model, dict) and isinstance(model.get("model_name"), str):
        meta["model"] = model["model_name"]
    return Trace(trace_id=tid, source="mini-swe-agent", system="mini-swe-agent", question=question, steps=steps,
                 labels=None, metadata=meta)


def trace_id(ctx: Context, kind: str, line: int | None = None) -> str:
    """The id of the run a smolagents / mini-swe-agent document holds: its kind, file stem and line."""
    stem = base_name(ctx.input_path).removesuffix(".traj")
    return f"{kind}/{stem}" + (f"#{line}" if line is not None else "")


def parse(doc: Any, ctx: Context, kind: str, line: int | None = None) -> Iterator[Trace]:
    """A smolagents memory or a mini-swe-agent trajectory (a runner's output line goes to smolagents_runs:
    ingest/documents.py routes it)."""
    tid = trace_id(ctx, kind, line)
    if kind == "mini-swe-agent":
        yield mini_swe_trace(doc, tid)
        return
    msgs = doc.get("messages") if isinstance(doc, dict) else doc
    if not isinstance(msgs, list):
        raise IngestError("invalid_record", "smolagents memory is a list of messages (or {'messages': [...]})", tid)
    yield smolagents_trace(msgs, tid)

"""SWE-agent trajectories (`.traj`, `--format swe-agent`): one file is one trace, source `swe-agent`.

A `.traj` is `{"history": [...], "trajectory": [...], "info": {...}, "environment": ...}` (demonstrations keep
only `history`). `history` messages: `{"role": "system"|"user"|"assistant"|"tool", "content", "agent",
"message_type": "system_prompt"|"observation"|"action"|..., "thought"?, "action"?, "tool_calls"?,
"tool_call_ids"?}`. Without `history`, the `trajectory` items (`{"thought", "action", "observation",
"response"}`) are read instead: one assistant step (thought + action) and one observation step each.

Steps in order. An assistant step is its text, then one `Tool call: name(arguments)` line per tool call (or
`Action: ...` when the model wrote the command as text); a tool observation's agent is the tool it answers
(by `tool_call_ids`), else `environment`; other messages speak as their `agent` (`main`), else their role.
Trace id = `swe-agent/<file stem>` (ingest adds the run's digest: run_ids.py); `info.exit_status` / `info.submission` presence go to metadata.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from masprism_batch.ingest import status
from masprism_batch.ingest.common import Context, IngestError
from masprism_batch.ingest.messages import (
    content_text,
    join,
    opt_str,
    require_list,
    require_obj,
    tool_calls_text,
)
from masprism_batch.ingest.sources import base_name
from masprism_batch.trace import Step, Trace


def is_traj(doc: Any) -> bool:
    if not isinstance(doc, dict):
        return False
    if isinstance(doc.get("trajectory"), list) and ("info" in doc or "history" in doc):
        return True
    hist = doc.get("history")
    return isinstance(hist, list) and any(isinstance(m, dict) and "message_type" in m for m in hist[:16])


def _history_steps(hist: list, tid: str) -> list[Step]:
    steps: list[Step] = []
    call_names: dict[str, str] = {}
    for i, m in enumerate(hist):
        m = require_obj(m, f"history[{i}]", tid)
        role = opt_str(m.get("role"), f"history[{i}].role", tid)
        if role is None:
            raise IngestError("invalid_record", f"history[{i}].role is missing", tid)
        agent = opt_str(m.get("agent"), f"history[{i}].agent", tid)
        calls = m.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            raise IngestError("invalid_record", f"history[{i}].tool_calls must be a list", tid)
        for c in calls or []:
            if isinstance(c, dict) and isinstance(c.get("id"), str) and isinstance(c.get("function"), dict):
                call_names[c["id"]] = str(c["function"].get("name") or "tool")
        text = content_text(m.get("content"))
        if role == "assistant":
            action = m.get("action") if isinstance(m.get("action"), str) else ""
            text = join(text or content_text(m.get("thought")), tool_calls_text(calls) or (
                f"Action: {action}" if action.strip() and action not in text else ""))
            steps.append(Step(index=len(steps), agent=agent or role, content=text, role=role, kind="message"))
        elif role == "tool":
            ids = m.get("tool_call_ids") if isinstance(m.get("tool_call_ids"), list) else []
            tool = next((call_names[c] for c in ids if isinstance(c, str) and c in call_names), "environment")
            steps.append(Step(index=len(steps), agent=tool, content=text, role=role, kind="tool"))
        else:
            steps.append(Step(index=len(steps), agent=role if role in ("system", "user") else agent or role,
                              content=text, role=role, kind="message"))
    return steps


def _trajectory_steps(traj: list, tid: str) -> list[Step]:
    steps: list[Step] = []
    for i, t in enumerate(traj):
        t = require_obj(t, f"trajectory[{i}]", tid)
        said = join(content_text(t.get("thought")) or content_text(t.get("response")),
                    f"Action: {t['action']}" if isinstance(t.get("action"), str) and t["action"].strip() else "")
        steps.append(Step(index=len(steps), agent="main", content=said, role="assistant", kind="message"))
        if t.get("observation") is not None:
            steps.append(Step(index=len(steps), agent="environment", content=content_text(t["observation"]),
                              role="tool", kind="tool"))
    return steps


def parse(doc: Any, ctx: Context) -> Iterator[Trace]:
    doc = require_obj(doc, "a SWE-agent trajectory", None)
    tid = f"swe-agent/{base_name(ctx.input_path)}"
    if isinstance(doc.get("history"), list) and doc["history"]:
        hist = require_list(doc["history"], "history", tid)
        steps = _history_steps(hist, tid)
        first_user = next((m for m in hist if isinstance(m, dict) and m.get("role") == "user"), {})
    else:
        steps = _trajectory_steps(require_list(doc.get("trajectory"), "trajectory", tid), tid)
        first_user = {}
    meta: dict[str, Any] = {"format": "swe-agent"}
    info = doc.get("info") if isinstance(doc.get("info"), dict) else {}
    if isinstance(info.get("exit_status"), str):
        meta["exit_status"] = info["exit_status"]
    if info.get("submission") is not None:
        meta["submitted"] = True
    question = content_text(first_user.get("content")) or None
    yield Trace(trace_id=tid, source="swe-agent", system="swe-agent", question=question, steps=steps,
                labels=None, metadata=meta, run_status=status.of_exit_status(info.get("exit_status")))

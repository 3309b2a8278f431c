"""τ-bench trajectories (`--format tau-bench`): result files and JSON lines, source `tau-bench`.

- A result file (`run.py`'s checkpoint, `historical_trajectories/*.json`): a list of
  `{"task_id", "reward", "info", "traj": [Chat Completions messages], "trial"}`; one trace per item. The
  reward, task id and trial are kept as trace attributes (metadata `reward`, `task_id`, `trial`).
- JSON lines: one such result per line, or the few-shot files' `{"messages_display": "user: ...\\nassistant:
  ...\\ntool: ..."}` transcripts (a line starting `user: `, `assistant: `, `tool: ` or `system: ` opens a
  message; other lines continue it). `assistant: None` is a tool call the transcript does not show.

Steps: `traj` through the OpenAI message reader (tool results speak as their tool); in transcripts the
speaker is the prefix. The simulated customer is agent `user`. Trace id = `tau-bench/<file stem>#<n>/task-<id>`
(`n`: position in the file), `#<line>` for transcripts; ingest names the run by its content (run_ids.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from masprism_batch.ingest import status
from masprism_batch.ingest.common import Context, IngestError
from masprism_batch.ingest.messages import question_of, require_list
from masprism_batch.ingest.openai_chat import chat_steps
from masprism_batch.ingest.sources import base_name
from masprism_batch.trace import Step, Trace

_SPEAKER = re.compile(r"^(user|assistant|tool|system): ?", re.M)


def is_result(d: Any) -> bool:
    return isinstance(d, dict) and "traj" in d and ("reward" in d or "task_id" in d)


def is_transcript(d: Any) -> bool:
    return isinstance(d, dict) and isinstance(d.get("messages_display"), str)


def _result_trace(d: dict, tid: str) -> Trace:
    traj = require_list(d.get("traj"), "traj", tid)
    steps = chat_steps(traj, tid, "traj")
    meta: dict[str, Any] = {"format": "tau-bench"}
    for k in ("task_id", "reward", "trial"):
        if isinstance(d.get(k), (int, float, str)) and not isinstance(d.get(k), bool):
            meta[k] = d[k]
    info = d.get("info") if isinstance(d.get("info"), dict) else {}
    task = info.get("task") if isinstance(info.get("task"), dict) else {}
    if isinstance(task.get("user_id"), str):
        meta["user_id"] = task["user_id"]
    return Trace(trace_id=tid, source="tau-bench", system="tau-bench", question=question_of(traj), steps=steps,
                 labels=None, metadata=meta, run_status=status.of_reward(d.get("reward")))


def _transcript_trace(text: str, tid: str) -> Trace:
    marks = list(_SPEAKER.finditer(text))
    if not marks:
        raise IngestError("invalid_record", "messages_display has no 'user: ' / 'assistant: ' / 'tool: ' line", tid)
    steps = []
    for j, m in enumerate(marks):
        body = text[m.end():marks[j + 1].start() if j + 1 < len(marks) else len(text)].rstrip("\n")
        role = m.group(1)
        if role == "assistant" and body.strip() == "None":
            body = "Tool call (not shown in messages_display)"
        elif role == "tool" and not body.strip():
            if steps and steps[-1].role == "assistant":  # an empty result is named in its call's step, no step
                steps[-1].content += "\nTool result: (empty)"
                continue
            body = "[the tool returned nothing]"  # said, so the step is not blank text
        steps.append(Step(index=len(steps), agent=role, content=body, role=role,
                          kind="tool" if role == "tool" else "message"))
    question = next((s.content for s in steps if s.role == "user"), None)
    return Trace(trace_id=tid, source="tau-bench", system="tau-bench", question=question, steps=steps,
                 labels=None, metadata={"format": "tau-bench-transcript"})


def parse(doc: Any, ctx: Context, line: int | None = None) -> Iterator[Trace]:
    stem = base_name(ctx.input_path)
    if is_transcript(doc):
        yield _transcript_trace(doc["messages_display"], f"tau-bench/{stem}#{line or 1}")
        return
    items = doc if isinstance(doc, list) else [doc]
    for i, d in enumerate(items):
        n = line if line is not None else i
        tid = f"tau-bench/{stem}#{n}/task-{d.get('task_id') if isinstance(d, dict) else '?'}"
        try:
            if not isinstance(d, dict) or "traj" not in d:
                raise IngestError("invalid_record", f"results[{i}].traj is missing (a τ-bench result needs "
                                  "'task_id', 'reward' and 'traj')", tid)
            yield _result_trace(d, tid)
        except Exception as e:  # noqa: BLE001 - any failure is this result's rejection
            if line is not None or not isinstance(doc, list):
                raise
            ctx.reject_any(e, tid)

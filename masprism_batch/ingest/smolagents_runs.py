"""smolagents' own benchmark outputs (`--format smolagents`, source `smolagents`):

- **Benchmark runner lines** (`examples/smolagents_benchmark/run.py`, `open_deep_research`): one run per JSON
  line, `{model_id, agent_action_type, question, original_question, answer, true_answer, source,
  intermediate_steps, start_time, end_time, token_counts}`. `intermediate_steps` is the agent's memory as
  `write_memory_to_messages()` writes it (read as smolagents memory: `agent_logs.smolagents_trace`), the
  model's bare answer (a string: `agent_action_type` "vanilla", no agent), or step reprs (`SystemPromptStep(...)`,
  `TaskStep(...)`, `ActionStep(...)`: older runner versions; `ChatMessage(...)` reprs: open_deep_research), one
  step each; none (the run raised: `intermediate_steps: []`, the exception in `answer` / `agent_error`): the task
  and one step with the error (run failed). question = the line's `question`; answer, true answer, data source,
  model and action type in metadata. A tool response that is smolagents' `Error:` block fills the step's
  `error` (`status.error_text`); `agent_error` or `iteration_limit_exceeded` makes the run failed.
- **Decentralized message bus** (`examples/decentralized_smolagents_benchmark`, `runs/<id>/messages.jsonl`):
  one message per line `{id, timestamp, sender, type, content, recipients, thread_id, reply_to}`, one run per
  file. One step per message, speaking as its `sender`: the `task` (from `system`) is the question; polls,
  votes and final answers (objects) as `Poll:` / `Vote:` / `Final answer:` lines; `channel_created` is
  housekeeping, skipped by name (counted in metadata `skipped_lines`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from masprism_batch.ingest import status
from masprism_batch.ingest.agent_logs import smolagents_trace
from masprism_batch.ingest.common import Context, IngestError, check_trace_id, short
from masprism_batch.ingest.messages import content_text, dumps, join
from masprism_batch.ingest.spantree import parse_time
from masprism_batch.ingest.status import error_text
from masprism_batch.trace import Step, Trace

RUN_META = ("answer", "prediction", "true_answer", "source", "model_id", "agent_name", "agent_action_type",
            "original_question", "task", "task_id")
BUS_KEYS = ("sender", "type", "recipients")
BUS_SKIP = {"channel_created"}  # a channel opened: no agent's action
_ERROR = re.compile(r"^(?:Call id: ?\S+\n)?Error:\s*\n?(.+)", re.S)
_STEP_REPR = re.compile(r"^(SystemPromptStep|TaskStep|PlanningStep|ActionStep|FinalAnswerStep)\(")
_REPR_ROLE = re.compile(r"^ChatMessage\(role=(?:<MessageRole\.\w+: )?'([\w-]+)'")


def is_run_line(doc: Any) -> bool:
    return isinstance(doc, dict) and "intermediate_steps" in doc and "question" in doc and (
        "answer" in doc or "true_answer" in doc or "prediction" in doc)


def is_bus_message(doc: Any) -> bool:
    return isinstance(doc, dict) and all(k in doc for k in BUS_KEYS) and isinstance(doc.get("type"), str) and (
        "content" in doc) and isinstance(doc.get("recipients"), list)


def run_trace(doc: dict, tid: str) -> Trace:
    inter = doc["intermediate_steps"]
    q = doc.get("question") if isinstance(doc.get("question"), str) else None
    if isinstance(inter, list) and inter and all(isinstance(m, dict) for m in inter):
        tr = smolagents_trace(inter, tid)
        for s in tr.steps:
            m = _ERROR.match(s.content) if s.role == "tool" else None
            if m:
                s.error = error_text(m.group(1).strip().split("\nNow let's retry")[0][:2000])
    elif isinstance(inter, list) and inter and all(isinstance(m, str) for m in inter):
        steps = [_repr_step(i, m) for i, m in enumerate(m for m in inter if m.strip())]
        tr = Trace(trace_id=tid, source="smolagents", system="smolagents", steps=steps)
    elif inter in ([], None, ""):  # the run raised: the runner keeps no steps, only the exception's text
        err = doc.get("agent_error") or (doc.get("answer") if doc.get("agent_action_type") != "vanilla" else None)
        steps = [Step(index=0, agent="user", content=q, role="user", kind="message")] if q else []
        if err:
            e = error_text(content_text(err))
            steps.append(Step(index=len(steps), agent="agent", content=e, role="assistant", kind="message", error=e))
        tr = Trace(trace_id=tid, source="smolagents", system="smolagents", steps=steps,
                   run_status=status.FAILED if err else status.UNKNOWN)
    elif isinstance(inter, str):  # a model answering alone ("vanilla"): the task, then its answer
        steps = [Step(index=0, agent="user", content=q or "", role="user", kind="message")] if q else []
        steps.append(Step(index=len(steps), agent="agent", content=inter.strip() or "(empty answer)",
                          role="assistant", kind="message"))
        tr = Trace(trace_id=tid, source="smolagents", system="smolagents", steps=steps)
    else:
        raise IngestError("invalid_record", f"intermediate_steps must be a list of messages, of step reprs, or "
                          f"a string, got {short(inter, 80)}", tid)
    if not tr.steps:
        raise IngestError("empty_trace", "intermediate_steps holds no step", tid)
    tr.question = q or tr.question
    tr.metadata = {"format": "smolagents-benchmark", **{k: doc[k] for k in RUN_META if doc.get(k) is not None}}
    for k in ("parsing_error", "iteration_limit_exceeded", "agent_error"):
        if doc.get(k):
            tr.metadata[k] = doc[k] if isinstance(doc[k], (bool, int, float)) else content_text(doc[k])[:2000]
    if doc.get("agent_error") or doc.get("iteration_limit_exceeded") is True:
        tr.run_status = status.FAILED  # the runner recorded the run as raising or running out of steps
    return tr


def _repr_step(i: int, text: str) -> Step:
    """A step kept as its Python repr: `SystemPromptStep(...)`, `TaskStep(...)`, `ActionStep(...)` (older
    runners), or `ChatMessage(role=<MessageRole.USER: 'user'>, ...)` (open_deep_research's memory messages)."""
    m, r = _STEP_REPR.match(text), _REPR_ROLE.search(text[:200])
    kind = m.group(1) if m else ""
    role = {"SystemPromptStep": "system", "TaskStep": "user"}.get(kind) or (r.group(1) if r else "assistant")
    if role == "tool-response":
        return Step(index=i, agent="tool", content=text.strip(), role="tool", kind="tool")
    role = role if role in ("system", "user") else "assistant"
    return Step(index=i, agent=role if role != "assistant" else "agent", content=text.strip(), role=role,
                kind="message")


def _bus_text(d: dict) -> str:
    c = d.get("content")
    if not isinstance(c, dict):
        return content_text(c).strip()
    t = c.get("type", d.get("type"))
    if t == "poll":
        return join(f"Poll: {c.get('question') or ''}".strip(), f"Proposal: {content_text(c.get('proposal'))}",
                    f"Final answer: {content_text(c.get('final_answer'))}" if c.get("final_answer") else "")
    if t == "vote":
        conf = f" (confidence {c['confidence']})" if c.get("confidence") is not None else ""
        return join(f"Vote: {c.get('vote')}{conf}", content_text(c.get("rationale")).strip())
    if t == "final_answer":
        return join(f"Final answer: {content_text(c.get('answer'))}",
                    f"Tally: {dumps(c['tally'])}" if c.get("tally") else "")
    return dumps({k: v for k, v in c.items() if k != "type"})


def parse_bus(docs: list, ctx: Context) -> Iterator[Trace]:
    """The messages of one bus file: one trace, a step per message in file order (a malformed line alone is
    rejected)."""
    steps: list[Step] = []
    question, first_id, skipped = None, None, {}
    for i, d in enumerate(docs):
        if not is_bus_message(d):
            ctx.reject(IngestError("invalid_record", f"not a message-bus line (needs {', '.join(BUS_KEYS)}, "
                                   f"content): {short(d, 120)}", f"line {i + 1}"))
            continue
        first_id = first_id or (str(d["id"]) if d.get("id") else None)
        if d["type"] in BUS_SKIP:
            skipped[d["type"]] = skipped.get(d["type"], 0) + 1
            continue
        text = _bus_text(d)
        if not text:
            continue
        sender = str(d["sender"]) if d["sender"] not in (None, "") else "unknown"
        if d["type"] == "task" and question is None:
            question = text
        role = "user" if d["type"] == "task" else "assistant"
        if d["type"] == "private_message":
            text = f"To {', '.join(map(str, d['recipients']))}: {text}"
        steps.append(Step(index=len(steps), agent=sender, content=text, role=role, kind="message",
                          span_id=str(d["id"]) if d.get("id") else None, start_time=parse_time(d.get("timestamp"))))
    if not steps:
        raise IngestError("empty_trace", f"no messages with text among {len(docs)} lines")
    tid = check_trace_id(f"smolagents-bus/{first_id}" if first_id else f"smolagents-bus/{ctx.input_path}")
    meta: dict[str, Any] = {"format": "smolagents-message-bus"}
    if skipped:
        meta["skipped_lines"] = skipped
    yield Trace(trace_id=tid, source="smolagents", system="smolagents-decentralized", question=question,
                steps=steps, metadata=meta)

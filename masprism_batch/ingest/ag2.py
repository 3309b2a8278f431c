"""AG2 / AutoGen conversations: one file (or one JSON line) is one trace.

Accepted shapes (`--format ag2`, alias `autogen`):
- AG2 / AutoGen 0.2 `ChatResult.chat_history`: a bare list of messages `{"content", "role", "name"}`
  (`tool_calls` on assistant messages, `tool_responses` on `role: "tool"` messages), or an object holding
  it as `chat_history` (a dumped `ChatResult`: `chat_id`, `summary`, `cost`, `human_input` beside it), or
  as `history`/`messages` without Who&When's label fields.
- AutoGen 0.4+ AgentChat `TaskResult`: `{"messages": [{"source", "type", "content", "models_usage", ...}],
  "stop_reason"}`; `type` is `TextMessage`, `ToolCallRequestEvent` (content: `[{"id", "name",
  "arguments"}]`), `ToolCallExecutionEvent` (content: `[{"call_id", "name", "content", "is_error"}]`),
  `ToolCallSummaryMessage`, `HandoffMessage`, `ThoughtEvent`, `StopMessage`, `MultiModalMessage`, ...
  Streaming chunks (`ModelClientStreamingChunkEvent`) repeat the final message and are skipped. Also the model
  context `autogen_core.models` keeps (`SystemMessage`, `UserMessage`, `AssistantMessage` with `thought` and
  function calls, `FunctionExecutionResultMessage` without a `source`), e.g. a saved chat history.

- AgentEval response logs (AG2 / AutoGen 0.2 `agenteval-in-out`, a `.txt` of JSON): `{"problem", "messages":
  [{"content", "role"}], "is_correct", "check_result", "correct_ans", ...}`: question = `problem`, run status from
  `is_correct` (a graded outcome), the grading fields in metadata; an empty message (the user proxy's empty
  auto-reply) reads `(empty message)`.

Steps: one per message, in list order. agent = `name` (AG2) / `source` (AutoGen 0.4), else the role; a tool
result speaks as its tool (AutoGen: when its results name one tool), `is_error` results fill `Step.error`; kind
`tool` for tool results, `message` otherwise; a message logged as `""` reads `(empty message)`. source `ag2` (system `ag2`) or `autogen` (system
`autogen-agentchat`); trace id = the object's `trace_id`/`id` when it is a string, else `ag2/<file stem>`
(`#<line>` added for JSON lines), which ingest turns into the run's (run_ids.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from masprism_batch.ingest.common import Context, IngestError
from masprism_batch.ingest.messages import (
    content_text,
    dumps,
    join,
    opt_str,
    require_list,
    require_obj,
    tool_calls_text,
)
from masprism_batch.ingest.sources import base_name
from masprism_batch.ingest.status import FAILED, SUCCEEDED, UNKNOWN, error_text
from masprism_batch.trace import Step, Trace

_SKIP_TYPES = {"ModelClientStreamingChunkEvent", "CodeGenerationEvent", "UserInputRequestedEvent"}
_RESULTS = {"ToolCallExecutionEvent", "FunctionExecutionResultMessage"}  # tool results: credited to the tool
_NO_SOURCE = {"SystemMessage": "system"}
EMPTY = "(empty message)"  # a message logged as "": a step that says so, never blank text
_META_KEYS = ("chat_id", "summary", "cost", "stop_reason", "human_input")
# AgentEval's response logs (`test/test_files/agenteval-in-out/samples/sample_math_response_*.txt`, AG2 and AutoGen
# 0.2): one MATH problem's chat between the math user proxy and the assistant, graded: `is_correct`, the grader's
# `check_result`. Saved as a `.txt` of JSON.
_AGENTEVAL_KEYS = ("problem", "level", "type", "solution", "correct_ans", "problem_id", "response_with_ans", "round",
                   "time", "check_result", "is_correct", "trial")


def is_agenteval(doc: Any) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("messages"), list) and isinstance(doc.get("problem"), str) \
        and any(k in doc for k in ("is_correct", "check_result", "correct_ans", "response_with_ans"))


def is_autogen_message(m: Any) -> bool:
    return isinstance(m, dict) and "source" in m and "type" in m


def _trace_id(doc: Any, ctx: Context, line: int | None, prefix: str) -> str:
    if isinstance(doc, dict):
        for k in ("trace_id", "id"):  # a ChatResult's numeric chat_id is not unique across files: metadata
            if isinstance(doc.get(k), str) and doc[k]:
                return doc[k]
    return f"{prefix}/{base_name(ctx.input_path)}" + (f"#{line}" if line is not None else "")


def _ag2_steps(msgs: list, tid: str) -> list[Step]:
    steps = []
    for i, m in enumerate(msgs):
        m = require_obj(m, f"message {i}", tid)
        role = opt_str(m.get("role"), f"message {i}.role", tid)
        name = opt_str(m.get("name"), f"message {i}.name", tid)
        content = m.get("content")
        if content is not None and not isinstance(content, (str, list, dict, int, float)):
            raise IngestError("invalid_record", f"message {i}.content has type {type(content).__name__}", tid)
        if content is None and not m.get("tool_calls") and not m.get("function_call") and not m.get("tool_responses"):
            raise IngestError("invalid_record", f"message {i} has no content, tool calls or tool responses", tid)
        responses = m.get("tool_responses")
        text = join(content_text(content), tool_calls_text(m.get("tool_calls") or m.get("function_call")))
        if responses and not content:
            text = join(text, *(content_text(r.get("content")) if isinstance(r, dict) else dumps(r)
                                for r in (responses if isinstance(responses, list) else [responses])))
        tool = role in ("tool", "function") or bool(responses)
        steps.append(Step(index=i, agent=name or role, content=text or EMPTY, role=role,
                          kind="tool" if tool else "message"))
    return steps


def _results(content: Any, src: str | None) -> tuple[str, str, str | None]:
    """A tool-result message (`ToolCallExecutionEvent`, model context `FunctionExecutionResultMessage`): its
    text, the tool it is credited to (the one tool named, else the executing agent) and its error, if any."""
    lines, names, errors = [], [], []
    for r in content if isinstance(content, list) else [content]:
        if isinstance(r, dict):
            name = r.get("name") if isinstance(r.get("name"), str) and r.get("name") else None
            names.append(name)
            body = content_text(r.get("content"))
            if r.get("is_error") is True:
                errors.append(error_text(body or "tool error"))
            lines.append(f"Tool result {name or r.get('call_id') or '?'}"
                         f"{' (error)' if r.get('is_error') is True else ''}: {body}")
        else:
            lines.append(content_text(r))
    one = names[0] if names and all(n == names[0] for n in names) and names[0] else None
    return "\n".join(lines), one or src or "tool", "\n".join(errors) or None


def _autogen_steps(msgs: list, tid: str) -> list[Step]:
    steps = []
    for i, m in enumerate(msgs):
        m = require_obj(m, f"messages[{i}]", tid)
        typ, src = m.get("type"), m.get("source")
        if isinstance(typ, str) and src is None and typ in _NO_SOURCE:
            src = _NO_SOURCE[typ]  # model-context messages that carry no source (autogen_core.models)
        if not isinstance(typ, str) or not isinstance(src, (str, type(None))) or src is None and typ not in _RESULTS:
            raise IngestError("invalid_record", f"messages[{i}] needs string 'source' and 'type' "
                              "(AutoGen 0.4 message)", tid)
        if typ in _SKIP_TYPES:
            continue
        content = m.get("content")
        kind, role, err = "message", "system" if typ == "SystemMessage" else "user" if src in ("user", "User") or (
            typ == "UserMessage") else "assistant", None
        if typ == "ToolCallRequestEvent" or typ == "AssistantMessage" and isinstance(content, list):
            text = tool_calls_text(content)
        elif typ in _RESULTS:
            kind, role = "tool", "tool"
            text, src, err = _results(content, src)
        elif typ == "HandoffMessage":
            text = join(content_text(content), f"Handoff to: {m['target']}" if isinstance(m.get("target"), str) else "")
        elif typ == "ThoughtEvent":
            text = f"Thought: {content_text(content)}"
        else:
            text = content_text(content)
        if typ == "AssistantMessage" and isinstance(m.get("thought"), str) and m["thought"].strip():
            text = join(f"Thought: {m['thought'].strip()}", text)
        if err and err not in text:
            text = join(text, err)
        steps.append(Step(index=len(steps), agent=src, content=text or EMPTY, role=role, kind=kind, error=err))
    return steps


def parse(doc: Any, ctx: Context, line: int | None = None) -> Iterator[Trace]:
    if isinstance(doc, list):
        msgs, outer = doc, {}
    elif isinstance(doc, dict):
        outer = doc
        key = next((k for k in ("chat_history", "messages", "history") if k in doc), None)
        if key is None:
            raise IngestError("invalid_record", "AG2/AutoGen record needs 'chat_history', 'messages' or 'history' "
                              f"(or a bare list of messages); top level: {sorted(doc)[:8]}",
                              f"line {line}" if line else None)
        msgs = doc[key]
    else:
        raise IngestError("invalid_record", f"AG2/AutoGen record must be a list or object, got {type(doc).__name__}")
    autogen = isinstance(msgs, list) and any(is_autogen_message(m) for m in msgs)
    tid = _trace_id(outer, ctx, line, "autogen" if autogen else "ag2")
    require_list(msgs, "the message list", tid)
    steps = _autogen_steps(msgs, tid) if autogen else _ag2_steps(msgs, tid)
    meta: dict[str, Any] = {"format": "autogen-0.4" if autogen else "ag2"}
    for k in _META_KEYS:
        if outer.get(k) is not None:
            meta[k] = outer[k] if isinstance(outer[k], (str, int, float)) else dumps(outer[k])
    first = next((m for m in msgs if isinstance(m, dict)), {})  # the task that starts the chat
    question = first.get("content") if isinstance(first.get("content"), str) and first["content"] else None
    run_status = UNKNOWN
    if not autogen and is_agenteval(outer):  # a graded AgentEval response: the problem, its grade, the grader's note
        meta["format"] = "ag2-agenteval"
        for k in _AGENTEVAL_KEYS:
            if outer.get(k) is not None and k not in ("messages",):
                meta[k] = outer[k] if isinstance(outer[k], (str, int, float, bool)) else dumps(outer[k])
        question = outer["problem"] or question
        run_status = SUCCEEDED if outer.get("is_correct") is True else FAILED if outer.get("is_correct") is False \
            else UNKNOWN
        if run_status == SUCCEEDED:  # set aside by default as graded passed; the summary counts it as a score
            meta["graded_by"], meta["graded_why"] = "score", "AgentEval graded the answer correct (is_correct: true)"
    yield Trace(trace_id=tid, source="autogen" if autogen else "ag2",
                system=outer.get("system") if isinstance(outer.get("system"), str)
                else ("autogen-agentchat" if autogen else "ag2"),
                question=question, steps=steps, labels=None, metadata=meta, run_status=run_status)

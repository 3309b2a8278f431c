"""AutoGen's model-call recorder session file (`autogen_ext.experimental.task_centric_memory.utils.
ChatCompletionClientRecorder`, `session_file_path`), source `autogen`: a JSON list of records
`{"mode": "create" | "create_stream", "messages": [LLMMessage dicts], "response": CreateResult dict,
"stream": [...]}`, one per model call, in call order.

One trace per file. Each call's input is the model context (`SystemMessage`, `UserMessage` with a `source`,
`AssistantMessage`, `FunctionExecutionResultMessage`): the messages no earlier step carries become steps once,
in order (a system prompt or task repeated by every call is kept once, as for span formats: context.py), then
the call's answer (`response.content`: text or function calls as `Tool call:` lines; `thought` as `Thought:`)
is one step of kind `llm`. The recorder names no agent: a call speaks as `assistant`, a user message as its
`source`, a tool result as its tool. question = the first user message.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from masprism_batch.ingest.common import Context, IngestError, check_trace_id, short
from masprism_batch.ingest.messages import content_text, join, tool_calls_text
from masprism_batch.ingest.sources import base_name
from masprism_batch.ingest.status import error_text
from masprism_batch.trace import Step, Trace

MODES = ("create", "create_stream")


def is_session(doc: Any) -> bool:
    return isinstance(doc, list) and bool(doc) and isinstance(doc[0], dict) and doc[0].get("mode") in MODES and (
        "messages" in doc[0]) and ("response" in doc[0] or "stream" in doc[0])


def _key(text: str) -> str:
    return "".join(ch for ch in text.casefold() if ch.isalnum())


def _message_step(m: dict) -> Step | None:
    typ = m.get("type")
    content = m.get("content")
    if typ == "FunctionExecutionResultMessage":
        results = content if isinstance(content, list) else [content]
        names = {r.get("name") for r in results if isinstance(r, dict)}
        name = next(iter(names)) if len(names) == 1 and isinstance(next(iter(names)), str) else "tool"
        errs = [error_text(content_text(r.get("content")) or "tool error") for r in results
                if isinstance(r, dict) and r.get("is_error") is True]
        text = "\n".join(content_text(r.get("content")) if isinstance(r, dict) else content_text(r) for r in results)
        err = "\n".join(errs) or None
        return Step(index=0, agent=name, content=join(text, err if err and err not in text else "") or "(empty result)",
                    role="tool", kind="tool", error=err)
    if typ == "AssistantMessage":
        text = tool_calls_text(content) if isinstance(content, list) else content_text(content)
        return Step(index=0, agent=str(m.get("source") or "assistant"), content=text, role="assistant",
                    kind="message") if text.strip() else None
    text = "\n".join(content_text(c) for c in content) if isinstance(content, list) else content_text(content)
    if not text.strip():
        return None
    role = "system" if typ == "SystemMessage" else "user"
    return Step(index=0, agent="system" if role == "system" else str(m.get("source") or "user"), content=text.strip(),
                role=role, kind="message")


def _answer(rec: dict) -> str:
    resp = rec.get("response") if isinstance(rec.get("response"), dict) else {}
    if not resp and isinstance(rec.get("stream"), list) and rec["stream"]:
        last = rec["stream"][-1]  # the stream ends with the CreateResult
        resp = last if isinstance(last, dict) else {"content": last}
    content = resp.get("content")
    text = tool_calls_text(content) if isinstance(content, list) else content_text(content)
    thought = resp.get("thought")
    return join(f"Thought: {thought.strip()}" if isinstance(thought, str) and thought.strip() else "", text)


def parse(doc: Any, ctx: Context) -> Iterator[Trace]:
    tid = check_trace_id(f"autogen-recorder/{base_name(ctx.input_path)}")
    if not isinstance(doc, list):
        raise IngestError("invalid_record", "a recorder session file is a list of records", tid)
    steps: list[Step] = []
    seen: set[str] = set()
    question = None
    for i, rec in enumerate(doc):
        if not isinstance(rec, dict) or rec.get("mode") not in MODES or not isinstance(rec.get("messages"), list):
            ctx.reject(IngestError("invalid_record", f"not a recorder record (needs mode create/create_stream and "
                                   f"a messages list): {short(rec, 120)}", f"record {i + 1}"))
            continue
        for m in rec["messages"]:
            st = _message_step(m) if isinstance(m, dict) else None
            if st is None or _key(st.content) in seen:
                continue  # already a step: the context a later call repeats
            seen.add(_key(st.content))
            if st.role == "user" and question is None:
                question = st.content
            st.index = len(steps)
            steps.append(st)
        text = _answer(rec)
        steps.append(Step(index=len(steps), agent="assistant", content=text or "(empty answer)", role="assistant",
                          kind="llm", span_id=f"call{i + 1}"))
        seen.add(_key(text))
    if not steps:
        raise IngestError("empty_trace", "no model calls in the recorder session", tid)
    yield Trace(trace_id=tid, source="autogen", system="autogen-core", question=question, steps=steps,
                metadata={"format": "autogen-recorder", "calls": len(doc)})

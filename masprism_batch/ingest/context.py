"""The run's context that span dialects keep only in a model call's *input*: the task, the system
instruction and earlier conversation turns, made steps once, where they first appear.

Span and observation formats record what each model call produced; what it was given (the user's task, the
agent's instructions, turns of the conversation before the trace began) sits only in the call's input
history, which repeats everything earlier at every call. `input_messages` reads that history from whichever
shape the tracer kept (Chat Completions / LangChain / GenAI `parts` / Responses items / Gemini `contents` with
`system_instruction`, role-prefixed transcripts, agno `Message` reprs, span attributes `gen_ai.input.messages`,
`gen_ai.prompt.N.*`, `llm.input_messages.N.*`, `gcp.vertex.agent.llm_request`); `with_context` walks the
ordered steps and puts, before each model call, the input messages no earlier step already carries:
- system / user messages are new when their text (letters and digits only, case folded) was not seen before;
- an assistant message is new when no earlier step said the same text and called the same tools;
- a tool result is new when its text is in no earlier tool step (results are JSON-dumped differently by each
  tracer, hence the letters-and-digits comparison); tool *definitions* passed as messages are skipped;
- empty messages never become steps.
The task (`question`) is the first user message when the source had none; the trace's own input, when it is
a message nobody's input repeats, becomes the first step.
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from typing import Any

from masprism_batch.ingest.envelopes import maybe_json
from masprism_batch.ingest.messages import content_text, dumps, tool_calls_text
from masprism_batch.trace import Step

_ROLES = {"system": "system", "developer": "system", "user": "user", "human": "user", "assistant": "assistant",
          "ai": "assistant", "model": "assistant", "tool": "tool", "function": "tool", "HumanMessage": "user",
          "AIMessage": "assistant", "AIMessageChunk": "assistant", "SystemMessage": "system",
          "ToolMessage": "tool", "chat": "user"}
_TRANSCRIPT = re.compile(r"^(system|developer|user|assistant|tool|human|ai): ?", re.M)
_AGNO = re.compile(r"^role='(\w+)' content=('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|None)", re.S)
_SQUASH = re.compile(r"[\W_]+")
_CALL = re.compile(r"^Tool call: ([^(\n]{1,200})\(", re.M)
_CALL_LINE = re.compile(r"^Tool call: .*$", re.M)
_RESULT_PARTS = {"function_response", "tool_result", "tool_call_response"}
MAX_COMPARE = 200_000  # characters of a tool result compared; beyond this texts are compared by their head


def squash(text: str) -> str:
    return _SQUASH.sub("", text[:MAX_COMPARE].lower())


def _msg(role: Any, text: str, name: str | None = None) -> dict | None:
    r = _ROLES.get(role) if isinstance(role, str) else None
    if r == "tool":  # a JSON result re-dumped as tool steps dump it, so the two compare equal
        v = maybe_json(text.strip())
        text = text if isinstance(v, str) else dumps(v)
    return {"role": r, "text": text, "name": name} if r and text.strip() else None


def _results(parts: list) -> list[dict]:
    """Function / tool results sent as content parts (Gemini, GenAI `tool_call_response`, Anthropic), one each."""
    out = []
    for p in parts:
        fr = p.get("function_response") if isinstance(p.get("function_response"), dict) else p
        res = fr.get("response", fr.get("result", fr.get("content")))
        name = fr.get("name") if isinstance(fr.get("name"), str) else None
        m = _msg("tool", res if isinstance(res, str) else content_text(res) if isinstance(res, list) else dumps(res),
                 name)
        if m:
            out.append(m)
    return out


def _one(m: Any) -> list[dict] | dict | None:
    """One message in any chat shape -> {"role", "text", "name"} (None: not a message, or empty; a list: a
    turn of several tool results)."""
    if isinstance(m, str):
        a = _AGNO.match(m)
        if a:
            try:
                body = ast.literal_eval(a.group(2)) if a.group(2) != "None" else ""
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                body = a.group(2)
            calls = re.search(r" tool_calls=(\[.*?\]) audio=", m)
            text = str(body or "")
            if calls and not text:
                text = "\n".join(f"Tool call: {c}(" for c in re.findall(r"'name': '([^']{1,200})'", calls.group(1)))
            return _msg(a.group(1), text)
        return None
    if not isinstance(m, dict):
        return None
    kw = m["kwargs"] if isinstance(m.get("kwargs"), dict) else m["data"] if isinstance(m.get("data"), dict) else m
    typ = m.get("type")
    if typ in ("function_call", "custom_tool_call"):  # Responses items
        return _msg("assistant", tool_calls_text([{"name": m.get("name"), "arguments": m.get("arguments")}]))
    if typ in ("function_call_output", "custom_tool_call_output"):
        out = m.get("output")
        return _msg("tool", out if isinstance(out, str) else content_text(out))
    if typ == "reasoning":
        return None
    role = kw.get("role") or kw.get("type") or typ
    if m.get("lc") == 1 and isinstance(m.get("id"), list) and m["id"]:
        role = m["id"][-1]
    parts = kw.get("parts")
    if isinstance(parts, list):
        if parts and all(isinstance(p, dict) and (set(p) & _RESULT_PARTS or p.get("type") in _RESULT_PARTS)
                         for p in parts):
            return _results(parts)  # Gemini sends function responses as a `user` turn
        body = content_text(parts)
    else:
        content = kw.get("content")
        if role in ("tool", "ToolMessage") and isinstance(content, dict) and isinstance(content.get("function"), dict):
            return None  # a tool *definition* serialised as a tool message (Langfuse's LangChain handler)
        body = content_text(content)
    extra = kw.get("additional_kwargs") if isinstance(kw.get("additional_kwargs"), dict) else {}
    calls = kw.get("tool_calls") or extra.get("tool_calls") or kw.get("function_call")
    text = "\n".join(t for t in (body, tool_calls_text(calls)) if t)
    return _msg(role, text, kw.get("name") if isinstance(kw.get("name"), str) else None)


def _transcript(text: str) -> list[dict]:
    marks = list(_TRANSCRIPT.finditer(text))
    out = []
    for j, mk in enumerate(marks):
        body = text[mk.end():marks[j + 1].start() if j + 1 < len(marks) else len(text)].strip()
        m = _msg(mk.group(1), "" if body == "None" else body)
        if m:
            out.append(m)
    return out


def input_messages(v: Any) -> list[dict]:
    """A model call's input history as messages (the module docstring lists the shapes); [] if unknown."""
    v = maybe_json(v)
    if isinstance(v, str) and v.strip() in ("None", "null", "undefined"):  # Python's / JS's "no input", as text
        return []
    if isinstance(v, str):
        return _transcript(v) if _TRANSCRIPT.match(v) else ([m] if (m := _msg("user", v)) else [])
    out: list[dict] = []
    if isinstance(v, dict):
        cfg = v.get("config") if isinstance(v.get("config"), dict) else {}
        system = cfg.get("system_instruction") or v.get("system_instruction") or v.get("instructions") or v.get(
            "system")
        if system is not None and (s := _msg("system", content_text(system.get("parts") if isinstance(
                system, dict) else system))):
            out.append(s)
        for k in ("messages", "contents", "input", "prompts", "prompt"):
            if k in v:
                return out + input_messages(v[k])
        return out
    if isinstance(v, list):
        if v and isinstance(v[0], list):  # LangChain batches: [[message, ...]]
            v = v[0]
        for m in v:
            one = _one(m)
            if isinstance(one, list):
                out.extend(one)
            elif one:
                out.append(one)
    return out


def _numbered(a: dict[str, Any], prefix: str) -> list[dict]:
    """`gen_ai.prompt.N.role|content` (OpenLLMetry) / `llm.input_messages.N.message.role|content`."""
    msgs: dict[int, dict] = {}
    for k, val in a.items():
        if k.startswith(prefix):
            head, _, rest = k[len(prefix):].partition(".")
            if head.isdigit():
                rest = rest.removeprefix("message.")
                if rest in ("role", "content"):
                    msgs.setdefault(int(head), {})[rest] = val
    return [m for i in sorted(msgs) if (m := _msg(msgs[i].get("role"), content_text(msgs[i].get("content"))))]


def attr_inputs(a: dict[str, Any]) -> list[dict]:
    """The input history a span's attributes carry, in the dialects `genai_attrs` reads outputs from."""
    out: list[dict] = []
    sys_ = a.get("gen_ai.system_instructions")
    if sys_ is not None and (s := _msg("system", content_text(maybe_json(sys_)))):
        out.append(s)
    for key in ("gen_ai.input.messages", "gcp.vertex.agent.llm_request", "gen_ai.prompt"):
        if a.get(key) not in (None, "", "{}"):
            return out + input_messages(a[key])
    for prefix in ("gen_ai.prompt.", "llm.input_messages."):
        got = _numbered(a, prefix)
        if got:
            return out + got
    return out


_EVENT_ROLES = {"gen_ai.system.message": "system", "gen_ai.user.message": "user", "gen_ai.tool.message": "tool"}


def event_inputs(events: list[dict]) -> list[dict]:
    """Input history as span events: `gen_ai.content.prompt` (2024 conventions), `gen_ai.system.message`,
    `gen_ai.user.message`, `gen_ai.tool.message` (events form, also from `resourceLogs`)."""
    out: list[dict] = []
    for ev in events:
        a = ev.get("attributes") if isinstance(ev.get("attributes"), dict) else {}
        name = ev.get("name")
        if name == "gen_ai.content.prompt" and a.get("gen_ai.prompt") is not None:
            out += input_messages(a["gen_ai.prompt"])
        elif name in _EVENT_ROLES:
            body = maybe_json(ev.get("body", a.get("content", a.get("gen_ai.event.content"))))
            if isinstance(body, dict) and "content" in body:
                body = body["content"]
            m = _msg(_EVENT_ROLES[name], content_text(body))
            if m:
                out.append(m)
    return out


def _said(text: str) -> tuple[str, tuple[str, ...]]:
    """An assistant turn compared by what it said and which tools it called (arguments are dumped differently
    by each tracer)."""
    names = tuple(m.group(1).strip() for m in _CALL.finditer(text))
    return squash(_CALL_LINE.sub("", text)), names


def with_context(steps: list[Step], inputs: dict[str, list[dict]], question: str | None = None,
                 task_step: bool = False) -> tuple[list[Step], str | None]:
    """`steps` (ordered) with, before each model call, the messages of its input (`inputs`: span id -> messages)
    that no earlier step carries; and the task: `question`, else the first user message. `task_step`: the
    source records `question` as a message (a trace's input): it leads the steps unless an input repeats it."""
    seen_text: set[str] = set()
    seen_said: set[tuple[str, tuple[str, ...]]] = set()
    seen_calls: set[str] = set()  # tools earlier steps called (a logged call may be split one per message)
    tool_texts: list[str] = []
    out: list[Step] = []
    first_user = None

    def note(s: Step) -> None:
        if s.kind == "tool" or s.role == "tool":
            tool_texts.append(squash(s.content))
        elif s.role == "assistant":
            said = _said(s.content)
            seen_said.add(said)
            seen_calls.update(said[1])
        seen_text.add(squash(s.content))

    for s in steps:
        for j, m in enumerate(inputs.get(s.span_id or "", ())):
            role, text = m["role"], m["text"]
            if role == "tool" and text.startswith("Tool call: "):
                role = "assistant"  # a call logged under the tool role (Koog): the model's turn
            key = squash(text)
            if not key:
                continue
            if role in ("system", "user"):
                if key in seen_text:
                    continue
                agent = "user" if role == "user" else s.agent
                first_user = first_user or (text if role == "user" else None)
            elif role == "assistant":
                said = _said(text)
                if said in seen_said or (not said[0] and said[1] and seen_calls.issuperset(said[1])):
                    continue
                agent = s.agent
            else:
                if key in seen_text or any(key in t for t in tool_texts):
                    continue
                agent = m.get("name") or "tool"
            c = Step(index=0, agent=agent, content=text, role=role, kind="tool" if role == "tool" else "message",
                     span_id=f"{s.span_id}#input{j}", parent_span_id=s.span_id, start_time=s.start_time)
            note(c)
            out.append(c)
        note(s)
        out.append(s)
    question = question or first_user
    asked = squash(question or "")
    if task_step and asked and not any(asked in t for t in seen_text):  # no input repeats it (even inside)
        first = out[0] if out else None
        out.insert(0, Step(index=0, agent="user", content=question, role="user", kind="message",
                           span_id="trace-input", start_time=first.start_time if first else None))
    return [replace(s, index=i) for i, s in enumerate(out)], question

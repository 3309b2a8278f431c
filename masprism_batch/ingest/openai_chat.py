"""OpenAI message lists: Chat Completions `messages` and Responses API items. One object = one trace.

Accepted shapes (`--format openai`):
- Chat Completions: `{"messages": [...]}` (a request body, or a fine-tuning / eval JSON line), or a bare list
  of messages without AG2's per-message `name`. Messages: `{"role": "system"|"developer"|"user"|"assistant"|
  "tool", "content": str | [parts] | null, "name"?, "tool_calls"?: [{"id", "type": "function", "function":
  {"name", "arguments"}}], "tool_call_id"?}`; content parts `{"type": "text", "text"}`, `image_url`,
  `input_audio`, `file`, `refusal`. A `choices[0].message` beside `messages` (request + response) is the
  last step.
- Responses API: `{"input": [...], "output": [...]}` or a response object (`"object": "response"`, `output`),
  or a bare list of items: `{"type": "message", "role", "content": [{"type": "input_text"|"output_text",
  "text"}]}`, `function_call` (`call_id`, `name`, `arguments`), `function_call_output` (`call_id`, `output`),
  `reasoning` (`summary: [{"type": "summary_text", "text"}]`); other item types become `other` steps.

Steps in list order; agent = `name`, else the role (`assistant`, `user`, ...); a tool result's agent is the
tool's function name (looked up by `tool_call_id`), kind `tool`. source `openai`, system `openai-chat` or
`openai-responses`; trace id = a string `id` / `metadata.trace_id`, else `openai/<file stem>` (`#<line>`
for JSON lines), which ingest turns into the run's (run_ids.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from masprism_batch.ingest.common import Context, IngestError, short
from masprism_batch.ingest.messages import (
    content_text,
    dumps,
    join,
    opt_str,
    question_of,
    require_list,
    require_obj,
    tool_calls_text,
)
from masprism_batch.ingest.sources import base_name
from masprism_batch.trace import Step, Trace

ROLES = {"system", "developer", "user", "assistant", "tool", "function"}
RESPONSE_ITEM_TYPES = {"message", "function_call", "function_call_output", "reasoning", "web_search_call",
                       "file_search_call", "computer_call", "computer_call_output", "custom_tool_call",
                       "custom_tool_call_output", "mcp_call", "image_generation_call", "code_interpreter_call",
                       "local_shell_call", "local_shell_call_output", "item_reference"}


def is_response_item(m: Any) -> bool:
    return isinstance(m, dict) and m.get("type") in RESPONSE_ITEM_TYPES


def _trace_id(doc: dict, ctx: Context, line: int | None) -> str:
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    for v in (doc.get("id"), meta.get("trace_id"), doc.get("trace_id")):
        if isinstance(v, str) and v:
            return v
    return f"openai/{base_name(ctx.input_path)}" + (f"#{line}" if line is not None else "")


def chat_steps(msgs: list, tid: str, what: str = "messages") -> list[Step]:
    steps: list[Step] = []
    call_names: dict[str, str] = {}
    for i, m in enumerate(msgs):
        m = require_obj(m, f"{what}[{i}]", tid)
        role = m.get("role")
        if not isinstance(role, str) or role not in ROLES:
            raise IngestError("invalid_record", f"{what}[{i}].role must be one of {sorted(ROLES)}, got "
                              f"{dumps(role)[:40]}", tid)
        name = opt_str(m.get("name"), f"{what}[{i}].name", tid)
        calls = m.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            raise IngestError("invalid_record", f"{what}[{i}].tool_calls must be a list", tid)
        for c in calls or []:  # OpenAI {"id", "function": {"name"}} or LangChain {"id", "name", "args"}
            if isinstance(c, dict) and isinstance(c.get("id"), str):
                fn = c["function"] if isinstance(c.get("function"), dict) else c
                call_names[c["id"]] = str(fn.get("name") or "tool")
        content = m.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise IngestError("invalid_record", f"{what}[{i}].content must be a string, a list of parts or "
                              f"null, got {type(content).__name__}", tid)
        text = join(content_text(content), tool_calls_text(calls or m.get("function_call")))
        if role in ("tool", "function"):
            tcid = m.get("tool_call_id")
            fn = name or (call_names.get(tcid) if isinstance(tcid, str) else None) or "tool"
            if not text.strip() and steps and steps[-1].role == "assistant":
                # an empty result (τ-bench's `think` returns "") is no action: it is named in the call's step
                steps[-1].content = join(steps[-1].content, f"Tool result {fn}: (empty)")
                continue
            steps.append(Step(index=i, agent=fn, content=text or "(empty result)", role=role, kind="tool"))
        else:
            steps.append(Step(index=i, agent=name or role, content=text, role=role, kind="message"))
    return steps


def item_text(it: dict) -> str:
    """Readable text of one Responses item ("" for reasoning with no readable text: encrypted, no summary)."""
    typ = it.get("type", "message" if "role" in it else None)
    if typ == "message":
        return content_text(it.get("content"))
    if typ in ("function_call", "custom_tool_call"):
        args = it.get("arguments", it.get("input"))
        return f"Tool call: {it.get('name') or '?'}({args if isinstance(args, str) else dumps(args)})"
    if typ in ("function_call_output", "custom_tool_call_output", "computer_call_output", "local_shell_call_output"):
        out = it.get("output")
        return out if isinstance(out, str) else content_text(out)
    if typ == "reasoning":
        text = content_text(it.get("summary")) or content_text(it.get("content"))
        return f"Reasoning: {text}" if text.strip() else ""
    if isinstance(typ, str):
        body = {k: v for k, v in it.items() if k not in ("id", "status", "type")}
        return f"{typ}: {dumps(body)}"
    return ""


def _response_steps(items: list, tid: str, ctx: Context | None = None) -> list[Step]:
    steps: list[Step] = []
    call_names: dict[str, str] = {}
    for i, it in enumerate(items):
        it = require_obj(it, f"items[{i}]", tid)
        typ = it.get("type", "message" if "role" in it else None)
        text = item_text(it)
        if typ == "message":
            role = it.get("role")
            if not isinstance(role, str) or role not in ROLES:
                raise IngestError("invalid_record", f"items[{i}].role must be one of {sorted(ROLES)}, got "
                                  f"{dumps(role)[:40]}", tid)
            steps.append(Step(index=len(steps), agent=role, content=text, role=role, kind="message"))
        elif typ in ("function_call", "custom_tool_call"):
            if isinstance(it.get("call_id"), str):
                call_names[it["call_id"]] = str(it.get("name") or "tool")
            steps.append(Step(index=len(steps), agent="assistant", role="assistant", kind="message", content=text))
        elif typ in ("function_call_output", "custom_tool_call_output", "computer_call_output",
                     "local_shell_call_output"):
            steps.append(Step(index=len(steps), agent=call_names.get(it.get("call_id"), "tool"), role="tool",
                              kind="tool", content=text))
        elif typ == "reasoning":
            if not text:  # encrypted or summary-less: a blank "Reasoning:" step would only be noise
                if ctx is not None:
                    ctx.warn("unreadable_reasoning", f"items[{i}] (reasoning {dumps(it.get('id'))[:60]}) has no "
                             "readable text (encrypted content, empty summary); dropped", tid)
                continue
            steps.append(Step(index=len(steps), agent="assistant", role="assistant", kind="message", content=text))
        elif isinstance(typ, str):
            steps.append(Step(index=len(steps), agent="assistant", role="assistant", kind="other", content=text))
        else:
            raise IngestError("invalid_record", f"items[{i}] has neither 'type' nor 'role'", tid)
    return steps


# LangChain / LangGraph message `type` -> OpenAI role
LC_ROLES = {"human": "user", "ai": "assistant", "AIMessageChunk": "assistant", "tool": "tool",
            "system": "system", "function": "function", "chat": "user", "HumanMessage": "user",
            "AIMessage": "assistant", "ToolMessage": "tool", "SystemMessage": "system"}


def is_langchain_message(m: Any) -> bool:
    return isinstance(m, dict) and "role" not in m and (isinstance(m.get("type"), str) and m["type"] in LC_ROLES or (
        m.get("lc") == 1 and isinstance(m.get("kwargs"), dict)))


def _from_langchain(m: Any) -> Any:
    """A LangChain message (`{"type": "ai", ...}` or serialised `{"lc": 1, "id": [..., "AIMessage"], "kwargs"}`)
    as an OpenAI message, tool calls and tool_call_id kept."""
    if not is_langchain_message(m):
        return m
    kw = m["kwargs"] if isinstance(m.get("kwargs"), dict) else m
    typ = m["id"][-1] if m.get("lc") == 1 and isinstance(m.get("id"), list) and m["id"] else kw.get("type")
    extra = kw.get("additional_kwargs") if isinstance(kw.get("additional_kwargs"), dict) else {}
    out = {"role": LC_ROLES.get(typ, typ) if isinstance(typ, str) else None, "content": kw.get("content")}
    calls = kw.get("tool_calls") or extra.get("tool_calls")
    if calls:
        out["tool_calls"] = calls
    for k in ("name", "tool_call_id"):
        if isinstance(kw.get(k), str):
            out[k] = kw[k]
    return out


def parse(doc: Any, ctx: Context, line: int | None = None) -> Iterator[Trace]:
    rid = f"line {line}" if line is not None else None
    if isinstance(doc, list):
        doc = {"input": doc} if any(is_response_item(m) for m in doc) else {"messages": doc}
    doc = require_obj(doc, "an OpenAI record", rid)
    tid = _trace_id(doc, ctx, line)
    source = "openai"
    if "messages" in doc or isinstance(doc.get("choices"), list):
        msgs = list(require_list(doc["messages"], "'messages'", tid)) if "messages" in doc else []
        if any(is_langchain_message(m) for m in msgs[:64]):  # LangGraph / LangChain message state
            for i, m in enumerate(msgs):
                if isinstance(m, dict) and "role" not in m and not is_langchain_message(m):
                    raise IngestError("invalid_record", f"messages[{i}].type must be one of {sorted(LC_ROLES)} (a "
                                      f"LangChain message), got {dumps(m.get('type'))[:40]}", tid)
            msgs, source = [_from_langchain(m) for m in msgs], "langgraph"
        choices = doc.get("choices")
        if isinstance(choices, list) and choices:  # a response beside its request, or a response alone
            c0 = choices[0]
            if not isinstance(c0, dict) or not isinstance(c0.get("message"), dict):
                raise IngestError("invalid_record", "choices[0].message must be an object (a Chat Completions "
                                  f"response), got {short(c0.get('message') if isinstance(c0, dict) else c0)}", tid)
            msgs.append({"role": "assistant", **c0["message"]})
        steps, question = chat_steps(msgs, tid), question_of(msgs)
        system = "langgraph-messages" if source == "langgraph" else "openai-chat"
    elif "input" in doc or "output" in doc:
        inp = doc.get("input")
        if inp is not None and not isinstance(inp, (str, list)):
            raise IngestError("invalid_record", f"'input' must be a string or a list of items, got "
                              f"{type(inp).__name__}", tid)
        items = [{"role": "user", "content": inp}] if isinstance(inp, str) else list(inp or [])
        if isinstance(doc.get("instructions"), str):
            items.insert(0, {"role": "developer", "content": doc["instructions"]})
        out = doc.get("output")
        if out is not None and not isinstance(out, list):
            raise IngestError("invalid_record", f"'output' must be a list of items, got {type(out).__name__}", tid)
        items += out or []
        steps, system = _response_steps(require_list(items, "'input' + 'output'", tid), tid, ctx), "openai-responses"
        question = inp if isinstance(inp, str) else question_of(
            [{"role": it.get("role"), "content": it.get("content")} for it in items if isinstance(it, dict)])
    else:
        raise IngestError("invalid_record", "OpenAI record needs 'messages' (Chat Completions) or 'input'/'output' "
                          f"(Responses); top level: {sorted(doc)[:8]}", tid)
    if not steps:
        raise IngestError("empty_trace", "no messages to make steps of", tid)
    meta: dict[str, Any] = {"format": system}
    if isinstance(doc.get("model"), str):
        meta["model"] = doc["model"]
    yield Trace(trace_id=tid, source=source, system=system, question=question, steps=steps, labels=None,
                metadata=meta)

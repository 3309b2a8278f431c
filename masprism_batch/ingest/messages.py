"""Chat-message text shared by the message-list adapters (AG2/AutoGen, OpenAI, LangSmith, Langfuse).

Content may be a string, null (an assistant message that only calls tools), a list of content parts
(`{"type": "text", "text": ...}`, `input_text` / `output_text`, `image_url`, `refusal`, ...) or, in
LangChain serialisations, a message object. Tool calls are written as one line each,
`Tool call: name(arguments)`, so a step that only calls a tool still has text the model can read.
"""

from __future__ import annotations

import json
from typing import Any

from masprism_batch.ingest.common import IngestError

MAX_DEPTH = 32  # nested content deeper than this is dumped as JSON, which bounds recursion


def dumps(v: Any) -> str:
    try:
        return json.dumps(v, ensure_ascii=False, default=str)
    except RecursionError:
        return f"[{type(v).__name__} nested too deeply to show]"
    except (TypeError, ValueError):
        try:
            return str(v)
        except RecursionError:
            return f"[{type(v).__name__} nested too deeply to show]"


def _part_text(p: Any, depth: int) -> str:
    if isinstance(p, str):
        return p
    if not isinstance(p, dict):
        return dumps(p)
    t = p.get("type")
    if isinstance(p.get("text"), str):  # text, input_text, output_text, summary_text parts
        return p["text"]
    if t in ("tool_call", "tool_use", "function_call"):  # GenAI / pydantic-ai, Anthropic, Responses parts
        return tool_call_line(p)
    if isinstance(p.get("function"), dict) and "name" in p["function"]:  # an OpenAI tool call as a part (Koog)
        return tool_call_line(p)
    if isinstance(p.get("function_call"), dict):  # Gemini / Google ADK part
        return tool_call_line(p["function_call"])
    if t in ("tool_call_response", "tool_result") or isinstance(p.get("function_response"), dict):
        fr = p.get("function_response") if isinstance(p.get("function_response"), dict) else p
        res = fr.get("response", fr.get("result", fr.get("content")))
        return f"Tool result {fr.get('name') or fr.get('tool_use_id') or fr.get('id') or '?'}: " + (
            res if isinstance(res, str) else content_text(res, depth + 1) if isinstance(res, list) else dumps(res))
    if isinstance(p.get("thinking"), str):
        return f"Reasoning: {p['thinking']}" if p["thinking"] else ""
    if p.get("refusal") is not None:
        return f"Refusal: {content_text(p['refusal'], depth + 1)}"
    if p.get("content") is not None:
        return content_text(p["content"], depth + 1)
    if t in ("image_url", "input_image", "image"):
        return "[image]"
    if t in ("input_audio", "audio"):
        return "[audio]"
    if t in ("file", "input_file"):
        return "[file]"
    return dumps(p)


def content_text(content: Any, depth: int = 0) -> str:
    """Readable text of a message's content (string, null, list of parts, or an object)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, (int, float, bool)):
        return str(content)
    if depth > MAX_DEPTH:
        return dumps(content)
    if isinstance(content, list):
        return "\n".join(t for t in (_part_text(p, depth) for p in content) if t)
    if isinstance(content, dict):
        return _part_text(content, depth)
    return dumps(content)


def tool_call_line(call: Any) -> str:
    """OpenAI `{"function": {"name", "arguments"}}`, LangChain `{"name", "args"}`, AutoGen `{"name", "arguments"}`."""
    if not isinstance(call, dict):
        return f"Tool call: {dumps(call)}"
    fn = call.get("function") if isinstance(call.get("function"), dict) else call
    # Inspect AI names the function as plain text: {"function": "bash", "arguments": {...}}
    name = fn.get("name") or (call["function"] if isinstance(call.get("function"), str) else None) or call.get(
        "type") or "?"
    args = fn.get("arguments", fn.get("args", fn.get("input")))
    return f"Tool call: {name}({args if isinstance(args, str) else dumps(args) if args is not None else ''})"


def tool_calls_text(calls: Any) -> str:
    if not calls:
        return ""
    if not isinstance(calls, list):
        calls = [calls]
    return "\n".join(tool_call_line(c) for c in calls)


def join(*parts: str) -> str:
    return "\n".join(p for p in parts if p)


def require_list(v: Any, what: str, record_id: str | None) -> list:
    if not isinstance(v, list):
        raise IngestError("invalid_record", f"{what} must be a list, got {type(v).__name__}", record_id)
    if not v:
        raise IngestError("empty_trace", f"{what} is empty", record_id)
    return v


def require_obj(v: Any, what: str, record_id: str | None) -> dict:
    if not isinstance(v, dict):
        raise IngestError("invalid_record", f"{what} must be an object, got {type(v).__name__}", record_id)
    return v


def opt_str(v: Any, what: str, record_id: str | None) -> str | None:
    if v is None or isinstance(v, str):
        return v
    raise IngestError("invalid_record", f"{what} must be a string, got {type(v).__name__}", record_id)


def question_of(inputs: Any) -> str | None:
    """A trace's question from its root input: a string, `input`/`question`/`query`, or the first user message."""
    if isinstance(inputs, str):
        return inputs or None
    if isinstance(inputs, dict):
        for k in ("question", "input", "query", "task", "prompt"):
            if isinstance(inputs.get(k), str) and inputs[k]:
                return inputs[k]
        if isinstance(inputs.get("new_message"), dict):  # Google ADK run input
            return content_text(inputs["new_message"].get("parts") or inputs["new_message"].get("content")) or None
        inputs = inputs.get("messages")
    if isinstance(inputs, list):
        if inputs and isinstance(inputs[0], list):  # LangChain batches: [[message, ...]] (one level only)
            inputs = inputs[0]
        for m in inputs:
            if isinstance(m, dict):
                kw = m.get("kwargs") if isinstance(m.get("kwargs"), dict) else m
                role = kw.get("role") or kw.get("type") or m.get("type")
                if role in ("user", "human") and (kw.get("content") or kw.get("parts")):
                    return content_text(kw.get("content") or kw.get("parts")) or None
    return None

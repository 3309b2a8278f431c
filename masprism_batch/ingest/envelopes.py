"""The text a person would read in an LLM call's output, whatever envelope the tracing SDK stored it in.

Tracers store a generation's output as they received it: a Chat Completions response (`choices`), a
Responses API object (`object: "response"`, `output` items), a Gemini / Google ADK `LlmResponse`
(`content.parts` with `text` / `function_call`), a GenAI-convention or pydantic-ai message (`parts` of type
`text` / `tool_call`), a LangChain message (`type: "ai"`, tool calls in `tool_calls` or
`additional_kwargs.tool_calls`, or serialised as `{"lc": 1, "kwargs": ...}`), an `LLMResult`
(`generations`), a list of such messages, or any of these JSON-encoded in a string. `output_text` reduces all
of them to the answer and one `Tool call: name(arguments)` line per call, never the envelope (ids, usage,
billing); an unknown object is shown without those housekeeping keys.
"""

from __future__ import annotations

import json
from typing import Any

from masprism_batch.ingest.messages import MAX_DEPTH, content_text, dumps, join, tool_calls_text

# envelope keys that are never what a person reads (usage, billing, ids, provider housekeeping)
HOUSEKEEPING = frozenset({
    "id", "object", "created", "created_at", "model", "usage", "usage_metadata", "response_metadata",
    "system_fingerprint", "service_tier", "billing", "logprobs", "finish_reason", "index", "status",
    "invocation_id", "timestamp", "metadata", "prompt_filter_results", "incomplete_details", "reasoning",
    "parallel_tool_calls", "temperature", "top_p", "truncation", "store", "text", "tool_choice", "tools",
    "user", "safety_identifier", "prompt_cache_key", "max_output_tokens", "previous_response_id", "error",
    "instructions", "background", "top_logprobs", "model_version", "avg_logprobs", "actions", "author",
    "partial", "turn_complete", "custom_metadata", "grounding_metadata", "example", "artifact",
})
_MAX_PARSE = 8 * 1024 * 1024  # JSON-encoded outputs longer than this are shown as text, not parsed
_ASSISTANT = {"assistant", "ai", "model", "AIMessage", "AIMessageChunk"}


def maybe_json(v: Any) -> Any:
    """A JSON object/array encoded in a string (Langfuse, OTel attributes) parsed; anything else unchanged."""
    if isinstance(v, str) and 1 < len(v) <= _MAX_PARSE and (v[0] in "{[" and v[-1] in "}]" or v[0] == v[-1] == '"'):
        try:
            out = json.loads(v)
        except (ValueError, RecursionError):
            return v
        # a JSON string of JSON (Langfuse UI downloads encode trace input twice): one more level, no further
        return maybe_json(out) if isinstance(out, str) and out[:1] in "{[" else out
    return v


def _role(m: dict) -> Any:
    kw = m.get("kwargs") if isinstance(m.get("kwargs"), dict) else m
    role = kw.get("role") or kw.get("type") or m.get("type")
    if role == "constructor" and isinstance(m.get("id"), list) and m["id"]:
        role = m["id"][-1]  # LangChain serialisation: ["langchain", "schema", "messages", "AIMessage"]
    return role


def message_text(m: Any, depth: int = 0) -> str:
    """One chat message in any of the shapes above: its text, then its tool calls."""
    if not isinstance(m, dict):
        return content_text(m)
    kw = m.get("kwargs") if isinstance(m.get("kwargs"), dict) else m.get("data") if isinstance(
        m.get("data"), dict) else m
    extra = kw.get("additional_kwargs") if isinstance(kw.get("additional_kwargs"), dict) else {}
    calls = kw.get("tool_calls") or extra.get("tool_calls") or kw.get("function_call") or extra.get("function_call")
    if isinstance(kw.get("parts"), list):
        body = content_text(kw["parts"], depth + 1)
    elif isinstance(kw.get("content"), dict) and isinstance(kw["content"].get("parts"), list):
        body = content_text(kw["content"]["parts"], depth + 1)
    else:
        body = content_text(kw.get("content"), depth + 1)
    return join(body, tool_calls_text(calls))


def _is_message(d: dict) -> bool:
    return ("role" in d or "parts" in d or "kwargs" in d or "additional_kwargs" in d or "tool_calls" in d
            or (d.get("type") in _ASSISTANT | {"human", "tool", "system", "user"} and "content" in d))


def responses_items_text(items: list, depth: int = 0) -> str:
    """Responses API output items: messages, function calls, readable reasoning; encrypted reasoning omitted."""
    from masprism_batch.ingest.openai_chat import item_text  # one reader of Responses items

    return join(*(t for t in (item_text(it) for it in items if isinstance(it, dict)) if t))


def output_text(v: Any, depth: int = 0) -> str:
    """Readable text of an LLM call's output (see the module docstring for the envelopes read)."""
    v = maybe_json(v)
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    if depth > MAX_DEPTH:
        return dumps(v)
    if isinstance(v, list):
        if len(v) > 2 and all(isinstance(x, str) for x in v) and sum(map(len, v)) < 24 * len(v) and max(map(len, v)) <= 64:
            return "".join(v)  # streamed chunks (BeeAI keeps the tokens as a list): joined as the text they are
        dicts = [x for x in v if isinstance(x, dict)]
        if dicts and len(dicts) == len(v):
            from masprism_batch.ingest.openai_chat import is_response_item

            if any(is_response_item(x) for x in dicts):
                return responses_items_text(dicts, depth)
            if all(_is_message(x) for x in dicts):
                said = [x for x in dicts if isinstance(_role(x), str) and _role(x) in _ASSISTANT] or dicts[-1:]
                return join(*(message_text(x, depth + 1) for x in said))
        return join(*(output_text(x, depth + 1) for x in v))
    if not isinstance(v, dict):
        return content_text(v)
    if isinstance(v.get("choices"), list) and v["choices"] and isinstance(v["choices"][0], dict):
        c = v["choices"][0]
        msg = c.get("message") or c.get("delta") or {"content": c.get("text")}
        return message_text(msg, depth + 1)
    if isinstance(v.get("output"), list) and (v.get("object") == "response" or "output_text" in v or any(
            isinstance(x, dict) and "type" in x for x in v["output"])):
        return responses_items_text(v["output"], depth)
    if isinstance(v.get("candidates"), list) and v["candidates"] and isinstance(v["candidates"][0], dict):
        return message_text(v["candidates"][0].get("content") or {}, depth + 1)
    if isinstance(v.get("generations"), list):
        gens = v["generations"]
        gens = gens[0] if gens and isinstance(gens[0], list) else gens
        return join(*(message_text(g["message"], depth + 1) if isinstance(g, dict) and isinstance(
            g.get("message"), dict) else content_text(g.get("text") if isinstance(g, dict) else g) for g in gens))
    if _is_message(v) or (isinstance(v.get("content"), dict) and "parts" in v["content"]):
        return message_text(v, depth + 1)
    for k in ("message", "messages", "output", "final_output", "answer", "result", "response", "content", "text",
              "completion", "generated_text"):  # `message` first: LlamaIndex ChatResponse keeps `raw` beside it
        if k in v and v[k] is not None:
            inner = v[k]
            if k == "messages" and isinstance(inner, list) and inner:
                inner = inner[-1]
            return output_text(inner, depth + 1)
    return dumps({k: x for k, x in v.items() if k not in HOUSEKEEPING}) if v else ""


def value_text(v: Any) -> str:
    """A tool input or result: a string as is, a JSON string or object as compact JSON without housekeeping
    keys; a LangChain ToolMessage or MCP-style result reduced to its content."""
    v = maybe_json(v)
    if isinstance(v, str):
        return v
    if isinstance(v, dict):
        if v.get("type") == "tool" or "tool_call_id" in v or (v.get("lc") and isinstance(v.get("kwargs"), dict)):
            return message_text(v)
        if isinstance(v.get("content"), list) and v.get("content") and all(
                isinstance(p, dict) and "type" in p for p in v["content"]):
            return content_text(v["content"])  # MCP CallToolResult
        return dumps({k: x for k, x in v.items() if k not in HOUSEKEEPING or k in ("id", "text", "status")})
    return dumps(v) if v is not None else ""

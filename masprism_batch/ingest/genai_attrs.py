"""GenAI span attribute dialects -> step text: one reader for every span-shaped input (OTLP, OTel SDK dumps,
Jaeger, Tempo, Langfuse observation metadata).

Instrumentations write the same facts under different keys; each is read here, first match wins:
- LLM output: GenAI semantic conventions `gen_ai.output.messages` (JSON parts); OpenLLMetry
  `gen_ai.completion.N.content` / `.role` / `.tool_calls.M.name|arguments`; OpenInference
  `llm.output_messages.N.message.content` / `.tool_calls.M.tool_call.function.name|arguments`; Google ADK
  `gcp.vertex.agent.llm_response` (an `LlmResponse` JSON); any-agent `gen_ai.output`; span events
  `gen_ai.content.completion` (2024 conventions), `gen_ai.choice` / `gen_ai.assistant.message` (also from
  `resourceLogs`); OpenInference `output.value`.
- Tool call: name from `gen_ai.tool.name` / `tool.name` (else the span name without `execute_tool `,
  `running tool: `); arguments from `gen_ai.tool.call.arguments`, `gcp.vertex.agent.tool_call_args`,
  `tool_arguments` (pydantic-ai), `gen_ai.tool.args` (any-agent), `input.value`; result from
  `gen_ai.tool.call.result`, `gcp.vertex.agent.tool_response`, `tool_response`, `output.value`,
  `gen_ai.output`; the span's error (status message, `exception` events) is added by the reader
  (`status.span_error`).
- Agent: `gen_ai.agent.name`, `agent.name`, `agent_name`, else `invoke_agent X` / `agent_run [X]` span names.
"""

from __future__ import annotations

import re
from typing import Any

from masprism_batch.ingest.envelopes import maybe_json, message_text, output_text, value_text
from masprism_batch.ingest.messages import join, tool_call_line

_NUMBERED = re.compile(r"(gen_ai\.completion|llm\.output_messages)\.(\d+)\.(?:message\.)?(.+)$")
_CALL = re.compile(r"tool_calls\.(\d+)\.(?:tool_call\.)?(?:function\.)?(name|arguments)$")
_AGENT_SPAN = re.compile(r"^(?:invoke_agent|agent_run|create_agent)\s*\[?([^\[\]]+?)\]?$")
_TOOL_PREFIX = re.compile(r"^(?:execute_tool|running tool:|tool:)\s*", re.I)
ARG_KEYS = ("gen_ai.tool.call.arguments", "gcp.vertex.agent.tool_call_args", "tool_arguments", "gen_ai.tool.args",
            "input.value")
RESULT_KEYS = ("gen_ai.tool.call.result", "gcp.vertex.agent.tool_response", "tool_response", "output.value",
               "gen_ai.output")
_CHOICE_EVENTS = ("gen_ai.choice", "gen_ai.assistant.message")


def _numbered(a: dict[str, Any]) -> str:
    """OpenLLMetry / OpenInference flattened messages, in numeric order (.2. before .10.)."""
    msgs: dict[tuple[str, int], dict[str, Any]] = {}
    for k, v in a.items():
        if not (k.startswith("gen_ai.completion.") or k.startswith("llm.output_messages.")):
            continue
        m = _NUMBERED.match(k)
        if not m:
            continue
        msg = msgs.setdefault((m.group(1), int(m.group(2))), {"calls": {}})
        c = _CALL.match(m.group(3))
        if c:
            msg["calls"].setdefault(int(c.group(1)), {})[c.group(2)] = v
        else:
            msg[m.group(3)] = v
    plain = [m.get("content") for m in msgs.values() if not m["calls"]]
    if len(plain) == len(msgs) > 2 and all(isinstance(c, str) for c in plain) and sum(map(len, plain)) < 24 * len(plain):
        return "".join(str(msgs[k]["content"]) for k in sorted(msgs))  # streamed chunks, one per message: the text
    lines = []
    for key in sorted(msgs):
        msg = msgs[key]
        if msg.get("content") not in (None, ""):
            lines.append(str(msg["content"]))
        for j in sorted(msg["calls"]):
            c = msg["calls"][j]
            lines.append(tool_call_line({"name": c.get("name"), "arguments": c.get("arguments", "")}))
    return "\n".join(lines)


def _any_agent_output(v: Any) -> str:
    """any-agent `gen_ai.output`: text, or a JSON list of `{"tool.name", "tool.args"}` calls."""
    v = maybe_json(v)
    if isinstance(v, list) and v and all(isinstance(x, dict) and "tool.name" in x for x in v):
        return "\n".join(tool_call_line({"name": x["tool.name"], "arguments": x.get("tool.args")}) for x in v)
    return output_text(v)


def event_attrs(ev: dict[str, Any]) -> dict[str, Any]:
    a = ev.get("attributes")
    return a if isinstance(a, dict) else {}


def llm_output(a: dict[str, Any], events: list[dict[str, Any]]) -> str:
    """The text an LLM span produced (see the module docstring for the order of keys)."""
    if a.get("gen_ai.output.messages") is not None:
        return output_text(a["gen_ai.output.messages"])
    text = _numbered(a)
    if text:
        return text
    if a.get("gcp.vertex.agent.llm_response") not in (None, "", "{}"):
        return output_text(a["gcp.vertex.agent.llm_response"])
    if a.get("gen_ai.output") is not None:
        return _any_agent_output(a["gen_ai.output"])
    for ev in events:  # the 2024 conventions: completion JSON in a `gen_ai.content.completion` event
        if ev.get("name") == "gen_ai.content.completion" and event_attrs(ev).get("gen_ai.completion") is not None:
            return output_text(event_attrs(ev)["gen_ai.completion"])
    choices = [e for e in events if e.get("name") in _CHOICE_EVENTS]
    if choices:
        texts = []
        for ev in choices:
            ea = event_attrs(ev)
            body = ev.get("body", ea.get("message", ea.get("gen_ai.event.content", ea)))
            body = maybe_json(body)
            if isinstance(body, dict) and isinstance(maybe_json(body.get("message")), dict):
                body = maybe_json(body["message"])  # gen_ai.choice: {"index", "finish_reason", "message"}
            texts.append(message_text(body) if isinstance(body, dict) else output_text(body))
        return join(*texts)
    if a.get("output.value") is not None:
        return output_text(a["output.value"])
    return ""


def tool_name(a: dict[str, Any], span_name: str | None) -> str:
    for k in ("gen_ai.tool.name", "tool.name", "tool_name", "traceloop.entity.name"):
        if isinstance(a.get(k), str) and a[k]:
            return a[k]
    return _TOOL_PREFIX.sub("", span_name or "") or "?"


def _first(a: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for k in keys:
        v = a.get(k)
        if v is not None and v != "" and not (k.startswith("gcp.") and v in ({}, "{}")):
            return v
    return None


def tool_text(a: dict[str, Any], events: list[dict[str, Any]], span_name: str | None,
              args: Any = None, result: Any = None) -> str:
    """`Tool: name`, `Input: ...`, `Output: ...` (given values win over attributes)."""
    args = args if args not in (None, "", {}) else _first(a, ARG_KEYS)
    result = result if result not in (None, "", {}) else _first(a, RESULT_KEYS)
    parts = [f"Tool: {tool_name(a, span_name)}"]
    if args is not None:
        parts.append(f"Input: {value_text(args)}")
    if result is not None:
        parts.append(f"Output: {value_text(result)}")
    return "\n".join(parts)  # the span's error (exception events, status message) is added by its reader


def agent_name(a: dict[str, Any], span_name: str | None) -> str | None:
    for k in ("gen_ai.agent.name", "agent.name", "agent_name", "ag2.agent.name"):
        if isinstance(a.get(k), str) and a[k]:
            return a[k]
    m = _AGENT_SPAN.match(span_name or "")
    return m.group(1).strip() if m else None


# --- OTLP values (OTLP JSON, Tempo, OTLP logs; moved here from otel_genai.py) ---------------------------------
def value_d(v: Any, depth: int = 0) -> Any:
    """OTLP AnyValue -> Python value. Nested arrays/kvlists deeper than 32 levels are left raw, which
    bounds the recursion however deep a hostile document is."""
    if not isinstance(v, dict) or depth > 32:
        return v
    for k in ("stringValue", "boolValue", "doubleValue", "bytesValue"):
        if k in v:
            return v[k]
    if "intValue" in v:
        try:
            return int(v["intValue"])
        except (TypeError, ValueError):
            return v["intValue"]
    if "arrayValue" in v:
        vals = v["arrayValue"].get("values") if isinstance(v["arrayValue"], dict) else None
        return [value_d(x, depth + 1) for x in vals] if isinstance(vals, list) else []
    if "kvlistValue" in v:
        vals = v["kvlistValue"].get("values") if isinstance(v["kvlistValue"], dict) else None
        return {str(x.get("key")): value_d(x.get("value"), depth + 1)
                for x in (vals if isinstance(vals, list) else []) if isinstance(x, dict)}
    return None


def attrs(items: Any) -> dict[str, Any]:
    """OTLP attributes (a KeyValue list, or already a map) -> {key: value}."""
    if isinstance(items, dict):  # already a map (some SDK JSON dumps)
        return items
    out: dict[str, Any] = {}
    for it in items if isinstance(items, list) else []:
        if isinstance(it, dict) and isinstance(it.get("key"), str):
            out[it["key"]] = value_d(it.get("value"))
    return out

"""Which format one parsed JSON document is (`classify`): by its keys, most specific first.

Dict documents: SWE-agent `.traj`, `history` (OpenHands events, Who&When with its label fields, else an AG2
chat), OTLP / Tempo / `resourceLogs`, `spans` (an OTel SDK dump when its spans carry `context`, else TRAIL),
canonical `trace_id` + `steps`, TRAIL annotations, AG2 `chat_history`, Langfuse downloads / traces /
observations, LangSmith batch payloads / runs, Jaeger `data`, Langfuse `{"data"}` pages, τ-bench results and
transcripts, OpenHands `{"trajectory"}`, `messages` (AutoGen 0.4, LangGraph message state, OpenAI),
Chat Completions responses, Responses objects. Lists: by their first item. None when nothing fits: the
caller then lists the near misses (`near_miss.py`).
"""

from __future__ import annotations

from typing import Any

from masprism_batch.ingest import (
    adk_session,
    ag2,
    agent_logs,
    agentops,
    autogen_recorder,
    claude_code,
    crewai_log,
    inspect_ai,
    langfuse,
    langsmith,
    letta,
    openai_chat,
    openhands,
    otel_sdk,
    smolagents_runs,
    swe_agent,
    taubench,
)

# Who&When's own fields: a `history` without any of them is an AG2 chat, not a Who&When log
_WW_KEYS = ("question", "question_ID", "mistake_agent", "mistake_step", "mistake_reason", "ground_truth",
            "is_correct", "system_prompt", "level")


def _chat_list_kind(msgs: list) -> str | None:
    dicts = [m for m in msgs[:64] if isinstance(m, dict)]
    if not dicts:
        return None
    if any(ag2.is_autogen_message(m) for m in dicts):
        return "ag2"
    if any(openai_chat.is_response_item(m) for m in dicts):
        return "openai"
    if all(openai_chat.is_langchain_message(m) for m in dicts):
        return "openai"  # LangGraph / LangChain message state
    if all("role" in m and ("content" in m or "tool_calls" in m) for m in dicts):
        # AG2 names the speaker of every message; OpenAI messages name one rarely
        named = [m for m in dicts if m.get("role") not in ("tool", "function")]
        return "ag2" if named and all(isinstance(m.get("name"), str) for m in named) else "openai"
    return None


def _classify_dict(doc: dict) -> str | None:
    if swe_agent.is_traj(doc):
        return "swe-agent"
    if smolagents_runs.is_run_line(doc):
        return "smolagents"  # a benchmark runner's output line
    if letta.is_agent_file(doc):
        return "letta"
    if adk_session.is_session(doc):
        return "adk"
    if smolagents_runs.is_bus_message(doc):
        return "smolagents-bus"
    if otel_sdk.is_sdk_span(doc):
        return "otel-sdk"  # one span: a line of a span-per-line dump
    if "history" in doc:
        if openhands.events_of(doc) is not None:
            return "openhands"
        if any(k in doc for k in _WW_KEYS) or not isinstance(doc["history"], list):
            return "who-and-when"
        return _chat_list_kind(doc["history"]) and "ag2" or "who-and-when"
    if "resourceSpans" in doc or "resourceLogs" in doc or isinstance(doc.get("batches"), list) or (
            isinstance(doc.get("trace"), dict) and "resourceSpans" in doc["trace"]):
        return "otel"
    if "spans" in doc:
        if agentops.is_export(doc):
            return "agentops"
        spans = doc["spans"]
        s0 = spans[0] if isinstance(spans, list) and spans else None
        # an SDK span names its ids in `context`: even a broken one is reported as an SDK dump, not as TRAIL
        return "otel-sdk" if isinstance(s0, dict) and ("context" in s0 and "span_id" not in s0) else "trail"
    if "trace_id" in doc and "steps" in doc:
        return "jsonl"
    if claude_code.is_line(doc):
        return "claude-code"
    if isinstance(doc.get("errors"), list) and ("scores" in doc or "trace_id" in doc):
        return "trail-annotation"
    if "chat_history" in doc:
        return "ag2"
    if langfuse.is_download(doc) or langfuse.is_trace(doc) or langfuse.is_observation(doc):
        return "langfuse"
    if langsmith.is_batch(doc) or langsmith.is_run(doc) or (
            isinstance(doc.get("runs"), list) and doc["runs"] and langsmith.is_run(doc["runs"][0])):
        return "langsmith"
    if otel_sdk.is_jaeger(doc):
        return "jaeger"
    if isinstance(doc.get("data"), list) and doc["data"] and (
            langfuse.is_trace(doc["data"][0]) or langfuse.is_observation(doc["data"][0])):
        return "langfuse"
    if inspect_ai.is_log(doc):
        return "inspect"
    if taubench.is_transcript(doc) or taubench.is_result(doc):
        return "tau-bench"
    if openhands.events_of(doc) is not None:
        return "openhands"
    if agent_logs.is_mini_swe(doc):
        return "mini-swe-agent"
    if ag2.is_agenteval(doc):
        return "ag2"
    if isinstance(doc.get("messages"), list):
        msgs = doc["messages"][:64]
        if agent_logs.is_smolagents(msgs):
            return "smolagents"
        if any(ag2.is_autogen_message(m) for m in msgs):
            return "ag2"
        return "langgraph-messages" if any(openai_chat.is_langchain_message(m) for m in msgs) else "openai"
    choices = doc.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict) and isinstance(
            choices[0].get("message"), dict):
        return "openai"  # a Chat Completions response alone
    if doc.get("object") == "response" or isinstance(doc.get("input"), list) and (
            _chat_list_kind(doc["input"]) == "openai"):
        return "openai"
    return None


def classify(doc: Any) -> str | None:
    if isinstance(doc, dict):
        return _classify_dict(doc)
    if isinstance(doc, str) and doc[:1] == "{":  # a document JSON-encoded once more (Letta's newer .af exports)
        return "letta" if letta.is_agent_file(letta.unwrap(doc)) else None
    if isinstance(doc, list) and doc and isinstance(doc[0], dict):
        if otel_sdk.is_sdk_span(doc[0]):
            return "otel-sdk"
        if "span_id" in doc[0]:
            return "trail"
        if taubench.is_result(doc[0]):
            return "tau-bench"
        if openhands.events_of(doc) is not None:
            return "openhands"
        if langsmith.is_run(doc[0]):
            return "langsmith"
        if langfuse.is_trace(doc[0]) or langfuse.is_observation(doc[0]) or langfuse.is_download(doc[0]):
            return "langfuse"
        if claude_code.is_line(doc[0]):
            return "claude-code"
        if crewai_log.is_json_log(doc):
            return "crewai"
        if autogen_recorder.is_session(doc):
            return "autogen-recorder"
        if adk_session.is_session(doc):
            return "adk"
        if agent_logs.is_smolagents(doc):
            return "smolagents"
        if agent_logs.is_mini_swe(doc):
            return "mini-swe-agent"
        return _chat_list_kind(doc)
    return None



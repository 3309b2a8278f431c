"""One parsed JSON document of a known kind -> canonical traces: the formats' names, what a message calls each,
and the reader of each kind (`parse_doc`); a document of no known kind is `unknown_format`, naming the near misses.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from masprism_batch.ingest import (
    adk_session,
    ag2,
    agent_logs,
    agentops,
    autogen_recorder,
    canonical,
    claude_code,
    crewai_log,
    inspect_ai,
    langfuse,
    langsmith,
    letta,
    mapping,
    openai_chat,
    openhands,
    openinference,
    otel_genai,
    otel_sdk,
    smolagents_runs,
    swe_agent,
    taubench,
    who_and_when,
)
from masprism_batch.ingest.common import (
    Context,
    IngestError,
)
from masprism_batch.ingest.near_miss import near_misses
from masprism_batch.trace import Trace

FORMATS = ("auto", "who-and-when", "trail", "otel", "tempo", "otel-sdk", "jaeger", "ag2", "autogen", "openai",
           "langsmith", "langgraph", "langfuse", "swe-agent", "openhands", "tau-bench", "inspect", "smolagents",
           "mini-swe-agent", "claude-code", "agentops", "crewai", "adk", "letta", "jsonl", "parquet")
ALIASES = {"autogen": "ag2", "langgraph": "langsmith", "tempo": "otel"}
# what each kind is called in messages (a rejection names the format it assumed)
LABELS = {"who-and-when": "Who&When", "trail": "TRAIL/OpenInference", "otel": "OTLP JSON", "otel-sdk":
          "OTel SDK span dump", "jaeger": "Jaeger JSON", "ag2": "AG2/AutoGen", "openai": "OpenAI messages",
          "langgraph-messages": "LangGraph message state",
          "langsmith": "LangSmith/LangGraph", "langfuse": "Langfuse", "swe-agent": "SWE-agent trajectory",
          "openhands": "OpenHands events", "tau-bench": "τ-bench", "inspect": "Inspect AI log",
          "smolagents": "smolagents memory", "mini-swe-agent": "mini-swe-agent trajectory",
          "claude-code": "Claude Code transcript", "agentops": "AgentOps trace export", "map": "--map mapping",
          "jsonl": "canonical JSON lines", "smolagents-bus": "smolagents message bus", "crewai": "CrewAI output log",
          "autogen-recorder": "AutoGen recorder session", "adk": "Google ADK session", "letta": "Letta agent file",
          "trail-annotation": "TRAIL annotation", "parquet": "canonical Parquet"}
TRIED = ", ".join(v for k, v in LABELS.items() if k not in ("trail-annotation", "parquet"))
CANONICAL_EXAMPLE = ('{"trace_id": "t1", "source": "my-app", "steps": [{"agent": "planner", "role": "assistant", '
                     '"content": "..."}]}')
VERBATIM = ("jsonl", "parquet", "who-and-when")  # step text copied as given: no empty-step check


def unknown_format(doc: Any) -> IngestError:
    keys = sorted(doc)[:8] if isinstance(doc, dict) else type(doc).__name__
    near = near_misses(doc)
    hint = f" Near misses: {'; '.join(near)}." if near else ""
    return IngestError("unknown_format", f"cannot tell the format of this JSON (top level: {keys}); tried {TRIED}."
                       f"{hint} Force one with --format (see `masprism-batch ingest --help`), or convert to "
                       f"canonical JSON lines (docs/schema.md), one trace per line: {CANONICAL_EXAMPLE}")


_DOC_READERS = {"who-and-when": who_and_when.parse, "trail": openinference.parse, "otel-sdk": otel_sdk.parse_sdk,
                "jaeger": otel_sdk.parse_jaeger, "langsmith": langsmith.parse, "langfuse": langfuse.parse,
                "swe-agent": swe_agent.parse, "openhands": openhands.parse, "inspect": inspect_ai.parse,
                "agentops": agentops.parse, "crewai": crewai_log.parse_entries,
                "autogen-recorder": autogen_recorder.parse, "adk": adk_session.parse, "letta": letta.parse}


def parse_doc(doc: Any, kind: str | None, ctx: Context, line: int | None = None) -> Iterator[Trace]:
    """One parsed JSON document of a known kind (None: not recognised)."""
    kind = ALIASES.get(kind, kind)
    if kind is not None:
        ctx.fmt, ctx.rendered = LABELS.get(kind, kind), kind not in VERBATIM
    if kind == "langsmith" and isinstance(doc, dict) and isinstance(doc.get("messages"), list) and not (
            langsmith.is_run(doc) or "runs" in doc):
        kind = "langgraph-messages"  # --format langgraph on a graph's message state, not a run tree
        ctx.fmt = LABELS[kind]
    simple = _DOC_READERS.get(kind)
    if simple is not None:
        yield from simple(doc, ctx)
    elif kind == "otel":
        yield from otel_genai.parse([doc], ctx)
    elif kind in ("ag2", "openai", "langgraph-messages", "tau-bench"):
        yield from {"ag2": ag2.parse, "tau-bench": taubench.parse}.get(kind, openai_chat.parse)(doc, ctx, line)
    elif kind == "smolagents" and smolagents_runs.is_run_line(doc):  # a benchmark runner's output line: one run
        yield smolagents_runs.run_trace(doc, agent_logs.trace_id(ctx, kind, line))
    elif kind in ("smolagents", "mini-swe-agent"):
        yield from agent_logs.parse(doc, ctx, kind, line)
    elif kind == "claude-code":
        yield from claude_code.parse_lines(doc if isinstance(doc, list) else [doc], ctx)
    elif kind == "smolagents-bus":
        yield from smolagents_runs.parse_bus(doc if isinstance(doc, list) else [doc], ctx)
    elif kind == "map":  # ingest --map: the user's declarative mapping (mapping.py)
        yield from mapping.parse(doc, ctx, ctx.mapping, line)
    elif kind == "jsonl":
        yield canonical.from_obj(doc, None)
    elif kind == "trail-annotation":
        raise IngestError("not_a_trace", "a TRAIL annotation (labels only): it is read with its trace when the "
                          "dataset folder (with traces/ beside annotations/) is the input")
    else:
        raise unknown_format(doc)

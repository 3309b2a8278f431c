"""The chat / run-tree formats (AG2/AutoGen, OpenAI, LangSmith/LangGraph, Langfuse) from fixtures written from
each format's public documentation (tests/data/formats/), detection, forced formats and malformed records."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from masprism_batch.ingest import FORMATS, ingest, read_inputs
from masprism_batch.outdir.reads import read_dataset

FIX = Path(__file__).resolve().parents[1] / "data" / "formats"


def _read(path, fmt="auto"):
    errors: list[dict] = []
    traces = list(read_inputs([str(path)], fmt, errors.append))
    return traces, errors


def _one(name, fmt="auto"):
    traces, errors = _read(FIX / name, fmt)
    assert errors == [] and len(traces) == 1, errors
    return traces[0]


def _cols(t):
    return [(s.agent, s.role, s.kind) for s in t.steps]


# ---------------------------------------------------------------- AG2 / AutoGen

@pytest.mark.parametrize("fmt", ["auto", "ag2", "autogen"])
def test_ag2_bare_chat_history(fmt):
    t = _one("ag2_chat_history.json", fmt)
    assert (t.source, t.system) == ("ag2", "ag2")
    assert re.fullmatch(r"ag2/ag2_chat_history~[0-9a-f]{16}", t.trace_id)  # the file's name, and its run's digest
    assert [s.agent for s in t.steps] == ["user_proxy", "researcher", "researcher", "user_proxy", "analyst",
                                          "user_proxy"]
    assert t.steps[2].content == 'Tool call: city_stats({"city": "Sydney"})'
    assert (t.steps[3].role, t.steps[3].kind) == ("tool", "tool") and "5450000" in t.steps[3].content
    assert t.question.startswith("What is the population density")
    assert t.labels is None


def test_ag2_chat_result_wrapper_and_history_wrapper(tmp_path):
    t = _one("ag2_chat_result.json")
    assert t.source == "ag2" and [s.agent for s in t.steps] == ["user_proxy", "assistant", "user_proxy", "assistant"]
    assert t.metadata["chat_id"] == 72 and "stock_price_ytd.png" in t.metadata["summary"]
    # {"history": [...]} without Who&When's label fields is AG2, never Who&When's source/system
    doc = json.loads((FIX / "ag2_chat_history.json").read_text())
    (tmp_path / "h.json").write_text(json.dumps({"history": doc}))
    t2, errors = _read(tmp_path / "h.json")
    assert errors == [] and t2[0].source == "ag2" and t2[0].system == "ag2"
    assert "who-and-when" not in t2[0].source and t2[0].system != "CaptainAgent"


def test_autogen_task_result():
    t = _one("autogen_task_result.json")  # a tool result speaks as its tool (issue 47), not the executing agent
    assert (t.source, t.system) == ("autogen", "autogen-agentchat")
    assert _cols(t) == [("user", "user", "message"), ("weather_agent", "assistant", "message"),
                        ("get_weather", "tool", "tool"), ("weather_agent", "assistant", "message"),
                        ("weather_agent", "assistant", "message"), ("travel_agent", "assistant", "message")]
    assert t.steps[1].content == 'Tool call: get_weather({"city":"New York"})'
    assert t.steps[2].content.startswith("Tool result get_weather: The weather in New York")
    assert "Handoff to: travel_agent" in t.steps[4].content
    assert t.metadata["stop_reason"].startswith("Text 'TERMINATE'")


# ---------------------------------------------------------------- OpenAI

@pytest.mark.parametrize("fmt", ["auto", "openai"])
def test_openai_chat_tool_calls_and_parts(fmt):
    t = _one("openai_chat.json", fmt)
    assert (t.source, t.system) == ("openai", "openai-chat")
    assert _cols(t) == [("developer", "developer", "message"), ("user", "user", "message"),
                        ("assistant", "assistant", "message"), ("get_weather", "tool", "tool"),
                        ("assistant", "assistant", "message")]
    assert t.steps[1].content.endswith("[image]") and "weather like in Paris" in t.steps[1].content
    assert t.steps[2].content == 'Tool call: get_weather({"location":"Paris, France"})'
    assert "rain" in t.steps[3].content and t.metadata["model"] == "gpt-4o"


def test_openai_jsonl_one_trace_per_line():
    traces, errors = _read(FIX / "openai_chat.jsonl")
    ids = [t.trace_id for t in traces]  # a line is named by its run's content, not its number (ingest/run_ids.py)
    assert errors == [] and len(set(ids)) == 2 and all(re.fullmatch(r"openai/[0-9a-f]{16}", i) for i in ids)
    assert all([s.role for s in t.steps] == ["system", "user", "assistant"] for t in traces)


def test_openai_responses_items():
    t = _one("openai_responses.json")
    assert (t.system, t.trace_id) == ("openai-responses", "resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b")
    assert [s.agent for s in t.steps] == ["developer", "user", "assistant", "assistant", "get_weather", "assistant"]
    assert t.steps[2].content.startswith("Reasoning: I should call get_weather")
    assert t.steps[4].kind == "tool" and t.question == "What is the weather like in Paris today?"


# ---------------------------------------------------------------- LangSmith / LangGraph

@pytest.mark.parametrize("fmt", ["auto", "langsmith", "langgraph"])
def test_langgraph_run_tree(fmt):
    t = _one("langsmith_langgraph_run.json", fmt)
    assert (t.source, t.system, t.trace_id) == ("langsmith", "LangGraph", "1f0a8c1e-0000-4000-8000-000000000001")
    # the task, kept only in the first model call's input, is the first step (issue 34)
    assert _cols(t) == [("user", "user", "message"), ("agent", "assistant", "llm"), ("tools", "tool", "tool"),
                        ("agent", "assistant", "llm")]
    assert t.steps[0].content == t.question and t.question.startswith("Who won the 2022")
    assert "Tool call: tavily_search_results_json" in t.steps[1].content
    assert "Mbappe won the Golden Boot" in t.steps[2].content
    assert t.steps[3].content.startswith("France won") and t.steps[3].span_id.endswith("7")
    assert t.steps[3].parent_span_id.endswith("6")


def test_langsmith_flat_runs_jsonl_with_parent_run_id():
    t = _one("langsmith_runs.jsonl")
    # the root run's input is the task, a step of its own (no model call's input repeats it)
    assert t.system == "AgentExecutor" and [s.kind for s in t.steps] == ["message", "llm", "tool", "llm"]
    assert t.steps[0].content == t.question == "What is 17 * 23?"
    assert "Tool call: calculator" in t.steps[1].content
    assert t.steps[2].content.endswith("Error: ValueError: unsupported operand")


def test_langsmith_list_order_independent(tmp_path):
    # the same runs as one {"runs": [...]} document, reversed: same steps (ordered by start_time)
    runs = [json.loads(x) for x in (FIX / "langsmith_runs.jsonl").read_text().splitlines()]
    (tmp_path / "runs.json").write_text(json.dumps({"runs": runs[::-1]}))
    t = _one("langsmith_runs.jsonl")
    (t2,), errors = _read(tmp_path / "runs.json")
    assert errors == [] and [s.content for s in t2.steps] == [s.content for s in t.steps]


# ---------------------------------------------------------------- Langfuse

@pytest.mark.parametrize("fmt", ["auto", "langfuse"])
def test_langfuse_trace(fmt):
    t = _one("langfuse_trace.json", fmt)
    assert (t.source, t.system) == ("langfuse", "research-crew")
    # the trace's input (the task) first, then each generation's new input message before it (issue 34)
    assert _cols(t) == [("user", "user", "message"), ("user", "user", "message"), ("researcher", "assistant", "llm"),
                        ("researcher", "tool", "tool"), ("researcher", "event", "other"),
                        ("user", "user", "message"), ("writer", "assistant", "llm")]
    assert [t.steps[i].content for i in (0, 1, 5)] == [
        "Summarise the latest Mars rover findings", "Find news about the Mars rover", "Write the summary"]
    assert t.steps[2].content == 'Tool call: web_search({"q": "Mars rover news"})'
    assert "organic molecules" in t.steps[3].content and "WARNING: search cache unavailable" in t.steps[4].content
    assert t.question == "Summarise the latest Mars rover findings" and t.metadata["sessionId"] == "session-17"


def test_langfuse_observations_alone_grouped_by_trace(tmp_path):
    doc = json.loads((FIX / "langfuse_trace.json").read_text())
    (tmp_path / "obs.jsonl").write_text("\n".join(json.dumps(o) for o in doc["observations"][::-1]) + "\n")
    (t,), errors = _read(tmp_path / "obs.jsonl")
    # no trace object: the generations' inputs are the only context (2 steps), the first one the task
    assert errors == [] and t.trace_id == doc["id"] and len(t.steps) == 6
    assert t.question == "Find news about the Mars rover"


# ---------------------------------------------------------------- malformed instances, forcing, unknown

MALFORMED = {
    "ag2": ([{"content": "hi", "role": "user", "name": "a"}, "not a message"], "invalid_record"),
    "autogen": ({"messages": [{"source": "user", "type": "TextMessage", "content": "x"},
                              {"source": 3, "type": "TextMessage", "content": "y"}]}, "invalid_record"),
    "openai": ({"messages": [{"role": "user", "content": "hi"}, {"role": "robot", "content": "?"}]}, "invalid_record"),
    "openai-empty": ({"messages": []}, "empty_trace"),
    "langsmith": ({"id": "r1", "run_type": "chain", "name": "x", "child_runs": [{"name": "no id"}]}, "invalid_record"),
    "langfuse": ({"id": "t1", "name": "x", "observations": [{"id": "o1", "type": "NOPE"}]}, "invalid_record"),
    "langfuse-ids-only": ({"id": "t1", "name": "x", "observations": ["o1", "o2"]}, "invalid_record"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_instance_is_an_error_row_with_a_reason(tmp_path, case):
    doc, reason = MALFORMED[case]
    fmt = case.split("-")[0]
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    for f in ("auto", fmt):
        traces, errors = _read(tmp_path / "bad.json", f)
        assert traces == [] and len(errors) == 1, (f, errors)
        assert errors[0]["reason"] == reason and errors[0]["message"] and errors[0]["input_path"].endswith("bad.json")


def test_forced_format_on_another_format_is_an_error_row():
    for fmt, name in [("openai", "langfuse_trace.json"), ("langfuse", "openai_chat.json"),
                      ("langsmith", "ag2_chat_history.json"), ("ag2", "langsmith_langgraph_run.json")]:
        traces, errors = _read(FIX / name, fmt)
        assert traces == [] and errors and errors[0]["reason"] in ("invalid_record", "empty_trace"), (fmt, errors)


def test_unknown_format_names_formats_and_canonical_example(tmp_path):
    (tmp_path / "x.json").write_text(json.dumps({"foo": 1}))
    _, errors = _read(tmp_path / "x.json")
    msg = errors[0]["message"]
    assert errors[0]["reason"] == "unknown_format"
    for name in ("AG2", "OpenAI", "LangSmith", "Langfuse", "OTLP", "Who&When", "canonical", "--format"):
        assert name in msg
    example = msg[msg.index('{"trace_id"'):]
    assert json.loads(example)["steps"][0]["content"]  # the one-line example is valid canonical JSON


def test_formats_listed_and_whole_folder_ingests(tmp_path):
    for f in ("ag2", "autogen", "openai", "langsmith", "langgraph", "langfuse", "otel-sdk", "jaeger", "tempo",
              "swe-agent", "openhands", "tau-bench"):
        assert f in FORMATS
    # the top level is one example per original format (tests/cli/test_sample.py samples it whole); the
    # shapes of issue 25 live in _shapes/, which a folder walk skips (tests/ingest/test_real_shapes.py)
    s = ingest([str(FIX)], tmp_path / "OUT", progress=False)
    assert s.error_rows == 0 and s.traces == 12
    assert dict(s.by_source) == {"ag2": 2, "autogen": 1, "openai": 4, "langsmith": 2, "langfuse": 1, "otel": 1,
                                 "my-app": 1}
    rows = read_dataset(tmp_path / "OUT" / "traces").to_pylist()
    assert not any(r["source"].startswith("who-and-when") or r["system"] in ("CaptainAgent", "Magentic-One")
                   for r in rows)


@pytest.mark.parametrize("doc", [
    '[{"name": "a", "role": "user", "content": %s}]' % ("[" * 5000 + '"x"' + "]" * 5000),
    '{"messages": [{"role": "user", "content": [%s]}]}' % ('{"content": ' * 3000 + '"x"' + "}" * 3000),
    '{"id": "r", "run_type": "chain", "name": "x", "child_runs": [{"id": "l", "run_type": "tool", "inputs": %s}]}'
    % ("[" * 3000 + '"x"' + "]" * 3000),
    '{"id": "t", "observations": [{"id": "o", "type": "GENERATION", "output": %s}]}'
    % ('{"content": ' * 3000 + '"x"' + "}" * 3000),
], ids=["ag2", "openai", "langsmith", "langfuse"])
def test_deeply_nested_content_is_ingested_not_an_internal_error(tmp_path, doc):
    (tmp_path / "deep.json").write_text(doc)
    traces, errors = _read(tmp_path / "deep.json")
    assert errors == [] and len(traces) == 1 and traces[0].steps


def test_unknown_json_lines_file_is_one_unknown_format_row(tmp_path):
    (tmp_path / "x.jsonl").write_text('{"event": "start"}\n{"event": "stop"}\n')
    traces, errors = _read(tmp_path / "x.jsonl")
    assert traces == [] and [e["reason"] for e in errors] == ["unknown_format"]
    assert "canonical" in errors[0]["message"] and '{"trace_id"' in errors[0]["message"]


def test_otel_and_canonical_examples():
    t = _one("otel_genai.json", "otel")
    assert (t.source, t.system) == ("otel", "travel-planner")
    assert _cols(t) == [("planner", "assistant", "llm"), ("planner", "tool", "tool"), ("planner", "assistant", "llm")]
    assert "Tool call: get_weather" in t.steps[0].content and "rainy, 57F" in t.steps[1].content
    c = _one("canonical.jsonl", "jsonl")
    assert (c.trace_id, c.source) == ("my-app/run-0001", "my-app") and [s.agent for s in c.steps] == [
        "router", "billing", "billing"]


def test_langgraph_subgraph_runs_belong_to_the_top_level_node(tmp_path):
    meta = {"langgraph_node": "agent", "langgraph_checkpoint_ns": "research_expert:1f0a|agent:2b3c"}
    runs = [{"id": "root", "run_type": "chain", "name": "supervisor-graph"},
            {"id": "l1", "parent_run_id": "root", "run_type": "llm", "name": "ChatOpenAI",
             "start_time": "2025-01-01T00:00:01", "extra": {"metadata": meta},
             "outputs": {"generations": [[{"text": "searching"}]]}},
            {"id": "l2", "parent_run_id": "root", "run_type": "llm", "name": "ChatOpenAI",
             "start_time": "2025-01-01T00:00:02",
             "extra": {"metadata": {"langgraph_node": "supervisor", "langgraph_checkpoint_ns": "supervisor:9"}},
             "outputs": {"generations": [[{"text": "done"}]]}}]
    (tmp_path / "runs.json").write_text(json.dumps(runs))
    (t,), errors = _read(tmp_path / "runs.json")
    assert errors == [] and [s.agent for s in t.steps] == ["research_expert", "supervisor"]

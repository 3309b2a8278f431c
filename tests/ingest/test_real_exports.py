"""Every real export in ../shared/data/real_exports (files other projects' own code wrote; README there names
each source) ingests exactly: exit 0, the right number of traces, the speaking agents, no empty step, the run's
answers, tool calls and tool results in the steps, and no provider envelope; and (issue 34) the task in
`question` and as a step, the system instruction and earlier turns each exactly one step, one step per action.
Skipped when the folder is absent."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

from masprism_batch.cli import EXIT_OK, app
from masprism_batch.ingest import WARNING_REASONS, read_inputs
from masprism_batch.outdir.reads import read_dataset

# file -> (traces, agents that must speak, agents that must not, texts that must appear in the steps)
EXPECTED = {
    "langfuse/agno-2025-06-11.json": (1, {"Agent"}, set(), [
        "Tool call: duckduckgo_search", "currently trending on Twitter", "Twitter. It's what's happening",
        "To find out what's currently trending on Twitter"]),
    "langfuse/autogen-2025-06-06.json": (1, {"autogen-chat-trace"}, set(), ["Hello World!"]),
    "langfuse/google-adk-2025-08-28.json": (1, {"hello_agent"}, set(), [
        "Tool call: say_hello", "Tool: say_hello", '"greeting": "Hello Langfuse', "Hello Langfuse \U0001f44b!"]),
    "langfuse/langgraph-2025-08-22.json": (1, {"agent", "tools"}, {"should_continue"}, [
        "Tool call: Web-Search", '"query": "example"', "https://example.com", 'The search for "example"']),
    "langfuse/openai-agents-2025-09-30.json": (1, {"Hello world"}, set(), [
        "Tool call: get_weather", '"city": "Tokyo"', "The weather in Tokyo is sunny.",
        "The weather in Tokyo is currently sunny"]),
    "langfuse/pydantic-ai-tools-2025-12-04.json": (1, {"joke_agent", "evaluator_agent"}, {"running 3 tools"}, [
        "Tool call: get_pun_suggestion", "Pun idea: Play on words", "Why do programmers hate nature?",
        "Tool call: final_result"]),
    "langsmith/langsmith_js_wrap_openai_default.json": (1, {"ChatOpenAI"}, set(), ["Howdy! How can I assist you"]),
    "langsmith/langsmith_py_wrap_openai_stream.json": (1, {"ChatOpenAI"}, set(), ["Howdy! How can I assist you"]),
    "openai-chat/pydai-multiple_agent_tool_calls.request.json": (1, {"user", "assistant", "get_capital"}, set(), [
        'Tool call: get_capital({"country":"France"})', "Paris", "The capital of France is Paris."]),
    "openai-chat/pydai-multiple_agent_tool_calls.response.json": (1, {"assistant"}, set(), [
        "The capital of England is London."]),
    "openai-responses/pydai-resp_web_search_tool.request.json": (1, {"user", "assistant"}, set(), [
        "weather: San Francisco, CA", "mostly sunny and pleasant", "how about Mexico City?"]),
    "openhands/basic.json": (1, {"user", "agent", "environment"}, set(), [
        "Please create a simple 2048 game", "Tool call: str_replace_editor", "/workspace/game_2048.py",
        "I've created a simple implementation of the 2048 game"]),
    "otel-sdk-spans/anyagent-LANGCHAIN_trace.json": (1, {"any_agent"}, set(), [
        "Tool call: get_current_time", '"timezone": "America/New_York"', "2025-09-16T09:16:41-04:00",
        "Tool call: write_file", "Here are the steps I have taken"]),
    "otel-sdk-spans/anyagent-OPENAI_trace.json": (1, {"any_agent"}, set(), [
        "Tool call: get_current_time", "2025-09-16T08:43:13-04:00", "Tool call: write_file",
        "Write the year to a file."]),
    "swe-agent/function_calling_simple.traj": (1, {"main", "find_file", "submit"}, set(), [
        "Tool call: find_file", "missing_colon.py", "8.2", "diff --git a/tests/missing_colon.py"]),
    "taubench/MockAirlineDomainEnv-few_shot.jsonl": (19, {"user", "assistant", "tool"}, set(), [
        "I need to cancel my flights from MCO to CLT", "Error: user not found"]),
}
# file -> (the task, as read from the file by hand; steps of the first trace: one per context message, model call and
# tool call; texts of the system instruction and earlier turns, each in exactly one step). None: the file has no
# user input (a response alone).
CONTEXT = {
    "langfuse/agno-2025-06-11.json": ("What is currently trending on Twitter?", 5, [
        "- Use markdown to format your answers."]),
    "langfuse/autogen-2025-06-06.json": ("Say 'Hello World!'", 3, [
        "You are a helpful AI assistant. Solve tasks using your tools. Reply with TERMINATE"]),
    "langfuse/google-adk-2025-08-28.json": ("hi", 5, ["Always greet using the say_hello tool."]),
    "langfuse/langgraph-2025-08-22.json": ("Search the web for 'example' and summarize.", 5, ["Be helpful!"]),
    "langfuse/openai-agents-2025-09-30.json": ("What's the weather in Tokyo?", 5, ["You are a helpful agent."]),
    "langfuse/pydantic-ai-tools-2025-12-04.json": (
        "Select and call THREE of the available tools to get joke suggestions about 'programming'.", 12, [
            "You are a creative joke writer.", "Now write a funny joke about 'programming'",
            "You are a joke critic.", "Rate this joke:"]),
    "langsmith/langsmith_js_wrap_openai_default.json": ("howdy", 2, []),
    "langsmith/langsmith_py_wrap_openai_stream.json": ("howdy", 2, []),
    "openai-chat/pydai-multiple_agent_tool_calls.request.json": ("What is the capital of France?", 7, [
        "What is the capital of England?"]),
    "openai-chat/pydai-multiple_agent_tool_calls.response.json": (None, 1, []),
    "openai-responses/pydai-resp_web_search_tool.request.json": ("What is the weather in San Francisco today?", 5, [
        "You are a helpful assistant.", "how about Mexico City?"]),
    "openhands/basic.json": ("Please create a simple 2048 game. No need to run it.", 4, []),
    "otel-sdk-spans/anyagent-LANGCHAIN_trace.json": ("Find what year it is in the America/New_York timezone", 8, [
        "Use the available tools to answer."]),
    "otel-sdk-spans/anyagent-OPENAI_trace.json": ("Find what year it is in the America/New_York timezone", 7, [
        "Use the available tools to answer."]),
    "swe-agent/function_calling_simple.traj": ("We're currently solving the following issue", 12, [
        "SETTING: You are an autonomous programmer"]),
    "taubench/MockAirlineDomainEnv-few_shot.jsonl": ("Hi, I need to cancel my flights from MCO to CLT, please.", 11,
                                                     []),
}
WARNINGS = {"openai-responses/pydai-resp_web_search_tool.request.json": {"unreadable_reasoning"}}
ENVELOPE = ('"usage"', "system_fingerprint", "prompt_tokens", "chatcmpl-", "usage_metadata", "encrypted_content",
            "candidates_token_count", '"billing"')


@pytest.fixture
def real_exports(shared_data):
    d = shared_data / "real_exports"
    if not d.is_dir():
        pytest.skip(f"real exports not present at {d}")
    return d


@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_real_export_reads_exactly(real_exports, rel):
    path = real_exports / rel
    if not path.is_file():
        pytest.skip(f"{rel} not in this copy of real_exports")
    n, speak, silent, texts = EXPECTED[rel]
    errors: list[dict] = []
    traces = list(read_inputs([str(path)], "auto", errors.append))
    assert all(e["reason"] in WARNING_REASONS for e in errors), errors
    assert {e["reason"] for e in errors} <= WARNINGS.get(rel, set()), errors
    assert len(traces) == n
    agents = {s.agent for t in traces for s in t.steps}
    assert speak <= agents and not (silent & agents), agents
    text = "\n".join(s.content for t in traces for s in t.steps)
    for want in texts:
        assert want in text, want
    task, n_steps, context = CONTEXT[rel]
    first = traces[0]
    assert len(first.steps) == n_steps, [s.content[:60] for s in first.steps]
    if task is None:
        assert not first.question and not any(s.role == "user" for s in first.steps)
    else:  # the task fills `question` and is a user step, once
        assert first.question and first.question.startswith(task), first.question
        assert [s.role for s in first.steps if s.content == first.question] == ["user"]
    for want in context:  # the system instruction and earlier turns: each exactly once
        assert sum(want in s.content for s in first.steps) == 1, want
    far = datetime.max.replace(tzinfo=timezone.utc)
    for t in traces:
        assert t.question or task is None, "no task"
        assert t.steps and all(s.content.strip() for s in t.steps), "an empty step"
        assert not any(e in s.content for s in t.steps for e in ENVELOPE)
        times = [s.start_time or far for s in t.steps]
        assert times == sorted(times)


def test_real_exports_folder_cli_exit_0(real_exports, tmp_path):
    res = CliRunner().invoke(app, ["ingest", str(real_exports), "-o", str(tmp_path / "OUT"), "--no-progress"])
    assert res.exit_code == EXIT_OK, res.output
    rows = read_dataset(tmp_path / "OUT" / "traces").to_pylist()
    present = [rel for rel in EXPECTED if (real_exports / rel).is_file()]
    assert len(rows) == sum(EXPECTED[rel][0] for rel in present)
    # every file of the folder is a real export we expect (a new one needs its expectations above)
    files = sorted(str(p.relative_to(real_exports)) for p in real_exports.rglob("*") if p.is_file()
                   and p.suffix != ".md")
    assert files == sorted(present)


# Real files of the new sources kept in the repository (tests/data/formats/_real, NOTICE there): the same checks.
# file -> (source, agents that must speak, the task, steps (one per message / action), texts in exactly one step)
OURS = Path(__file__).resolve().parents[1] / "data" / "formats" / "_real"
KEPT = {
    "claude_code/representative_messages.jsonl": ("claude-code", {"user", "claude-code", "Edit", "Bash"},
                                                  "Hello Claude! Can you help me understand", 11, [
                                                      "Can you run that example to show the output?"]),
    "inspect_ai/log_formats.eval": ("inspect", {"system", "user", "assistant"}, "Is the following statement", 3, [
        "Please note: In the following EXERCISE"]),
    "inspect_ai/log_formats.json": ("inspect", {"system", "user", "assistant"}, "Is the following statement", 3, [
        "Please note: In the following EXERCISE"]),
    "mini_swe_agent/github_issue.traj.json": ("mini-swe-agent", {"system", "user", "mini-swe-agent", "environment"},
                                              "Please solve this issue: GitHub Issue", 22, [
                                                  "You are a helpful assistant that can interact with a computer."]),
}


@pytest.mark.parametrize("rel", sorted(KEPT))
def test_kept_real_file_reads_exactly(rel):
    source, speak, task, n_steps, context = KEPT[rel]
    errors: list[dict] = []
    (t,) = read_inputs([str(OURS / rel)], "auto", errors.append)
    assert errors == [] and t.source == source and speak <= {s.agent for s in t.steps}
    assert t.question.startswith(task) and [s.role for s in t.steps if s.content == t.question] == ["user"]
    assert len(t.steps) == n_steps and all(s.content.strip() for s in t.steps)
    for want in context:
        assert sum(want in s.content for s in t.steps) == 1, want


def test_every_kept_real_file_is_checked():
    from test_real_sources import REAL47  # issue 47's real files: checked there (several traces per file)

    files = sorted(str(p.relative_to(OURS)) for p in OURS.rglob("*") if p.is_file() and p.suffix != ".md")
    assert files == sorted(set(KEPT) | set(REAL47))

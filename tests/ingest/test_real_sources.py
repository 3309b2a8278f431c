"""Issue 47: real files the agent frameworks wrote themselves (tests/data/formats/_real/, NOTICE.md there) read
with the right traces, steps, task and agents; auxiliary lines skipped by name (no rows); the errors the files
record in the step text the model reads and in `Step.error`."""

from __future__ import annotations

from pathlib import Path

import pytest

from masprism_batch.ingest import read_inputs

REAL = Path(__file__).resolve().parents[1] / "data" / "formats" / "_real"

# file -> (source, steps per trace, the first trace's task (start), agents that must speak (first trace),
#          texts that must be in a step whose `error` is set (any trace), metadata key -> value (first trace))
REAL47 = {
    "smolagents/gpt-4o__tool-calling__math__2025-07-24.head2.jsonl": (
        "smolagents", [6, 7], "A regular octagon has the same perimeter", {"system", "user", "agent",
                                                                           "python_interpreter", "final_answer"},
        ["Error executing tool 'python_interpreter'"], {"true_answer": "12", "agent_action_type": "tool-calling"}),
    "smolagents/gpt-4o__code__math__2025-07-24.lines12-13.jsonl": (
        "smolagents", [8, 8], "Below is a magic square", {"system", "user", "agent", "python_interpreter"},
        ["Import from sympy is not allowed", "Error in code parsing"], {"answer": "7", "source": "MATH"}),
    "smolagents/gpt-4o__vanilla__simpleqa__2025-07-25.head3.jsonl": (
        "smolagents", [2, 2, 2], "What year was the municipality of Ramiriqu", {"user", "agent"}, [],
        {"true_answer": "1541", "agent_action_type": "vanilla"}),
    "smolagents/runs/c368b608/messages.jsonl": (
        "smolagents", [10], "If no one shares an office", {"system", "WebSearchAgent", "DocumentReaderAgent",
                                                          "DeepResearchAgent", "CodeAgent"}, [], {}),
    "smolagents/runs/d8a9b19e/messages.jsonl": (
        "smolagents", [10], "In right triangle $ABC$", {"system", "WebSearchAgent", "DeepResearchAgent"}, [], {}),
    "claude_code/short.jsonl": (  # first line: a file-history-snapshot
        "claude-code", [5], "mix phx.server doesnt seem to start", {"user", "claude-code", "Bash", "Glob"},
        ["The user doesn't want to proceed with this tool use"], {"skipped_lines": {"file-history-snapshot": 1,
                                                                                     "progress": 3}}),
    "claude_code/tool_heavy.jsonl": (
        "claude-code", [17], "start phoenix in background", {"user", "claude-code", "Bash", "Glob", "Read",
                                                            "WebSearch", "WebFetch"}, [],
        {"skipped_lines": {"file-history-snapshot": 3, "progress": 10, "queue-operation": 2}}),
    "claude_code/agent-aac57f5.jsonl": (  # a sub-agent's own transcript: 12 progress lines
        "claude-code", [17], "Search hex.pm for the latest versions", {"claude-code", "subagent", "WebSearch",
                                                                      "WebFetch"}, [],
        {"skipped_lines": {"progress": 12}}),
    "autogen/history-wile_e_coyote_1.json": (  # a FunctionExecutionResultMessage carries no source
        "autogen", [6], "Hi, I bought a rocket-powered unicycle", {"User", "TriageAgent", "IssuesAndRepairsAgent",
                                                                  "transfer_to_issues_and_repairs"}, [], {}),
    "autogen/teachability_session.json": (  # ChatCompletionClientRecorder session file
        "autogen", [33], "Does the following text contain any information", {"system", "User", "assistant"}, [],
        {"calls": 16}),
    "adk/flow_complex_spark.session.json": (
        "adk", [9], "Research on the factors that affect floods", {"user", "spark_assistant", "research_plan_agent",
                                                                  "summary_agent", "transfer_to_other_agent"}, [], {}),
    "adk/context_update_successful_test.session.json": (
        "adk", [6], "hi", {"user", "root_agent", "update_fc"}, [], {}),
    "letta/customer_service.af": (
        "letta", [11], "I want to cancel my order", {"system", "user", "customer_service", "send_message",
                                                     "check_order_status"}, [],
        {"skipped_messages": {"login": 1, "heartbeat": 1}}),
    "letta/memgpt_agent_with_convo.af": (
        "letta", [81], "hi my name is actually sarah not chad", {"system", "user", "memgpt_agent", "send_message",
                                                                 "core_memory_replace"}, [],
        {"skipped_messages": {"login": 1, "system re-render": 5, "heartbeat": 4}}),
}


@pytest.mark.parametrize("rel", sorted(REAL47))
def test_real_file(rel):
    source, n_steps, task, agents, error_texts, meta = REAL47[rel]
    errors: list[dict] = []
    traces = list(read_inputs([str(REAL / rel)], "auto", errors.append))
    assert errors == []  # no unknown_format, no row for a snapshot / progress / heartbeat line
    assert [len(t.steps) for t in traces] == n_steps
    assert {t.source for t in traces} == {source}
    first = traces[0]
    assert first.question.startswith(task)
    assert agents <= {s.agent for s in first.steps}, {s.agent for s in first.steps}
    # the task once, as one step (smolagents' memory writes it as "New task:\n<task>"), unless the log holds
    # two messages that begin alike (the handoff sample's user repeats itself; the recorder's prompts share a head)
    assert sum(s.content.removeprefix("New task:\n").startswith(task[:40]) for s in first.steps) == (
        2 if rel.startswith("autogen/") else 1)
    systems = [s for s in first.steps if s.role == "system"]
    assert len({s.content for s in systems}) == len(systems)  # a system instruction never repeated
    for k, v in meta.items():
        assert first.metadata[k] == v
    errored = [s for t in traces for s in t.steps if s.error]
    for want in error_texts:
        hit = [s for s in errored if want in s.error]
        assert hit and all(want in s.content for s in hit), want  # in the text the model reads too
    assert len(errored) >= len(error_texts)
    assert all(s.content.strip() for t in traces for s in t.steps)


def test_tool_results_speak_as_their_tool():
    # Letta writes the agent's name on its tool messages; the tool_call_id names the tool
    (t,) = read_inputs([str(REAL / "letta/customer_service.af")], "auto")
    tool_steps = [s for s in t.steps if s.kind == "tool"]
    assert [s.agent for s in tool_steps] == ["send_message", "send_message", "check_order_status", "send_message"]
    assert "Order 54943434 is currently processing." in tool_steps[2].content
    assert not any('"type": "user_message"' in s.content for s in t.steps)  # envelopes unwrapped


def test_claude_code_subagent_is_its_own_trace():
    (main,) = read_inputs([str(REAL / "claude_code/short.jsonl")], "auto")
    (sub,) = read_inputs([str(REAL / "claude_code/agent-aac57f5.jsonl")], "auto")
    assert sub.trace_id == "ae4a77f8-aedd-4bc1-888f-c94edc91af04/agent-aac57f5"
    assert main.trace_id == "55604662-cf2a-4331-851a-ec234028f8ca"

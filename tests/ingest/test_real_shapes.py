"""The shapes real tools write (issue 25), from fixtures we wrote in each shape (tests/data/formats/): the right
trace count, steps in time order, the speaking agent, the text a person reads (answers, tool name + arguments,
tool results) and never a provider's envelope (usage, billing, ids)."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest

from masprism_batch.ingest import read_inputs

# kept out of the top-level example folder, which other tests ingest whole (a folder walk skips `_` names)
FIX = Path(__file__).resolve().parents[1] / "data" / "formats" / "_shapes"

# envelope text that must never reach a step (usage, billing, ids, housekeeping)
ENVELOPE = ('"usage"', '"billing"', "system_fingerprint", "prompt_tokens", "chatcmpl-", "resp_01", "finish_reason",
            "usage_metadata", "candidates_token_count", "input_tokens")

# file -> (forced format, traces, agents per trace (first trace), texts that must appear in the steps)
SHAPES = {
    "langfuse_ui_download.json": ("langfuse", 1, ["user", "planner", "tools", "planner"],
                                  ["Tool call: hotel_search", '"city": "Lyon"', "Hotel Bellecour: 2 rooms free",
                                   "2 rooms on May 3 at 140 EUR."]),
    "langfuse_server_download.json": ("langfuse", 1, ["scout", "scout", "scout", "writer", "checker"],
                                      ["Tool call: get_forecast", "Oslo: snow, -3 C", "Snow in Oslo today",
                                       "Pack a warm coat", "The advice matches the forecast."]),
    "otel_adk.json": ("otel", 1, ["user"] + ["weather_agent"] * 3,
                      ["Tool call: get_weather", '"city": "Rome"', "Rome: sunny, 24 C", "It is sunny in Rome"]),
    "otel_dialects.json": ("otel", 3, ["user"] + ["librarian"] * 3,
                           ["Tool call: lookup_book", "Dune (1965) by Frank Herbert", "Frank Herbert wrote Dune.",
                            "Tool call: calculator", "Output: 4", "2+2 is 4.", "Hi there!"]),
    "otel_logs.jsonl": ("otel", 1, ["user", "triage"], ["My card was charged twice.", "Routing you to billing."]),
    "tempo_batches.json": ("tempo", 1, ["support"] * 3,
                           ["Tool call: refund", "refund issued", "Your refund for A17 is on its way."]),
    "otel_sdk_spans.json": ("otel-sdk", 1, ["researcher"] * 3,
                            ["Tool call: search_papers", "TimeoutError: arxiv did not answer", "no papers found"]),
    "otel_sdk_console.json": ("otel-sdk", 1, ["researcher"] * 3, ["Tool call: search_papers", "no papers found"]),
    "jaeger.json": ("jaeger", 1, ["coder", "coder"], ["def add(a, b)", "Tool: run_tests", "3 passed"]),
    "langsmith_batch.json": ("langsmith", 1, ["user", "qa_chain"], ["Capital of Peru?", "Lima is the capital of Peru."]),
    "openai_chat_response.json": ("openai", 1, ["assistant"], ['Tool call: get_stock({"ticker": "ACME"})']),
    "openai_chat_pair.json": ("openai", 1, ["system", "user", "assistant", "get_stock", "assistant"],
                              ["Tool call: get_stock", "ACME 12.40 USD", "ACME trades at 12.40 USD."]),
    "langgraph_messages.json": ("langgraph", 1, ["user", "host", "reserve", "host"],
                                ['Tool call: reserve({"people": 2, "time": "20:00"})', "Table 12 reserved",
                                 "Done: table 12 at 8pm."]),
    "openai_responses_reasoning.json": ("openai", 1, ["user", "assistant", "assistant"],
                                        ["Reasoning: 91 = 7 * 13.", "No: 91 = 7 x 13."]),
    "swe_agent": ("swe-agent", 1, ["system", "user", "main", "bash", "main", "submit"],
                  ["Tool call: bash", "grep -n teh README.md", "3:teh quick fox", "Tool call: submit", "diff --git"]),
    "openhands_events.json": ("openhands", 1, ["user", "agent", "environment", "agent"],
                              ["Create hello.py", "Tool call: execute_bash", "exit code 0", "hello.py is created."]),
    "taubench_results.json": ("tau-bench", 2, ["system", "user", "assistant", "get_order_details", "assistant"],
                              ["Tool call: get_order_details", '{"status": "shipped"}', "Order #W101 has shipped."]),
    "taubench_results_lines.jsonl": ("tau-bench", 2, ["system", "user", "assistant", "get_order_details",
                                                      "assistant"], ["Order #W101 was cancelled."]),
    "taubench_fewshot.jsonl": ("tau-bench", 2, ["user", "assistant", "user", "assistant", "tool", "assistant"],
                               ['"status": "delivered"', "The lamp can be returned.", "Order #W2 is cancelled."]),
}
WARNINGS = {"openai_responses_reasoning.json": ["unreadable_reasoning"]}


def _read(path, fmt="auto"):
    errors: list[dict] = []
    return list(read_inputs([str(path)], fmt, errors.append)), errors


@pytest.mark.parametrize("name", sorted(SHAPES))
@pytest.mark.parametrize("how", ["auto", "forced"])
def test_shape_reads_as_its_tool_writes_it(name, how):
    fmt, n, agents, texts = SHAPES[name]
    traces, errors = _read(FIX / name, "auto" if how == "auto" else fmt)
    assert [e["reason"] for e in errors] == WARNINGS.get(name, []), errors
    assert len(traces) == n
    assert [s.agent for s in traces[0].steps] == agents
    text = "\n".join(s.content for t in traces for s in t.steps)
    for want in texts:
        assert want in text, (want, text)
    for t in traces:
        assert all(s.content.strip() for s in t.steps), "an empty step"
        for s in t.steps:
            assert not any(e in s.content for e in ENVELOPE), s.content
        far = datetime.max.replace(tzinfo=timezone.utc)
        times = [s.start_time or far for s in t.steps]
        assert times == sorted(times), "steps out of time order"


def test_every_shape_in_one_folder_ingests(tmp_path):
    from masprism_batch.ingest import ingest

    s = ingest([str(FIX)], tmp_path / "OUT", progress=False)  # the folder named, so `_shapes` is walked
    # taubench_results.json and taubench_results_lines.jsonl hold the same two results, in two shapes: the same
    # runs (a run's id is its content, ingest/run_ids.py), so the second file's are duplicates, named
    twice = SHAPES["taubench_results_lines.jsonl"][1]
    assert s.traces == sum(v[1] for v in SHAPES.values()) - twice
    assert dict(s.rejected) == {"duplicate_trace_id": twice}
    assert dict(s.warnings) == {"unreadable_reasoning": 1}
    assert set(s.by_source) == {"langfuse", "otel", "langsmith", "openai", "langgraph", "swe-agent", "openhands",
                                "tau-bench"}


def test_langfuse_router_spans_and_duplicate_generations_are_not_steps():
    (t,), _ = _read(FIX / "langfuse_ui_download.json")
    assert not any("route_after_planner" in s.content or s.content.endswith("end") for s in t.steps)
    assert [s.kind for s in t.steps] == ["message", "llm", "tool", "llm"]  # the task first (issue 34)
    (t,), _ = _read(FIX / "langfuse_server_download.json")
    assert not any(s.content == "None" for s in t.steps)  # the instrumentation's copy inside the ADK call
    assert "running 1 tool" not in [s.agent for s in t.steps]  # a wrapper of tool calls is not an agent


def test_console_exporter_dump_equals_the_span_list():
    (a,), _ = _read(FIX / "otel_sdk_spans.json")
    (b,), _ = _read(FIX / "otel_sdk_console.json")
    assert [(s.agent, s.kind, s.content) for s in a.steps] == [(s.agent, s.kind, s.content) for s in b.steps]


def test_completion_in_a_2024_content_event(tmp_path):
    span = _span("1", {"gen_ai.operation.name": "chat"})
    span["events"] = [{"name": "gen_ai.content.completion", "attributes": [{"key": "gen_ai.completion", "value": {
        "stringValue": json.dumps([{"role": "assistant", "content": "From the event."}])}}]}]
    (tmp_path / "ev.json").write_text(json.dumps(_otlp([span])))
    (t,), errors = _read(tmp_path / "ev.json")
    assert errors == [] and t.steps[0].content == "From the event."


def test_sdk_spans_one_per_line_and_one_alone(tmp_path):
    spans = json.loads((FIX / "otel_sdk_spans.json").read_text())["spans"]
    (tmp_path / "spans.jsonl").write_text("".join(json.dumps(s) + "\n" for s in spans))
    (t,), errors = _read(tmp_path / "spans.jsonl")
    assert errors == [] and [s.agent for s in t.steps] == ["researcher"] * 3
    (tmp_path / "one.json").write_text(json.dumps(spans[1]))
    (t,), errors = _read(tmp_path / "one.json")  # a lone LLM span: its answer, the service as agent
    assert errors == [] and t.steps[0].content.startswith("Tool call: search_papers")


def test_taubench_keeps_reward_and_task_id_as_trace_attributes():
    traces, _ = _read(FIX / "taubench_results.json")
    assert [(t.metadata["task_id"], t.metadata["reward"], t.metadata["trial"]) for t in traces] == [
        (3, 1.0, 0), (3, 0.0, 1)]
    assert {t.source for t in traces} == {"tau-bench"} and len({t.trace_id for t in traces}) == 2


def test_swe_agent_traj_is_its_own_source_inside_folders(tmp_path):
    (tmp_path / "runs" / "a").mkdir(parents=True)
    shutil.copy(FIX / "swe_agent" / "fix_typo.traj", tmp_path / "runs" / "a" / "fix_typo.traj")
    (t,), errors = _read(tmp_path / "runs")
    assert errors == [] and t.source == "swe-agent" and t.trace_id.startswith("swe-agent/fix_typo~")
    assert t.metadata["exit_status"] == "submitted"


def _otlp(spans):
    return {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": spans}]}]}


def _span(sid, attrs):
    return {"traceId": "ab" * 16, "spanId": sid, "name": "chat", "startTimeUnixNano": str(1740000000000000000 + int(sid)),
            "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()]}


def test_step_that_rendered_empty_is_a_warning_row_and_an_all_empty_trace_is_rejected(tmp_path):
    good = _span("1", {"gen_ai.operation.name": "chat", "gen_ai.completion.0.content": "fine"})
    odd = _span("2", {"gen_ai.operation.name": "chat", "vendor.reply.blob": "text in a key nobody reads"})
    (tmp_path / "one.json").write_text(json.dumps(_otlp([good, odd])))
    (t,), errors = _read(tmp_path / "one.json")
    assert [e["reason"] for e in errors] == ["empty_step"]
    assert "step 1" in errors[0]["message"] and "record 2" in errors[0]["message"]
    assert errors[0]["record_id"] == t.trace_id
    (tmp_path / "all.json").write_text(json.dumps(_otlp([odd])))
    traces, errors = _read(tmp_path / "all.json")
    assert traces == [] and [e["reason"] for e in errors] == ["empty_trace"]
    assert "empty_step" in errors[0]["message"] and "OTLP" in errors[0]["message"]


def test_unreadable_reasoning_is_dropped_with_a_warning_not_a_blank_step():
    (t,), errors = _read(FIX / "openai_responses_reasoning.json")
    assert [e["reason"] for e in errors] == ["unreadable_reasoning"] and "rs_1" in errors[0]["message"]
    assert not any(s.content.strip() in ("Reasoning:", "") for s in t.steps)

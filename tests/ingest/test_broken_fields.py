"""One field broken per shape (issue 25): the error row names the format that was tried (detected or forced)
and the first field that did not fit; a file of no known format lists its near misses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from masprism_batch.ingest import WARNING_REASONS, read_inputs

# kept out of the top-level example folder, which other tests ingest whole (a folder walk skips `_` names)
FIX = Path(__file__).resolve().parents[1] / "data" / "formats" / "_shapes"


def _load(name):
    return json.loads((FIX / name).read_text())


def _set(doc, path, value):
    """doc with doc[path...] = value (None: the key removed)."""
    cur = doc
    for k in path[:-1]:
        cur = cur[k]
    if value is None:
        cur.pop(path[-1], None)
    else:
        cur[path[-1]] = value
    return doc


def _langsmith_no_id():
    doc = _load("langsmith_batch.json")
    doc["post"][0].pop("id")
    doc["post"][0].pop("dotted_order")
    return doc


def _tau_lines():
    lines = (FIX / "taubench_results_lines.jsonl").read_text().splitlines()
    second = json.loads(lines[1])
    second["traj"][1]["role"] = "robot"
    return lines[0] + "\n" + json.dumps(second) + "\n"


# case -> (file name written, document or text, forced format, words the message must hold)
BROKEN = {
    "langfuse-ui": ("x.json", lambda: _set(_load("langfuse_ui_download.json"), ["observations", 2, "type"], "NOPE"),
                    "langfuse", ["Langfuse", "observations[2].type"]),
    "langfuse-server": ("x.json", lambda: _set(_load("langfuse_server_download.json"), ["observations", 1, "id"], ""),
                        "langfuse", ["Langfuse", "observations[1].id"]),
    "otlp": ("x.json", lambda: _set(_load("otel_adk.json"), ["resourceSpans"], {"a": 1}), "otel",
             ["OTLP", "resourceSpans"]),
    "tempo": ("x.json", lambda: _set(_load("tempo_batches.json"), ["batches"], {"a": 1}), "tempo",
              ["OTLP", "batches"]),
    "otel-sdk-first": ("x.json", lambda: _set(_load("otel_sdk_spans.json"), ["spans", 0, "context"], {"id": 1}),
                       "otel-sdk", ["OTel SDK", "spans[0].context"]),
    "otel-sdk": ("x.json", lambda: _set(_load("otel_sdk_spans.json"), ["spans", 1, "context"], {"trace_id": "0x1"}),
                 "otel-sdk", ["OTel SDK", "spans[1].context"]),
    "jaeger": ("x.json", lambda: _set(_load("jaeger.json"), ["data", 0, "spans", 1, "spanID"], None), "jaeger",
               ["Jaeger", "data[0].spans[1].spanID"]),
    "langsmith-batch": ("x.json", _langsmith_no_id, "langsmith", ["LangSmith", "post[0].id"]),
    "chat-response": ("x.json", lambda: _set(_load("openai_chat_pair.json"), ["choices", 0, "message"], "oops"),
                      "openai", ["OpenAI", "choices[0].message"]),
    "langgraph-messages": ("x.json", lambda: _set(_load("langgraph_messages.json"), ["messages", 2, "type"], "robot"),
                           "langgraph", ["LangGraph message state", "messages[2].type"]),
    "responses": ("x.json", lambda: _set(_load("openai_responses_reasoning.json"), ["output", 1], {"summary": []}),
                  "openai", ["OpenAI", "items[2]"]),
    "swe-agent": ("x.traj", lambda: _set(_load("swe_agent/fix_typo.traj"), ["history", 3, "role"], 5), "swe-agent",
                  ["SWE-agent", "history[3].role"]),
    "openhands": ("x.json", lambda: _set(_load("openhands_events.json"), [1, "source"], 7), "openhands",
                  ["OpenHands", "events[1].source"]),
    "tau-bench": ("x.json", lambda: _set(_load("taubench_results.json"), [1, "traj"], None), "tau-bench",
                  ["τ-bench", "results[1].traj"]),
    "tau-bench-lines": ("x.jsonl", _tau_lines, "tau-bench", ["τ-bench", "traj[1].role"]),
    "tau-bench-transcript": ("x.jsonl", lambda: json.dumps({"messages_display": "hello"}) + "\n", "tau-bench",
                             ["τ-bench", "messages_display"]),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
@pytest.mark.parametrize("how", ["auto", "forced"])
def test_broken_field_names_format_and_field(tmp_path, case, how):
    name, make, fmt, words = BROKEN[case]
    doc = make()
    (tmp_path / name).write_text(doc if isinstance(doc, str) else json.dumps(doc))
    errors: list[dict] = []
    list(read_inputs([str(tmp_path / name)], "auto" if how == "auto" else fmt, errors.append))
    rejected = [e for e in errors if e["reason"] not in WARNING_REASONS]
    assert rejected, errors
    msg = rejected[0]["message"]
    for w in words:
        assert w in msg, (w, msg)
    if how == "forced":
        assert "--format" in msg or "Near misses" in msg


@pytest.mark.parametrize("doc,hint", [
    ([{"name": "a", "parent_id": None, "kind": "x"}], "OTel SDK span list"),
    ({"trace": {"id": "t"}, "observations": "o"}, "Langfuse download"),
    ({"choices": [{"text": "hi"}], "id": "x"}, "choices[0].message is missing"),
    ({"data": [{"id": 1}]}, "data[0]"),
    ([{"source": "agent", "kind": "run"}], "OpenHands"),
    ({"post": [], "other": 1}, "LangSmith batch"),
], ids=["otel-sdk", "langfuse", "chat-response", "jaeger", "openhands", "langsmith"])
def test_unknown_format_lists_near_misses(tmp_path, doc, hint):
    (tmp_path / "x.json").write_text(json.dumps(doc))
    errors: list[dict] = []
    list(read_inputs([str(tmp_path / "x.json")], "auto", errors.append))
    assert [e["reason"] for e in errors] == ["unknown_format"]
    assert "Near misses" in errors[0]["message"] and hint in errors[0]["message"], errors[0]["message"]

"""Issue 61 (reliability round 6), the reader findings: every agent of a Letta file is read (4); an OTLP container of
the wrong type is a row, never a trace gone unsaid (5); span ids read from a log are capped (6); exception lines are
de-duplicated in linear time (10); Claude Code's skipped line types are capped (9) and a mistyped id costs its own
line (14); ADK `content.parts` and Letta `tool_calls` of the wrong type are `invalid_record` of their own event or
message (14). Issue 60 item 8: an ADK session file that is only `{"events": [...]}` and an AG2 AgentEval `.txt`
response log are read faithfully."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from peak_rss import HWM

from masprism_batch.ingest import read_inputs
from masprism_batch.ingest.caps import MAX_SPAN_ID_CHARS
from masprism_batch.ingest.claude_code import MAX_SKIPPED_TYPES
from masprism_batch.ingest.status import error_text

FORMATS = Path(__file__).resolve().parents[1] / "data" / "formats"
HELD_BACK = FORMATS / "_held_back"  # issue 60 item 8: the shapes of two exports that were not read faithfully
REAL = FORMATS / "_real"


def _read(*paths, fmt: str = "auto"):
    errors: list[dict] = []
    return list(read_inputs([str(p) for p in paths], fmt, errors.append)), errors


def _letta_agent(name: str, said: str, tool_calls=None) -> dict:
    user = json.dumps({"type": "user_message", "message": f"question for {name}"})
    return {"name": name, "agent_type": "memgpt_agent", "llm_config": {"model": "m"}, "messages": [
        {"role": "user", "content": [{"type": "text", "text": user}], "created_at": "2026-01-01T00:00:00Z"},
        {"role": "assistant", "content": [{"type": "text", "text": said}], "tool_calls": tool_calls,
         "created_at": "2026-01-01T00:00:01Z"}]}


def test_letta_every_agent_of_an_agent_file_is_read(tmp_path):
    """Finding 4: `{"agents": [3 agents]}` read only agent 0 (exit 0, no row). Each agent is a trace now; two agents
    of one file sharing a name are told apart by their place; an agent that is not one is a row."""
    doc = {"agents": [_letta_agent("planner", "plan it"), _letta_agent("coder", "code it"),
                      _letta_agent("coder", "code it again"), "not an agent"], "blocks": [], "tools": []}
    (tmp_path / "team.af").write_text(json.dumps(doc), encoding="utf-8")
    got, errors = _read(tmp_path / "team.af")
    said = sorted(t.steps[-1].content for t in got)
    assert said == ["Reasoning: code it", "Reasoning: code it again", "Reasoning: plan it"], (said, errors)
    assert len({t.trace_id for t in got}) == 3 and all(t.source == "letta" for t in got)
    assert [(e["reason"], e["record_id"]) for e in errors] == [("invalid_record", "agents[3]")], errors


@pytest.mark.parametrize("bad", ["spans", "scopeSpans", "resourceSpans"])
def test_otlp_container_of_the_wrong_type_is_one_row(tmp_path, bad):
    """Finding 5: `"spans": 5`, `"scopeSpans": 5` or `resourceSpans: [5]` on one JSON line lost that line's trace
    with no row (docs/formats.md promises one). One `invalid_record` row per bad line; the other lines are read."""
    kv = [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
          {"key": "gen_ai.completion.0.content", "value": {"stringValue": "hello"}}]

    def request(tid: str, broken: bool) -> dict:
        spans = 5 if broken and bad == "spans" else [{"traceId": tid, "spanId": "s1", "name": "chat", "attributes": kv}]
        scopes = 5 if broken and bad == "scopeSpans" else [{"spans": spans}]
        return {"resourceSpans": [5] if broken and bad == "resourceSpans" else [{"resource": {}, "scopeSpans": scopes}]}

    lines = [request("a", False), request("b", True), request("c", False), request("d", True)]
    (tmp_path / "otlp.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    got, errors = _read(tmp_path / "otlp.jsonl")
    assert sorted(t.trace_id for t in got) == ["a", "c"], errors
    assert [(e["reason"], e["record_id"]) for e in errors] == [("invalid_record", "line 2"),
                                                             ("invalid_record", "line 4")], errors
    assert all(bad in e["message"] for e in errors), errors


def test_span_ids_read_from_a_log_are_capped(tmp_path):
    """Finding 6 (ingest half): a 2 MB span id or a 5,000-digit decimal one was stored as given (and every export
    then failed on it). An id over MAX_SPAN_ID_CHARS is stored as its digest, the parent naming it gets the same
    digest (the tree holds), the trace is kept and one warning says so."""
    huge, digits = "x" * (2 * 1024 * 1024), "7" * 5000
    row = {"trace_id": "t-long-ids", "source": "app", "steps": [
        {"agent": "a", "content": "root", "span_id": huge},
        {"agent": "b", "content": "child", "span_id": digits, "parent_span_id": huge},
        {"agent": "c", "content": "fine", "span_id": "0af7651916cd43dd", "parent_span_id": digits}]}
    (tmp_path / "t.jsonl").write_text(json.dumps(row) + "\n", encoding="utf-8")
    (t,), errors = _read(tmp_path / "t.jsonl")
    s0, s1, s2 = t.steps
    assert all(len(x) <= MAX_SPAN_ID_CHARS for s in t.steps for x in (s.span_id, s.parent_span_id) if x)
    assert s0.span_id.startswith("id-digest:") and s1.parent_span_id == s0.span_id and s2.parent_span_id == s1.span_id
    assert s2.span_id == "0af7651916cd43dd" and s0.span_id != s1.span_id
    assert [e["reason"] for e in errors] == ["step_truncated"] and "span or parent id" in errors[0]["message"]


def test_exception_lines_are_deduplicated_in_linear_time():
    """Finding 10: exception events were de-duplicated by a list scan (3x the events, 9.9x the CPU; one 32 MB span
    took 156 s). 30,000 distinct events took seconds before; a hashed set takes milliseconds."""
    events = [(f"ValueError{i % 7}", f"bad value {i}", None) for i in range(30_000)] + [("ValueError0", "bad value 0",
                                                                                           None)] * 5
    t0 = time.process_time()
    out = error_text("boom", events)
    spent = time.process_time() - t0
    assert out.count("\n") == 30_000 and out.startswith("Error: boom")  # each distinct line once, the repeat not
    assert spent < 1.0, f"{spent:.2f} s of CPU for 30,000 exception events"


def _cc_line(sid: str, i: int, kind: str = "user", **kw) -> dict:
    d = {"type": kind, "sessionId": sid, "uuid": f"{sid}-{i}", "parentUuid": None, "timestamp":
         f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z"}
    if kind in ("user", "assistant"):
        d["message"] = {"role": kind, "content": f"{kind} says {i}"}
    d.update(kw)
    return d


def test_claude_code_skipped_line_types_are_capped(tmp_path):
    """Finding 9: every distinct skipped line type was counted and the counts copied into every session (a 3.2 MB
    file with 600 sessions took 3.79 GB). At most MAX_SKIPPED_TYPES types are named, the rest counted together."""
    lines = [_cc_line(f"s{k}", 0) for k in range(3)]
    lines += [{"type": f"made-up-{j}", "sessionId": "s0", "data": {}} for j in range(500)]
    (tmp_path / "c.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    got, errors = _read(tmp_path / "c.jsonl", fmt="claude-code")
    assert len(got) == 3 and not errors, errors
    for t in got:
        skipped = t.metadata["skipped_lines"]
        assert len(skipped) == MAX_SKIPPED_TYPES + 1 and sum(skipped.values()) == 500, skipped


CHILD = r"""
import json, sys, tempfile
from masprism_batch.ingest import ingest
""" + HWM + r"""base = hwm()
with tempfile.TemporaryDirectory() as d:
    s = ingest([sys.argv[1]], d + "/OUT", fmt=sys.argv[2], progress=False)
print(json.dumps({"traces": s.traces, "rejected": dict(s.rejected), "base_mb": base, "peak_mb": hwm()}))
"""


def _peak(path: Path, fmt: str) -> dict:
    """`ingest` of one file in a fresh interpreter: its peak RSS (VmHWM, this process image's own) and counts."""
    p = subprocess.run([sys.executable, "-c", CHILD, str(path), fmt], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="peak RSS is read from /proc/self/status (Linux)")
def test_claude_code_memory_is_linear_in_the_file(tmp_path):
    """Finding 9, memory: 600 sessions and 4,000 distinct skipped types (a 0.3 MB file) made 2.4M counts, every
    session's copy held until its part was written: +176 MB over the interpreter (and 7.7 s) on 9473d5c, +62 MB
    (the writer's own) now."""
    lines = [_cc_line(f"s{k}", 0) for k in range(600)]
    lines += [{"type": f"t{j:05d}", "sessionId": "s0", "data": 0} for j in range(4000)]
    (tmp_path / "c.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    got = _peak(tmp_path / "c.jsonl", "claude-code")
    assert got["traces"] == 600 and not got["rejected"], got
    assert got["peak_mb"] - got["base_mb"] < 110, got


@pytest.mark.parametrize("key", ["uuid", "agentId"])
@pytest.mark.parametrize("value", [{}, [], -1])
def test_claude_code_mistyped_id_costs_only_its_line(tmp_path, key, value):
    """Finding 14: `"uuid": {}` on one line cost its whole session (11 lines). Now that line alone is a row."""
    src = [json.loads(x) for x in (REAL / "claude_code/short.jsonl").read_text(encoding="utf-8").splitlines() if x]
    (tmp_path / "ok.jsonl").write_text("\n".join(json.dumps(x) for x in src) + "\n", encoding="utf-8")
    (base,), _ = _read(tmp_path / "ok.jsonl", fmt="claude-code")
    at = next(i for i, d in enumerate(src) if d.get("type") == "assistant")
    bad = copy.deepcopy(src)
    bad[at][key] = value
    (tmp_path / "bad.jsonl").write_text("\n".join(json.dumps(x) for x in bad) + "\n", encoding="utf-8")
    got, errors = _read(tmp_path / "bad.jsonl", fmt="claude-code")
    assert [t.trace_id for t in got] == [base.trace_id], errors
    assert len(got[0].steps) >= len(base.steps) - 1
    assert [(e["reason"], e["record_id"]) for e in errors] == [("invalid_record", f"record {at + 1}")], errors


@pytest.mark.parametrize("parts", [-1, 5, True, "text"])
def test_adk_parts_of_the_wrong_type_cost_their_event(tmp_path, parts):
    """Finding 14: ADK `content.parts` = -1/5/true ended the file as `internal_error`; it is the event's own
    `invalid_record` row now, the session's other events are read."""
    doc = json.loads((REAL / "adk/flow_complex_spark.session.json").read_text(encoding="utf-8"))
    (tmp_path / "ok.json").write_text(json.dumps(doc), encoding="utf-8")
    (base,), _ = _read(tmp_path / "ok.json")
    at = next(i for i, e in enumerate(doc["events"]) if e["author"] != "user")
    doc["events"][at]["content"]["parts"] = parts
    (tmp_path / "bad.json").write_text(json.dumps(doc), encoding="utf-8")
    (t,), errors = _read(tmp_path / "bad.json")
    assert t.trace_id == base.trace_id and len(t.steps) == len(base.steps) - 1, errors
    assert [e["reason"] for e in errors] == ["invalid_record"] and f"events[{at}]" in errors[0]["record_id"], errors


def test_letta_tool_calls_of_the_wrong_type_cost_their_message(tmp_path):
    """Finding 14: Letta `tool_calls` = -1 ended the file as `internal_error`; it is that message's row now."""
    doc = _letta_agent("solo", "thinking", tool_calls=-1)
    doc["messages"].append({"role": "assistant", "content": [{"type": "text", "text": "done"}],
                            "created_at": "2026-01-01T00:00:02Z"})
    (tmp_path / "a.af").write_text(json.dumps(doc), encoding="utf-8")
    (t,), errors = _read(tmp_path / "a.af")
    assert [s.content for s in t.steps] == ["question for solo", "Reasoning: done"], errors
    assert [e["reason"] for e in errors] == ["invalid_record"] and "message 2" in errors[0]["record_id"], errors


def test_adk_session_file_of_events_only(tmp_path):
    """Issue 60 item 8: an ADK 2.x session file that is only `{"events": [...]}` (camelCase keys, no session
    envelope) was `unknown_format`. Read as an ADK session: every event, the failed tool call's error included."""
    (t,), errors = _read(HELD_BACK / "adk_events_only.json")
    assert not errors, errors
    assert t.source == "adk" and t.trace_id.startswith("adk/adk_events_only")
    assert t.question == "Book a table for two at 7pm and tell me the confirmation number."
    assert [(s.agent, s.kind) for s in t.steps] == [("user", "message"), ("booking_agent", "message"),
                                                   ("reserve_table", "tool"), ("booking_agent", "message")]
    assert "Reasoning: I should call the reservation tool." in t.steps[1].content
    assert "Tool call: reserve_table" in t.steps[1].content
    assert t.steps[2].error and "no tables free" in t.steps[2].error
    assert t.metadata["skipped_events"] == {"no content": 1}


def test_ag2_agenteval_response_log(tmp_path):
    """Issue 60 item 8: an AG2 AgentEval `.txt` response log gave one empty step (read as plain OpenAI chat: the
    user proxy's empty auto-reply was blank text). Read as AG2 now: the problem is the question, the empty reply
    says so, the grade sets the run status and the grader's note is kept; a folder walk picks the `.txt` up."""
    (t,), errors = _read(HELD_BACK / "ag2_agenteval_response.txt")
    assert not errors, errors
    assert t.source == "ag2" and t.metadata["format"] == "ag2-agenteval"
    assert t.question.startswith("What is the least positive integer divisible by each of 4, 6 and 10?")
    assert [(s.agent, s.content[:15]) for s in t.steps] == [
        ("user", "What is the lea"), ("assistant", "We need the lea"), ("user", "(empty message)"),
        ("assistant", "Let's compute i")]
    assert t.run_status == "failed" and t.metadata["is_correct"] is False
    assert t.metadata["correct_ans"] == "60" and "incorrect" in t.metadata["check_result"]
    folder = tmp_path / "evals"
    folder.mkdir()
    (folder / "response_7.txt").write_bytes((HELD_BACK / "ag2_agenteval_response.txt").read_bytes())
    (folder / "notes.txt").write_text("not a log\n", encoding="utf-8")
    got, errors = _read(folder)
    assert [x.metadata["format"] for x in got] == ["ag2-agenteval"]
    assert [(Path(e["input_path"]).name, e["reason"]) for e in errors] == [("notes.txt", "skipped_file")]


def test_ag2_agenteval_graded_correct_is_set_aside_as_a_score(tmp_path):
    """An AgentEval response graded correct is a graded pass: set aside by default, counted under the `score`
    signal (issue 60 item 1's rule), attributed with --all-runs."""
    from masprism_batch.ingest.status import attributable

    doc = json.loads((HELD_BACK / "ag2_agenteval_response.txt").read_text(encoding="utf-8"))
    doc["is_correct"] = True
    (tmp_path / "ok.txt").write_text(json.dumps(doc), encoding="utf-8")
    (t,), errors = _read(tmp_path / "ok.txt")
    assert t.run_status == "succeeded" and not errors
    skipped: list[dict] = []
    assert list(attributable([t], skipped.append)) == []
    assert skipped[0]["reason"] == "succeeded_run" and skipped[0]["message"].startswith("score: AgentEval")


@pytest.mark.parametrize("author", [{}, -1, None])
def test_adk_first_event_mistyped_costs_only_itself(tmp_path, author):
    """The first event decided the format: an `author` of another type on events[0] made the whole session
    `unknown_format`. Any of the first events says it is ADK now, and the mistyped one is its own row."""
    doc = json.loads((REAL / "adk/context_update_successful_test.session.json").read_text(encoding="utf-8"))
    (tmp_path / "ok.json").write_text(json.dumps(doc), encoding="utf-8")
    (base,), _ = _read(tmp_path / "ok.json")
    doc["events"][0]["author"] = author
    (tmp_path / "bad.json").write_text(json.dumps(doc), encoding="utf-8")
    (t,), errors = _read(tmp_path / "bad.json")
    assert t.trace_id == base.trace_id and len(t.steps) >= len(base.steps) - 1, errors
    assert [e["reason"] for e in errors] == ["invalid_record"] and "events[0]" in errors[0]["message"], errors


def test_claude_code_summaries_copied_into_sessions_are_capped(tmp_path):
    """Finding 9's twin: summary lines without a session are metadata of every session of the file; 2,000 of them
    over 50 sessions were 100,000 copies. Each session keeps the first MAX_SUMMARIES (cut to 2,000 characters) and
    counts the rest."""
    from masprism_batch.ingest.claude_code import MAX_SUMMARIES

    lines = [{"type": "summary", "summary": f"summary {j} " + "s" * 3000, "leafUuid": f"leaf-{j}"} for j in range(2000)]
    lines += [_cc_line(f"s{k}", 0) for k in range(50)]
    (tmp_path / "c.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    got, errors = _read(tmp_path / "c.jsonl", fmt="claude-code")
    assert len(got) == 50 and not errors, errors
    for t in got:
        meta = t.metadata
        assert len(meta["summaries"]) == MAX_SUMMARIES and meta["summaries_not_kept"] == 2000 - MAX_SUMMARIES
        assert all(len(x) <= 2000 for x in t.metadata["summaries"])


@pytest.mark.parametrize("bad", ["logRecords", "scopeLogs", "resourceLogs"])
def test_otlp_logs_container_of_the_wrong_type_is_one_row(tmp_path, bad):
    """Finding 5 for GenAI events exported as OTLP logs: `"logRecords": 5`, `"scopeLogs": 5` or `resourceLogs: [5]`
    dropped that request's events with no row. One `invalid_record` row per bad line now; the others are read."""
    def request(tid: str, broken: bool) -> dict:
        body = {"kvlistValue": {"values": [{"key": "content", "value": {"stringValue": f"answer {tid}"}}]}}
        recs = 5 if broken and bad == "logRecords" else [{"traceId": tid, "spanId": "s1", "eventName": "gen_ai.choice",
                                                          "body": body}]
        scopes = 5 if broken and bad == "scopeLogs" else [{"logRecords": recs}]
        return {"resourceLogs": [5] if broken and bad == "resourceLogs" else [{"scopeLogs": scopes}]}

    lines = [request("a", False), request("b", True), request("c", False)]
    (tmp_path / "logs.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    got, errors = _read(tmp_path / "logs.jsonl")
    assert sorted(t.trace_id for t in got) == ["a", "c"], errors
    assert [(e["reason"], e["record_id"]) for e in errors] == [("invalid_record", "line 2")], errors
    assert bad in errors[0]["message"], errors

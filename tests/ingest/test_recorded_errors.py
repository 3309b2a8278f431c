"""Issue 47: every error a log records reaches the step text the model reads in one rendering (status.error_text)
and `Step.error`; nothing in a folder is skipped unsaid; a CrewAI output log reads as its runs; a Claude Code line
of the wrong type costs only itself (issue 46 finding 4); an AG2 message "" is no blank step."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from ingest_synth import T0, oi_span, rng, text

from masprism_batch.ingest import ingest, read_inputs
from masprism_batch.ingest.status import STACK_CHARS, error_text

SHAPES = Path(__file__).resolve().parents[1] / "data" / "formats" / "_shapes"


def _read(path):
    errors: list[dict] = []
    return list(read_inputs([str(path)], "auto", errors.append)), errors


def _words(r, n=4):
    return " ".join(text(r, 3, 9).replace("\n", " ").strip() or "x" for _ in range(n))


def test_error_text_one_rendering():
    r = rng("render")
    msg, typ, emsg = _words(r), "PermissionError", _words(r)
    stack = "Traceback (most recent call last):\n" + "".join(f'  File "f{i}.py", line {i}, in g\n    ^^^^\n'
                                                            for i in range(40))
    out = error_text(msg, [(typ, emsg, stack)]).split("\n")
    assert out[0] == f"Error: {msg}" and out[1] == f"Exception: {typ}: {emsg}"
    assert out[2].startswith('Stack head: File "f0.py", line 0') and len(out[2]) <= len("Stack head: ") + STACK_CHARS
    assert "^^^^" not in out[2] and "Traceback" not in out[2]
    # TRAIL's status message repeats its exception ("Type: message"): said once
    assert error_text(f"{typ}: {emsg}", [(typ, emsg, None)]) == f"Exception: {typ}: {emsg}"


def _otel_with_failed_tool(tmp_path, msg, exc):
    doc = json.loads((SHAPES / "otel_adk.json").read_text())
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                if s["name"].startswith("execute_tool"):
                    s["status"] = {"code": 2, "message": msg}
                    s["events"] = [{"name": "exception", "timeUnixNano": "1", "attributes": [
                        {"key": "exception.type", "value": {"stringValue": "PermissionError"}},
                        {"key": "exception.message", "value": {"stringValue": exc}}]}]
                    tool_id = s["spanId"]
    (tmp_path / "otel.json").write_text(json.dumps(doc))
    return tmp_path / "otel.json", tool_id


def test_otel_errored_tool_span_in_its_step(tmp_path):
    r = rng("otel")
    msg, exc = "tool failed: " + _words(r), _words(r)
    path, tool_id = _otel_with_failed_tool(tmp_path, msg, exc)
    (t,), errors = _read(path)
    assert errors == [] and t.run_status == "failed"
    (step,) = [s for s in t.steps if s.span_id == tool_id]
    assert step.kind == "tool" and f"Error: {msg}" in step.content and f"Exception: PermissionError: {exc}" in step.content
    assert step.error == f"Error: {msg}\nException: PermissionError: {exc}"
    assert sum(msg in s.content for s in t.steps) == 1  # in that step only


def test_langfuse_errored_tool_observation_in_its_step(tmp_path):
    r = rng("langfuse")
    msg = "tool failed: " + _words(r)
    doc = json.loads((SHAPES / "langfuse_ui_download.json").read_text())
    (obs,) = [o for o in doc["observations"] if o["name"] == "hotel_search"]
    obs.update(level="ERROR", statusMessage=msg)
    (tmp_path / "lf.json").write_text(json.dumps(doc))
    (t,), errors = _read(tmp_path / "lf.json")
    assert errors == [] and t.run_status == "failed"
    (step,) = [s for s in t.steps if s.span_id == obs["id"]]
    assert step.kind == "tool" and f"Error: {msg}" in step.content and step.error == f"Error: {msg}"


def test_langsmith_errored_tool_run_in_its_step(tmp_path):
    r = rng("langsmith")
    msg, q, answer = "PermissionError: " + _words(r), _words(r), _words(r)
    root, llm, tool = "00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002", \
        "00000000-0000-4000-8000-000000000003"
    runs = [{"id": root, "trace_id": root, "run_type": "chain", "name": "agent", "start_time": "2025-01-01T00:00:00Z",
             "inputs": {"input": q}, "outputs": {"output": answer}},
            {"id": llm, "trace_id": root, "parent_run_id": root, "run_type": "llm", "name": "ChatOpenAI",
             "start_time": "2025-01-01T00:00:01Z", "inputs": {"messages": [{"role": "user", "content": q}]},
             "outputs": {"generations": [[{"text": "", "message": {"content": "", "tool_calls": [
                 {"name": "write_file", "args": {"path": "a.txt"}, "id": "c1"}]}}]]}},
            {"id": tool, "trace_id": root, "parent_run_id": root, "run_type": "tool", "name": "write_file",
             "start_time": "2025-01-01T00:00:02Z", "inputs": {"path": "a.txt"}, "error": msg}]
    (tmp_path / "ls.json").write_text(json.dumps(runs))
    (t,), errors = _read(tmp_path / "ls.json")
    assert errors == [] and t.run_status == "failed"
    (step,) = [s for s in t.steps if s.span_id == tool]
    assert step.kind == "tool" and f"Error: {msg}" in step.content and step.error == f"Error: {msg}"


def test_trail_chain_span_error_goes_to_the_step_under_it(tmp_path):
    r = rng("trail-err")
    exc = _words(r)
    root = oi_span("a0", "AGENT", "CodeAgent.run", T0, **{"input.value": json.dumps({"task": _words(r)})})
    step = oi_span("a1", "CHAIN", "Step 1", T0)
    step.update(status_code="Error", status_message=f"AgentExecutionError: {exc}", events=[
        {"Name": "exception", "Timestamp": "x", "Attributes": {"exception.type": "smolagents.utils.AgentExecutionError",
                                                               "exception.message": exc}}])
    llm = oi_span("a2", "LLM", "LiteLLMModel.__call__", T0, **{"llm.output_messages.0.message.content": _words(r)})
    later = oi_span("a3", "LLM", "LiteLLMModel.__call__", T0.replace(second=5),
                    **{"llm.output_messages.0.message.content": _words(r)})
    root["child_spans"] = [step, later]
    step["child_spans"] = [llm]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"trace_id": "t1", "spans": [root]}))
    (t,), errors = _read(path)
    assert errors == [] and [s.span_id for s in t.steps] == ["a2", "a3"]
    want = f"Exception: smolagents.utils.AgentExecutionError: {exc}"
    assert want in t.steps[0].content and t.steps[0].error == want and t.steps[1].error is None
    assert t.steps[0].content.count(exc) == 1  # the status message repeating the exception is not added again


def test_folder_lists_every_file_it_does_not_read(tmp_path):
    r = rng("folder")
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.jsonl").write_text(json.dumps({"trace_id": "t1", "steps": [{"agent": "x", "content": _words(r)}]}))
    (src / "notes.txt").write_text(_words(r))
    (src / "run.log").write_text(_words(r))
    (src / "_SUCCESS").write_text("")  # housekeeping names stay silent
    task = _words(r)
    (src / "crew.txt").write_text(f'2025-01-01 10:00:00: task_name="t", task="{task}", agent="A", status="started"\n'
                                  f'2025-01-01 10:00:05: task_name="t", task="{task}", agent="A", status="completed", '
                                  f'output="{_words(r)}"\n')
    out = tmp_path / "OUT"
    summary = ingest([str(src)], out, progress=False)
    assert summary.traces == 2 and summary.warnings == {"skipped_file": 2} and not summary.rejected
    import pyarrow.dataset as ds

    rows = ds.dataset(str(out / "errors")).to_table().to_pylist()
    assert sorted(Path(x["input_path"]).name for x in rows) == ["notes.txt", "run.log"]
    assert all("extension" in x["message"] for x in rows)


def _crew_line(ts, **kv):
    return f"{ts}: " + ", ".join(f'{k}="{v}"' for k, v in kv.items()) + "\n"


def test_crewai_output_log_text_and_json(tmp_path):
    r = rng("crew")
    tasks = [("research", _words(r) + '\nwith "quotes", and a second line', "Senior Researcher\n"),
             ("write", _words(r), "Writer")]
    outs = [_words(r) + "\n\nmore", _words(r)]
    lines = []
    for run in range(2):  # the crew appended two kickoffs to the file
        for (name, task, agent), out in zip(tasks, outs, strict=True):
            lines.append(_crew_line(f"2025-03-0{run + 1} 10:00:00", task_name=name, task=task, agent=agent,
                                    status="started"))
            lines.append(_crew_line(f"2025-03-0{run + 1} 10:01:00", task_name=name, task=task, agent=agent,
                                    status="completed", output=out))
    err = _words(r)
    lines.append(_crew_line("2025-03-03 10:00:00", task_name="research", task=tasks[0][1], agent="Senior Researcher",
                            status="started", error=err))
    (tmp_path / "logs.txt").write_text("".join(lines))
    traces, errors = _read(tmp_path / "logs.txt")
    assert errors == [] and [len(t.steps) for t in traces] == [4, 4, 2]
    t = traces[0]
    assert t.source == "crewai" and t.question == tasks[0][1]
    assert [s.agent for s in t.steps] == ["crew", "Senior Researcher", "crew", "Writer"]
    assert t.steps[1].content == outs[0]
    assert traces[2].run_status == "failed" and traces[2].steps[1].error == f"Error: {err}"
    # the JSON form (a `.json` output_log_file): one array, the same entries
    entries = [{"timestamp": "2025-03-01 10:00:00", "task_name": n, "task": tk, "agent": a, "status": st,
                **({"output": o} if st == "completed" else {})}
               for (n, tk, a), o in zip(tasks, outs, strict=True) for st in ("started", "completed")]
    (tmp_path / "logs.json").write_text(json.dumps(entries, indent=4))
    (tj,), errors = _read(tmp_path / "logs.json")
    assert errors == [] and [s.content for s in tj.steps] == [s.content for s in t.steps]


def test_claude_code_line_of_the_wrong_type_costs_itself(tmp_path):
    r = rng("cc-type")
    lines = []
    for sid in ("s1", "s2", "s3"):
        lines.append({"type": "user", "sessionId": sid, "uuid": f"{sid}-u", "timestamp": "2025-01-01T00:00:00Z",
                      "message": {"role": "user", "content": _words(r)}})
        lines.append({"type": "assistant", "sessionId": sid, "uuid": f"{sid}-a", "timestamp": "2025-01-01T00:00:01Z",
                      "message": {"id": f"m-{sid}", "role": "assistant", "content": [{"type": "text",
                                                                                     "text": _words(r)}]}})
    bad = copy.deepcopy(lines[2])
    bad["type"] = ["user"]
    lines.insert(3, bad)
    (tmp_path / "s.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    traces, errors = _read(tmp_path / "s.jsonl")
    assert [t.trace_id for t in traces] == ["s1", "s2", "s3"] and all(len(t.steps) == 2 for t in traces)
    assert [e["reason"] for e in errors] == ["invalid_record"] and errors[0]["record_id"] == "record 4"


def test_ag2_empty_message_is_no_blank_step(tmp_path):
    r = rng("ag2-empty")
    msgs = [{"role": "user", "name": "user_proxy", "content": _words(r)},
            {"role": "assistant", "name": "coder", "content": ""},
            {"role": "user", "name": "user_proxy", "content": _words(r)}]
    (tmp_path / "chat.json").write_text(json.dumps(msgs))
    (t,), errors = _read(tmp_path / "chat.json")
    assert [s.content for s in t.steps][1] == "(empty message)" and all(s.content.strip() for s in t.steps)
    assert not [e for e in errors if e["reason"] == "empty_step"]


def test_who_and_when_reads_as_before(shared_data):
    """Issue 47 changed no Who&When step: the digest of all 114 dev traces (ids, question, status, every step's
    index, agent, role, kind, text and span id, labels) is the one the tree before it gave (569366a, 2026-11-28)."""
    import hashlib

    h = hashlib.sha256()
    ts = sorted(read_inputs([str(shared_data / "who_and_when")], "auto", lambda e: None), key=lambda t: t.trace_id)
    for t in ts:
        h.update(json.dumps([t.trace_id, t.source, t.system, t.question, t.run_status,
                             [[s.index, s.agent, s.role, s.kind, s.content, s.span_id] for s in t.steps],
                             [t.labels.mistake_step, t.labels.mistake_agent] if t.labels else None]).encode())
    assert (len(ts), h.hexdigest()[:32]) == (114, "79075cd516c377e5c758d83acce02653")
    assert not any(s.error for t in ts for s in t.steps)


def test_trail_errors_only_where_recorded(shared_data):
    """38 of the 87 dev TRAIL traces record an error (a span with status Error and an exception event); exactly
    those have steps with `error` set, and each such step's text holds its error."""
    import gzip

    recorded = set()
    for f in (shared_data / "trail").glob("*/traces/*.json.gz"):
        stack = list(json.loads(gzip.decompress(f.read_bytes()))["spans"])
        while stack:
            s = stack.pop()
            stack.extend(s.get("child_spans") or [])
            if s.get("status_code") == "Error" or any(e.get("Name") == "exception" for e in s.get("events") or []):
                recorded.add(f.name.removesuffix(".json.gz"))
                break
    traces = list(read_inputs([str(shared_data / "trail")], "auto", lambda e: None))
    with_error = {t.trace_id for t in traces if any(s.error for s in t.steps)}
    assert len(traces) == 87 and len(recorded) == 38 and with_error == recorded
    assert all(s.error in s.content for t in traces for s in t.steps if s.error)


def test_smolagents_runner_line_of_a_run_that_raised(tmp_path):
    """run.py keeps `intermediate_steps: []` and the exception's text as `answer` when the agent raised: the task
    and that error are the trace (failed), not an empty_trace row."""
    r = rng("smol-raised")
    q, err = _words(r), "Error in generating model output: " + _words(r)
    line = {"model_id": "m", "agent_action_type": "code", "question": q, "original_question": q, "answer": err,
            "true_answer": "1", "source": "MATH", "intermediate_steps": [], "start_time": 1.0, "end_time": "x"}
    (tmp_path / "out.jsonl").write_text(json.dumps(line) + "\n")
    (t,), errors = _read(tmp_path / "out.jsonl")
    assert errors == [] and t.run_status == "failed" and t.question == q
    assert [(s.agent, s.content) for s in t.steps] == [("user", q), ("agent", f"Error: {err}")]
    assert t.steps[1].error == f"Error: {err}"

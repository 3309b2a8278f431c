"""Issue 61 finding 1: a trace's id names its run, not its file (ingest/run_ids.py). Two `logs.txt` in two
folders, two exports of one Letta agent, one SWE-agent instance run by two models: six runs, six traces (the
code of 9473d5c kept 3, the rest `duplicate_trace_id`). A byte-identical copy of a run is the same run."""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path

from masprism_batch.ingest import read_inputs

DATA = Path(__file__).resolve().parents[1] / "data" / "formats"
LETTA = DATA / "_real" / "letta" / "customer_service.af"
SWE = DATA / "_shapes" / "swe_agent" / "fix_typo.traj"


def _read(*paths):
    errors: list[dict] = []
    return list(read_inputs([str(p) for p in paths], on_error=errors.append)), errors


def _crew_line(ts: str, **kv: str) -> str:
    return f"{ts}: " + ", ".join(f'{k}="{v}"' for k, v in kv.items()) + "\n"


def crew_log(day: int, crew: str, runs: int = 1, first: int = 0) -> str:
    """A CrewAI text output_log_file of `runs` kickoffs (the same two tasks each time, as a crew reruns them)."""
    out = []
    for run in range(first, first + runs):
        for task, agent in (("research", "Researcher"), ("write", "Writer")):
            at = f"2026-12-{day:02d} 1{run}:0{'rw'.index(task[0])}"
            out.append(_crew_line(f"{at}:00", task_name=task, task=f"{task} for {crew}", agent=agent,
                                  status="started", crew=crew))
            out.append(_crew_line(f"{at}:30", task_name=task, task=f"{task} for {crew}", agent=agent,
                                  status="completed", output=f"{crew} {task} result of run {run}", crew=crew))
    return "".join(out)


def _letta_export(later: bool) -> dict:
    """One agent exported twice: the later export holds one more exchange."""
    doc = json.loads(LETTA.read_text())
    if later:
        extra = copy.deepcopy(doc["messages"][-1])
        extra["content"] = [{"type": "text", "text": '{"status": "OK", "message": "second look-up"}'}]
        extra["created_at"] = extra["updated_at"] = "2025-03-31T04:10:00"
        doc["messages"].append(extra)
    return doc


def _swe_run(model: str) -> dict:
    doc = json.loads(SWE.read_text())
    for m in doc["history"]:
        if m["role"] == "assistant":
            m["content"] = m["thought"] = f"{model}: {m['content']}"
    return doc


def test_runs_keep_their_own_ids_across_folders_exports_and_models(tmp_path):
    for crew in ("crew_a", "crew_b"):
        (tmp_path / crew).mkdir()
        (tmp_path / crew / "logs.txt").write_text(crew_log(1, crew))
    for k, folder in enumerate(("export_1", "export_2")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "customer_service.af").write_text(json.dumps(_letta_export(later=k == 1)))
    for model in ("gpt-4o", "claude"):
        (tmp_path / model).mkdir()
        (tmp_path / model / "fix_typo.traj").write_text(json.dumps(_swe_run(model)))
    traces, errors = _read(tmp_path)
    assert errors == [], errors
    ids = [t.trace_id for t in traces]
    assert len(ids) == 6 and len(set(ids)) == 6, ids
    by_source = {s: sorted(t.trace_id for t in traces if t.source == s) for s in ("crewai", "letta", "swe-agent")}
    assert all(re.fullmatch(r"crewai/[0-9a-f]{16}", i) for i in by_source["crewai"]), by_source
    # a file that is one run keeps its name for people, qualified by the run's content
    assert all(re.fullmatch(r"letta/customer_service~[0-9a-f]{16}", i) for i in by_source["letta"]), by_source
    assert all(re.fullmatch(r"swe-agent/fix_typo~[0-9a-f]{16}", i) for i in by_source["swe-agent"]), by_source


def test_ids_do_not_depend_on_where_the_file_is_or_what_else_is_read(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "logs.txt").write_text(crew_log(1, "crew_a", runs=2))
    alone, _ = _read(tmp_path / "a" / "logs.txt")
    (tmp_path / "b" / "deeper").mkdir(parents=True)
    shutil.copy(tmp_path / "a" / "logs.txt", tmp_path / "b" / "deeper" / "renamed.txt")
    shutil.copy(SWE, tmp_path / "a" / "fix_typo.traj")
    together, errors = _read(tmp_path / "b", tmp_path / "a")
    # the copy is read first and keeps the ids; the original is the same two runs, each a duplicate row
    assert [t.trace_id for t in together if t.source == "crewai"] == [t.trace_id for t in alone]
    assert sorted(e["reason"] for e in errors) == ["duplicate_trace_id"] * 2, errors
    assert {e["record_id"] for e in errors} == {t.trace_id for t in alone}


def test_an_id_the_log_records_is_kept(tmp_path):
    lines = [{"id": f"chatcmpl-{k}", "messages": [{"role": "user", "content": f"question {k}"},
                                                  {"role": "assistant", "content": "an answer"}]} for k in range(2)]
    (tmp_path / "chat.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    traces, errors = _read(tmp_path / "chat.jsonl")
    assert errors == [] and [t.trace_id for t in traces] == ["chatcmpl-0", "chatcmpl-1"]


def test_a_runs_digest_survives_staging(tmp_path):
    """The resume across the id change compares runs read now with runs staged before (pipelines/increment.py):
    a trace's digest and its Parquet row's must agree, times, metadata and empty fields included."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from masprism_batch import schema
    from masprism_batch.ingest.run_ids import content_digest
    from masprism_batch.trace import Trace

    (tmp_path / "logs.txt").write_text(crew_log(3, "crew\u00e9 \U0001f642", runs=2))
    traces, errors = _read(tmp_path / "logs.txt")
    traces[1].metadata = {"n": 1.5, "nested": {"k": [1, None, "x"]}, "when": "2026-12-03"}
    traces[1].steps[0].span_id, traces[1].steps[0].error = "s1", "Error: boom"
    pq.write_table(pa.Table.from_pylist([t.to_row() for t in traces], schema=schema.TRACES), tmp_path / "p.parquet")
    back = [Trace.from_row(r) for r in pq.read_table(tmp_path / "p.parquet").to_pylist()]
    assert errors == [] and all(s.start_time is not None for t in back for s in t.steps)
    assert [content_digest(t) for t in back] == [content_digest(t) for t in traces]
    assert len({content_digest(t) for t in traces}) == 2


def test_a_warning_about_a_kept_run_names_the_id_it_is_stored_under(tmp_path):
    """A step cut to the agent-name cap is a `step_truncated` warning row: its record_id is the run's id, not the
    reader's file-named one, so the row and the trace it speaks of can be joined."""
    lines = [{"messages": [{"role": "user", "content": f"question {k}"},
                           {"role": "assistant", "name": "A" * (400 + k), "content": "an answer"}]} for k in range(2)]
    (tmp_path / "chat.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines) + "{broken\n")
    traces, errors = _read(tmp_path / "chat.jsonl")
    warned = [e for e in errors if e["reason"] == "step_truncated"]
    assert len(traces) == 2 and len(warned) == 2, errors
    assert [e["record_id"] for e in warned] == [t.trace_id for t in traces]
    assert [e["reason"] for e in errors if e not in warned] == ["invalid_json"]  # a line that is no run: its place


def test_an_id_made_of_the_path_as_given_is_the_runs_too():
    """The smolagents message bus without message ids was named by the input path as typed (`./runs/x` and
    `runs/x` two ids for one run)."""
    from masprism_batch.ingest.documents import LABELS
    from masprism_batch.ingest.run_ids import content_digest, run_id
    from masprism_batch.trace import Step, Trace

    ids = set()
    for given in ("./runs/a1/messages.jsonl", "runs/a1/messages.jsonl"):
        t = Trace(trace_id=f"smolagents-bus/{given}", source="smolagents", steps=[Step(0, "agent_1", "hello")])
        ids.add(run_id(t, LABELS["smolagents-bus"], given))
    assert ids == {f"smolagents-bus/messages~{content_digest(t)}"}
    t.trace_id = "smolagents-bus/msg-0001"  # the first message's id: the log's own, kept
    assert run_id(t, LABELS["smolagents-bus"], "runs/a1/messages.jsonl") == "smolagents-bus/msg-0001"

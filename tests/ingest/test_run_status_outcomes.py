"""Issue 60 item 1: an execution status of OK is no grade (such runs are attributed); only a graded outcome sets a
run aside: tau-bench's reward, a canonical row's run_status, the team's outcomes file (Phoenix / Langfuse /
LangSmith evaluation exports) or a named score the log records. Each set-aside row names its signal."""

import csv
import json

import pytest

from masprism_batch.config import IngestConfig
from masprism_batch.ingest import outcomes, status
from masprism_batch.ingest.validate import validate
from masprism_batch.trace import Step, Trace


def _trace(tid: str, **kw) -> Trace:
    return Trace(trace_id=tid, source=kw.pop("source", "jsonl"),
                 steps=[Step(index=0, agent="A", content="hello"), Step(index=1, agent="B", content="world")], **kw)


def test_an_ok_status_is_no_grade(rng):
    ok = [rng.choice([{"status": {"code": 1}}, {"status": {"status_code": "OK"}}, {"status_code": "Ok"}])
          for _ in range(rng.randint(1, 6))]
    assert status.combine_statuses(status.span_status(s) for s in ok) == "unknown"
    assert status.combine_statuses(status.span_status(s) for s in ok + [{"status": {"code": 2}}]) == "failed"
    assert status.of_langfuse({"output": "an answer"}, [{"level": "DEFAULT"}]) == "unknown"
    assert status.of_langsmith([{"status": "success"}], {"status": "success", "outputs": {"a": 1}}) == "unknown"
    for word in ("ok", "OK", "status_code_ok", "okay"):
        assert status.of_field(word) == "unknown"
    for word in ("succeeded", "passed", "SUCCESS", "solved"):
        assert status.of_field(word) == "succeeded"
    assert status.of_reward(1.0) == "succeeded" and status.of_reward(0.0) == "failed"


def _aside(traces):
    rows = []
    kept = [t.trace_id for t in status.attributable(traces, rows.append)]
    return kept, rows


def test_only_graded_runs_are_set_aside_each_with_its_signal():
    traces = [_trace("ok", run_status="unknown"), _trace("bad", run_status="failed"),
              _trace("tb", source="tau-bench", run_status="succeeded"), _trace("mine", run_status="succeeded")]
    kept, rows = _aside(traces)
    assert kept == ["ok", "bad"]
    assert [outcomes.signal_of(r["message"]) for r in rows] == ["reward", "run_status"]
    assert outcomes.count_signals(rows) == {"reward": 1, "run_status": 1}
    c = status.outcome_counts(2, {"succeeded_run": 2}, outcomes.count_signals(rows))
    assert c["succeeded_by_signal"] == {"reward": 1, "run_status": 1}
    assert "reward x1, run_status x1" in status.signals_line(c)


def _write(path, rows):
    if path.suffix == ".csv":
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    elif path.suffix == ".json":
        path.write_text(json.dumps({"data": rows, "meta": {"page": 1}}))
    else:
        path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_outcome_files_as_the_tools_export_them(tmp_path):
    # Phoenix trace evaluations (a dataframe: context.trace_id index, label / score / explanation)
    phx = _write(tmp_path / "phoenix.csv", [
        {"context.trace_id": "t1", "label": "correct", "score": 1, "explanation": "right"},
        {"context.trace_id": "t2", "label": "incorrect", "score": 0, "explanation": "wrong"}])
    assert outcomes.load_outcomes(phx) == {"t1": True, "t2": False}
    # Langfuse scores (public API GET /api/public/scores: {"data": [...]}; NUMERIC and BOOLEAN values)
    lf = _write(tmp_path / "langfuse.json", [
        {"id": "s1", "traceId": "t1", "name": "accuracy", "value": 0.9, "dataType": "NUMERIC"},
        {"id": "s2", "traceId": "t2", "name": "accuracy", "value": 0.2, "dataType": "NUMERIC"},
        {"id": "s3", "traceId": "t1", "name": "helpfulness", "value": 1, "dataType": "BOOLEAN",
         "stringValue": "True"}])
    with pytest.raises(ValueError, match="--outcome-name"):
        outcomes.load_outcomes(lf)  # two evaluations: which one grades a run must be said
    assert outcomes.load_outcomes(lf, "accuracy", 0.5) == {"t1": True, "t2": False}
    assert outcomes.load_outcomes(lf, "helpfulness") == {"t1": True}
    # LangSmith feedback (run_id of the root run, key, score, value, comment)
    ls = _write(tmp_path / "feedback.jsonl", [
        {"id": "f1", "run_id": "r1", "key": "correctness", "score": 1, "value": None, "comment": ""},
        {"id": "f2", "run_id": "r2", "key": "correctness", "score": 0, "value": None, "comment": "no"},
        {"id": "f3", "run_id": "r2", "key": "correctness", "score": 1, "value": None, "comment": "later"}])
    assert outcomes.load_outcomes(ls, "correctness") == {"r1": True, "r2": False}  # one failing row fails it
    with pytest.raises(ValueError, match="trace id"):
        outcomes.load_outcomes(_write(tmp_path / "x.jsonl", [{"span_id": "s", "score": 1}]))


def test_outcomes_grade_as_traces_are_read(tmp_path):
    f = _write(tmp_path / "o.csv", [{"trace_id": "p", "passed": "true"}, {"trace_id": "f", "passed": "false"},
                                    {"trace_id": "s", "passed": "false"}])
    limits = IngestConfig(outcomes=str(f))
    graded = [validate(_trace(t, run_status=st), limits=limits)
              for t, st in (("p", "unknown"), ("f", "unknown"), ("s", "succeeded"), ("n", "unknown"))]
    assert [t.run_status for t in graded] == ["succeeded", "failed", "failed", "unknown"]
    kept, rows = _aside(graded)
    assert kept == ["f", "s", "n"] and outcomes.count_signals(rows) == {"outcomes": 1}
    # a score the log records (Langfuse trace scores, LangSmith feedback_stats), named
    head = {"scores": [{"name": "correctness", "value": 1.0}, {"name": "tone", "value": 0.1}]}
    assert status.recorded_scores(head) == {"correctness": 1.0, "tone": 0.1}
    assert status.recorded_scores({"feedback_stats": {"correctness": {"n": 2, "avg": 0.5}}}) == {"correctness": 0.5}
    limits = IngestConfig(outcome_name="correctness", pass_threshold=0.75)
    t = validate(_trace("r", metadata={"scores": {"correctness": 1.0}}), limits=limits)
    u = validate(_trace("q", metadata={"scores": {"correctness": 0.5}}), limits=limits)
    assert (t.run_status, t.metadata["graded_by"], u.run_status) == ("succeeded", "score", "failed")
    assert validate(_trace("r", metadata={"scores": {"correctness": 1.0}})).run_status == "unknown"  # not named


FORMATS = __import__("pathlib").Path(__file__).resolve().parents[1] / "data" / "formats"


def test_scores_the_exports_record_grade_a_run_when_named(tmp_path, rng):
    """A Langfuse trace download's `scores` and a LangSmith root run's `feedback_stats` reach the trace; with
    `--outcome-name` they grade it, without they do not (an output or status success is no grade)."""
    from masprism_batch.ingest import read_inputs

    def read(path, **limits):
        return list(read_inputs([str(path)], on_error=lambda r: None, limits=IngestConfig(**limits)))

    doc = json.loads((FORMATS / "_shapes" / "langfuse_ui_download.json").read_text())
    value = rng.choice([0, 1])
    doc["trace"]["scores"] = [{"name": "correctness", "value": value, "dataType": "BOOLEAN"},
                              {"name": "tone", "value": 0.2, "dataType": "NUMERIC"}]
    lf = tmp_path / "lf.json"
    lf.write_text(json.dumps(doc))
    [t] = read(lf)
    assert t.run_status == "unknown" and t.metadata["scores"] == {"correctness": value, "tone": 0.2}
    [t] = read(lf, outcome_name="correctness")
    assert (t.run_status, t.metadata["graded_by"]) == ("succeeded" if value else "failed", "score")
    lines = [json.loads(x) for x in (FORMATS / "langsmith_runs.jsonl").read_text().splitlines() if x.strip()]
    for r in lines:
        r["error"] = None
        if r["parent_run_id"] is None:
            r["feedback_stats"] = {"correctness": {"n": 2, "avg": 0.5}}
    ls = tmp_path / "ls.jsonl"
    ls.write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert [t.run_status for t in read(ls)] == ["unknown"]
    assert [t.run_status for t in read(ls, outcome_name="correctness", pass_threshold=0.5)] == ["succeeded"]
    assert [t.run_status for t in read(ls, outcome_name="correctness")] == ["failed"]  # 0.5 < 1.0

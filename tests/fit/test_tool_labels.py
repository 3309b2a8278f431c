"""Issue 60, item 3: `fit --labels` reads labels as annotation tools export them (tests/data/labels: a Phoenix
span-annotation frame as phoenix-client's `spans.get_span_annotations_dataframe` returns it, saved with pandas'
`to_csv` / `to_parquet`; Langfuse's `GET /api/public/scores` page and a CSV of the same fields; LangSmith feedback
as `client.list_feedback` records dumped to JSON), maps each record to its step through span ids, and takes only
the name and value that mean "this step caused the failure", configurable."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from masprism_batch.fit.labels import LabelsFileError, from_file
from masprism_batch.fit.tool_labels import Match, read_records
from masprism_batch.trace import Step, Trace

DATA = Path(__file__).resolve().parents[1] / "data" / "labels"
A, A_SPANS = "5f0c7e2a9b3d4c1e8a6f2b7d9e0c1a34", ["a1c2e3f4a5b6c7d8", "b2d3f4a5b6c7d8e9", "c3e4a5b6c7d8e9f0",
                                              "d4f5b6c7d8e9f0a1"]
B, B_SPANS = "7e1d2c3b4a5f6e7d8c9b0a1f2e3d4c5b", ["1a2b3c4d5e6f7081", "2b3c4d5e6f708192", "3c4d5e6f708192a3"]
C, C_RUNS = "0b6f1d3e-2a4c-4e8b-9f1a-3c5d7e9f1b2d", ["4e1a2b3c-5d6e-4f70-8192-a3b4c5d6e7f8",
                                                 "5f2b3c4d-6e7f-4081-92a3-b4c5d6e7f809",
                                                 "6a3c4d5e-7f80-4192-a3b4-c5d6e7f8091a"]
CHAT = "ww/HC-32"


def _trace(tid, spans, n=None):
    n = len(spans) if spans else n
    return Trace(tid, "trail", [Step(i, f"agent{i % 2}", f"step {i}", span_id=spans[i] if spans else None)
                               for i in range(n)])


@pytest.fixture
def traces():
    return {t.trace_id: t for t in (_trace(A, A_SPANS), _trace(B, B_SPANS), _trace(C, C_RUNS),
                                    _trace(CHAT, None, 5))}


@pytest.mark.parametrize("name", ["phoenix_span_annotations.csv", "phoenix_span_annotations.parquet"])
def test_phoenix_frame_a_correction_replaces_our_verdict(traces, name):
    gold, problems = from_file(DATA / name, traces)
    # A: our CODE verdict on step 1, a HUMAN correction on step 2 -> 2; B: our verdict kept, its "candidate" is
    # no label; "correctness" is another name; the span of a run not given is a skipped row
    assert {t: g.steps for t, g in gold.items()} == {A: [2], B: [0]}
    assert len(problems) == 1 and "ffff0000ffff0000" in problems[0] and "unknown trace" in problems[0]


@pytest.mark.parametrize("name", ["langfuse_scores_api.json", "langfuse_scores.csv"])
def test_langfuse_scores_observations_and_a_chat_log(traces, name):
    gold, problems = from_file(DATA / name, traces)
    # B: an ANNOTATION score on step 1 replaces our API verdict on step 0; the chat log's trace-level score (its
    # derived trace id) names its step in our metadata; numeric confidence and user_feedback are no labels
    assert {t: g.steps for t, g in gold.items()} == {A: [1], B: [1], CHAT: [3]}
    assert problems == []


def test_langsmith_feedback_by_run_id_and_a_boolean_score(traces):
    gold, _ = from_file(DATA / "langsmith_feedback.json", traces)
    assert {t: g.steps for t, g in gold.items()} == {C: [2]}
    gold, _ = from_file(DATA / "langsmith_feedback.json", traces, Match("caused_failure", ("true",)))
    assert {t: g.steps for t, g in gold.items()} == {C: [1]}


def test_a_name_no_record_has_says_which_names_there_are(traces):
    with pytest.raises(LabelsFileError, match=r"no phoenix record named 'blame'.*correctness \(1\).*--label-name"):
        from_file(DATA / "phoenix_span_annotations.parquet", traces, Match("blame"))


def test_the_label_value_is_configurable(traces):
    gold, _ = from_file(DATA / "phoenix_span_annotations.csv", traces, Match("correctness", ("INCORRECT",)))
    assert {t: g.steps for t, g in gold.items()} == {A: [3]}


def test_our_own_labels_format_is_not_taken_for_a_tool(tmp_path, traces):
    f = tmp_path / "labels.csv"
    f.write_text(f"trace_id,span_id,agent\n{A},{A_SPANS[3]},agent1\n")
    assert read_records(f, []) is None
    gold, problems = from_file(f, traces)
    assert gold[A].steps == [3] and gold[A].agents == ["agent1"] and problems == []


def test_the_fixtures_are_what_the_tools_write():
    """The field names the reader relies on, as the tools' SDKs name them (docs/labels.md cites the sources)."""
    import pyarrow.parquet as pq

    cols = pq.read_table(DATA / "phoenix_span_annotations.parquet").column_names
    assert {"span_id", "annotation_name", "annotator_kind", "result.label", "result.score",
            "result.explanation"} <= set(cols)
    page = json.loads((DATA / "langfuse_scores_api.json").read_text())
    assert {"data", "meta"} <= set(page)
    assert {"id", "traceId", "observationId", "name", "value", "dataType", "source", "comment"} <= set(page["data"][0])
    fb = json.loads((DATA / "langsmith_feedback.json").read_text())
    assert {"id", "run_id", "trace_id", "key", "score", "value", "comment", "feedback_source"} <= set(fb[0])
    assert page["data"][4]["traceId"] == hashlib.sha256(CHAT.encode()).hexdigest()[:32]


def test_a_damaged_or_inflating_parquet_export_is_one_error_naming_the_file(tmp_path, traces, monkeypatch):
    """A Parquet export cut short was pyarrow's OSError ("Couldn't deserialize thrift", naming no file) out of the
    reader; one whose row count no labels file of the size cap holds (a few KB of run-length-encoded rows can
    describe millions) was read whole into memory first."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from masprism_batch.fit import tool_labels

    whole = (DATA / "phoenix_span_annotations.parquet").read_bytes()
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(whole[: len(whole) // 2] + b"PAR1")
    with pytest.raises(LabelsFileError, match="cut.parquet.*not a readable Parquet file"):
        from_file(cut, traces)
    many = tmp_path / "many.parquet"
    pq.write_table(pa.table({"span_id": [A_SPANS[1]] * 50, "annotation_name": ["masprism_failure_attribution"] * 50,
                             "result.label": ["failure_source"] * 50}), many)
    assert from_file(many, traces)[0][A].steps == [1]
    monkeypatch.setattr(tool_labels, "MAX_PARQUET_ROWS", 49)
    with pytest.raises(LabelsFileError, match="many.parquet.*50 rows"):
        from_file(many, traces)


def test_a_span_with_several_steps_never_reads_true_as_step_1():
    """tool_labels._pick: a span carrying steps 1 and 3, whose metadata says `"step": true` (bool is an int in
    Python), took step 1; true names no step, so the span's own step is taken."""
    from masprism_batch.fit.tool_labels import _pick

    cands = [("s", 1, False), ("s", 3, True)]
    assert _pick(cands, {"step": True}) == 3
    assert _pick(cands, {"step": 1}) == 1 and _pick(cands, {}) == 3

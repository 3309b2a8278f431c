import json

import pandas as pd
import pytest
from analytics_synth import random_specs, write_outdir

from masprism_batch.analytics import AnalyticsInputError
from masprism_batch.analytics.export import (
    ANNOTATION_NAME,
    NothingToExport,
    export,
    read_jsonl,
)
from masprism_batch.outdir import reads as outdir_reads

PHOENIX_COLUMNS = ["span_id", "trace_id", "name", "annotator_kind", "label", "score", "explanation", "metadata"]


@pytest.fixture
def mixed_run(tmp_path, rng):
    """Span-tree traces (TRAIL-like) and chat traces (no span ids) in one OUTDIR, each with a verdict's
    confidence, what chose it and its agent rule."""
    specs = random_specs(rng, rng.randint(8, 25), spans=True) + random_specs(rng, rng.randint(3, 9))
    for i, sp in enumerate(specs):
        sp["trace_id"] = (f"{rng.getrandbits(128):032x}" if sp["steps"][0]["span_id"] else f"chat-{i}")
        sp["confidence"] = rng.random()
        sp["verdict_by"] = rng.choice(["rule:faithful", f"ranker:sys{i}", f"prior:sys{i}"])
        sp["pred_agent_rule"] = rng.choice(["author", "active", "mix:0.5", "aggregate", "prior|active"])
    return write_outdir(tmp_path / "out", specs), specs


def _read(path):
    return pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_json(path, lines=True, dtype=False)


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
@pytest.mark.parametrize("top_k", [1, 3])
def test_phoenix_annotations_in_the_one_file(mixed_run, tmp_path, suffix, top_k):
    """README: `pd.read_parquet("annotations.parquet")` loads every annotation, span and trace ones, from the
    one file -o names; nothing else is written beside it."""
    outdir, specs = mixed_run
    out = tmp_path / f"annotations{suffix}"
    n = export(outdir, "phoenix", out, top_k=top_k)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == [out.name]
    df = _read(out)
    assert list(df.columns) == PHOENIX_COLUMNS and n == len(df)
    spans = df[df["span_id"].notna()]
    traces = df[df["span_id"].isna()]
    want = {(sp["trace_id"], k) for sp in specs if sp["steps"][0]["span_id"] for k in sp["ranked"][:top_k]}
    chats = {sp["trace_id"] for sp in specs if not sp["steps"][0]["span_id"] and sp["ranked"]}
    assert {(m["trace_id"], m["step"]) for m in spans["metadata"]} == want
    assert set(traces["trace_id"]) == chats and len(traces) == len(chats)
    assert (traces["label"] == "failure_source").all()
    assert (df["annotator_kind"] == "CODE").all() and (df["name"] == ANNOTATION_NAME).all()
    assert spans["span_id"].map(lambda s: isinstance(s, str) and len(s) == 16).all()
    assert set(df["label"]) <= {"failure_source", "candidate"}
    assert (spans["label"] == "failure_source").sum() == len({t for t, _ in want})
    by_id = {sp["trace_id"]: sp for sp in specs}
    for row in df.itertuples():
        sp, m = by_id[row.metadata["trace_id"]], row.metadata
        # score in [0, 1] = the verdict's confidence on its own row; the raw score is kept apart
        if row.label == "failure_source":
            assert 0.0 <= row.score <= 1.0 and row.score == pytest.approx(sp["confidence"])
        else:
            assert row.score is None or pd.isna(row.score)
        assert m["raw_score"] == pytest.approx(sp["scores"][sp["ranked"].index(m["step"])])
        # the explanation names the verdict actually used
        assert m["verdict_by"] == sp["verdict_by"] and m["agent_rule"] == sp["pred_agent_rule"]
        assert sp["verdict_by"].split(":", 1)[1] in row.explanation
        assert f"{sp['confidence']:.2f}" in row.explanation


def test_phoenix_frame_passes_phoenix_client_validation(mixed_run, tmp_path):
    try:
        from phoenix.client.utils.annotation_helpers import (
            _chunk_span_annotations_dataframe,
            _validate_span_annotations_dataframe,
        )
    except ImportError as exc:
        pytest.skip(f"arize-phoenix-client not installed or its helpers moved ({exc}); columns checked above")
    outdir, _ = mixed_run
    export(outdir, "phoenix", tmp_path / "a.parquet", top_k=5)
    df = pd.read_parquet(tmp_path / "a.parquet")
    df = df[df["span_id"].notna()]  # the span rows, as docs/reporting.md passes them
    _validate_span_annotations_dataframe(dataframe=df, annotation_name_required=True, annotator_kind_required=True)
    anns = [a for chunk in _chunk_span_annotations_dataframe(dataframe=df) for a in chunk]
    assert len(anns) == len(df)
    assert all(a["annotator_kind"] == "CODE" and "score" in a["result"] and a["metadata"]["trace_id"]
               for a in anns)


def test_otel_records(mixed_run, tmp_path):
    outdir, specs = mixed_run
    n = export(outdir, "otel", tmp_path / "e.jsonl", top_k=2)
    lines = (tmp_path / "e.jsonl").read_text().splitlines()
    recs = [r for line in lines for rl in json.loads(line)["resourceLogs"] for sl in rl["scopeLogs"]
            for r in sl["logRecords"]]
    assert n == len(recs) == sum(min(2, len(sp["ranked"])) for sp in specs)
    for r in recs:
        attrs = {a["key"]: next(iter(a["value"].values())) for a in r["attributes"]}
        assert r["eventName"] == "gen_ai.evaluation.result"
        assert attrs["gen_ai.evaluation.name"] == ANNOTATION_NAME
        if attrs["gen_ai.evaluation.score.label"] == "failure_source":  # the confidence, in [0, 1]
            assert 0.0 <= attrs["gen_ai.evaluation.score.value"] <= 1.0
        else:
            assert "gen_ai.evaluation.score.value" not in attrs
        assert isinstance(attrs["masprism.raw_score"], float)
        assert attrs["gen_ai.evaluation.score.label"] in {"failure_source", "candidate"}
        # hex trace ids (TRAIL) put the record on the evaluated span; chat ids stay attributes only
        assert ("spanId" in r) == (not attrs["masprism.trace_id"].startswith("chat-"))
    try:
        from google.protobuf.json_format import Parse
        from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    except ImportError:
        return  # shape checked above; the protobuf check needs opentelemetry-proto
    for line in lines:
        req = json.loads(line)
        for rl in req["resourceLogs"]:
            for sl in rl["scopeLogs"]:
                for r in sl["logRecords"]:  # OTLP/JSON ids are hex, protobuf JSON wants base64: check apart
                    r.pop("traceId", None), r.pop("spanId", None)
        Parse(json.dumps(req), ExportLogsServiceRequest())


def test_jsonl_round_trip(mixed_run, tmp_path):
    outdir, specs = mixed_run
    assert export(outdir, "jsonl", tmp_path / "a.jsonl") == len(specs)
    back = read_jsonl(tmp_path / "a.jsonl")
    table = outdir_reads.read_dataset(outdir / "attributions").to_pylist()
    assert set(back) == {r["trace_id"] for r in table}
    for r in table:
        b = back[r["trace_id"]]
        for k in ("source", "system", "pred_step", "pred_agent", "pred_span_id", "candidates", "symptoms",
                  "model_id", "config_hash"):
            assert b[k] == r[k], k
        assert b["attributed_at"] == r["attributed_at"].isoformat()


def test_export_errors(tmp_path):
    with pytest.raises(AnalyticsInputError):
        export(tmp_path, "jsonl", tmp_path / "x.jsonl")
    with pytest.raises(ValueError, match="unknown export format"):
        export(tmp_path, "csv", tmp_path / "x.csv")
    assert not (tmp_path / "x.jsonl").exists()


def test_phoenix_trace_annotations_pass_phoenix_client_validation(mixed_run, tmp_path):
    try:
        from phoenix.client.utils.annotation_helpers import _validate_trace_annotations_dataframe
    except ImportError as exc:
        pytest.skip(f"arize-phoenix-client not installed or its helpers moved ({exc})")
    outdir, specs = mixed_run
    export(outdir, "phoenix", tmp_path / "a.parquet", top_k=3)
    df = pd.read_parquet(tmp_path / "a.parquet")
    tdf = df[df["span_id"].isna()].drop(columns="span_id")  # the trace rows, as docs/reporting.md passes them
    _validate_trace_annotations_dataframe(dataframe=tdf, annotation_name_required=True,
                                          annotator_kind_required=True)


def test_export_with_nothing_to_export_writes_nothing(tmp_path, rng):
    specs = random_specs(rng, 3)
    for sp in specs:
        sp["ranked"], sp["scores"] = [], []
    outdir = write_outdir(tmp_path / "out", specs)
    for to in ("phoenix", "otel"):
        with pytest.raises(NothingToExport, match="nothing to export"):
            export(outdir, to, tmp_path / f"x.{to}")
        assert not (tmp_path / f"x.{to}").exists()


def test_export_never_creates_the_output_folder(mixed_run, tmp_path):
    outdir, _ = mixed_run
    with pytest.raises(FileNotFoundError, match="does not exist"):
        export(outdir, "jsonl", tmp_path / "nope" / "dir" / "x.jsonl")
    assert not (tmp_path / "nope").exists()

import json

import pandas as pd
import pytest
from analytics_synth import random_specs, write_outdir

from masprism_batch.analytics import AnalyticsInputError, ids
from masprism_batch.analytics.export import (
    ANNOTATION_NAME,
    NothingToExport,
    export,
    export_files,
    phoenix_paths,
    read_jsonl,
)
from masprism_batch.outdir import reads as outdir_reads

PHOENIX_COLUMNS = {
    "spans": ["span_id", "trace_id", "name", "annotator_kind", "label", "score", "explanation", "metadata"],
    "traces": ["trace_id", "name", "annotator_kind", "label", "score", "explanation", "metadata"],
    "candidates": ["span_id", "trace_id", "name", "annotator_kind", "label", "explanation", "metadata"],
}


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
def test_phoenix_annotations_one_file_per_target(mixed_run, tmp_path, suffix, top_k):
    """Issue 51: each file is what one Phoenix client method takes as is: span annotations (span_id never
    null), trace annotations (no span_id column), lower candidates (no score column: Phoenix refuses a null
    score); nothing else is written beside them."""
    outdir, specs = mixed_run
    out = tmp_path / f"annotations{suffix}"
    written = export_files(outdir, "phoenix", out, top_k=top_k)
    paths = phoenix_paths(out)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == sorted(p.name for p in written)
    dfs = {t: _read(p) for t, p in paths.items() if p in written}
    for t, df in dfs.items():
        assert list(df.columns) == PHOENIX_COLUMNS[t] and written[paths[t]] == len(df)
        assert (df["annotator_kind"] == "CODE").all() and (df["name"] == ANNOTATION_NAME).all()
        if "score" in df:
            assert df["score"].notna().all() and df["score"].between(0, 1).all()
        if "span_id" in df:
            assert df["span_id"].map(lambda s: isinstance(s, str) and len(s) == 16).all()
    spans, traces = dfs.get("spans"), dfs.get("traces")
    cands = dfs.get("candidates")
    assert (cands is None) == (top_k == 1 or not any(len(sp["ranked"]) > 1 for sp in specs
                                                      if sp["steps"][0]["span_id"]))
    want = {(sp["trace_id"], k) for sp in specs if sp["steps"][0]["span_id"] for k in sp["ranked"][:top_k]}
    chats = {sp["trace_id"] for sp in specs if not sp["steps"][0]["span_id"] and sp["ranked"]}
    got = [(m["trace_id"], m["step"]) for df in (spans, cands) if df is not None for m in df["metadata"]]
    assert sorted(got) == sorted(want)
    assert set(traces["trace_id"]) == {ids.export_trace_id(t) for t in chats} and len(traces) == len(chats)
    assert {m["trace_id"] for m in traces["metadata"]} == chats  # the log's own id kept beside the derived one
    assert (traces["label"] == "failure_source").all() and (spans["label"] == "failure_source").all()
    assert len(spans) == len({t for t, _ in want})
    assert cands is None or (cands["label"] == "candidate").all()
    by_id = {sp["trace_id"]: sp for sp in specs}
    for df in dfs.values():
        for row in df.itertuples():
            sp, m = by_id[row.metadata["trace_id"]], row.metadata
            if row.label == "failure_source":  # score = the verdict's confidence on its own row
                assert row.score == pytest.approx(sp["confidence"])
            assert m["raw_score"] == pytest.approx(sp["scores"][sp["ranked"].index(m["step"])])
            # the explanation names the verdict actually used
            assert m["verdict_by"] == sp["verdict_by"] and m["agent_rule"] == sp["pred_agent_rule"]
            assert sp["verdict_by"].split(":", 1)[1] in row.explanation
            assert f"{sp['confidence']:.2f}" in row.explanation


def test_phoenix_files_load_with_the_phoenix_client_as_written(mixed_run, tmp_path):
    """Issue 51: every file goes through Phoenix's own client unchanged (its validation, its row-to-annotation
    conversion and its strict JSON body), against a stand-in server that records what was posted."""
    try:
        import httpx
        from phoenix.client import Client
    except ImportError as exc:
        pytest.skip(f"arize-phoenix-client not installed ({exc}); the columns are checked in the test above")
    outdir, specs = mixed_run
    written = export_files(outdir, "phoenix", tmp_path / "a.parquet", top_k=5)
    posted = []

    def server(request):
        posted.append((request.url.path, json.loads(request.content)))
        return httpx.Response(200, json={"data": []})

    client = Client(http_client=httpx.Client(transport=httpx.MockTransport(server), base_url="http://phoenix"))
    paths = phoenix_paths(tmp_path / "a.parquet")
    for target, path in paths.items():
        if path not in written:
            continue
        df = pd.read_parquet(path)  # as docs/reporting.md says: read, pass, nothing dropped or renamed
        if target == "traces":
            client.traces.log_trace_annotations_dataframe(dataframe=df)
        else:
            client.spans.log_span_annotations_dataframe(dataframe=df)
    sent = [a for _, body in posted for a in body["data"]]
    assert len(sent) == sum(written.values())
    assert all(("span_id" in a) != ("trace_id" in a and "span_id" not in a) for a in sent)
    assert {a["metadata"]["trace_id"] for a in sent} == {sp["trace_id"] for sp in specs if sp["ranked"]}


def test_a_verdict_on_an_input_message_targets_the_span_that_carried_it(tmp_path, rng):
    """Issue 51: a step made of a span's input message (`<span>#input<j>`) is annotated on `<span>`; Phoenix
    knows no `#input1` id (404)."""
    specs = random_specs(rng, rng.randint(3, 8), spans=True)
    carriers = {}
    for sp in specs:
        sp["trace_id"] = f"{rng.getrandbits(128):032x}"
        if sp["ranked"]:
            step = sp["steps"][sp["ranked"][0]]
            carriers[sp["trace_id"]] = step["span_id"]
            step["span_id"] = f"{step['span_id']}#input{rng.randint(0, 3)}"
    outdir = write_outdir(tmp_path / "out", specs)
    export(outdir, "phoenix", tmp_path / "a.parquet", top_k=1)
    df = pd.read_parquet(phoenix_paths(tmp_path / "a.parquet")["spans"])
    assert dict(zip(df["trace_id"], df["span_id"], strict=True)) == carriers
    assert not df["span_id"].str.contains("#").any()
    export(outdir, "otel", tmp_path / "e.jsonl", top_k=1)
    recs = [r for line in (tmp_path / "e.jsonl").read_text().splitlines()
            for r in json.loads(line)["resourceLogs"][0]["scopeLogs"][0]["logRecords"]]
    assert {r["traceId"]: r["spanId"] for r in recs} == carriers


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


def test_export_with_nothing_to_export_writes_nothing(tmp_path, rng):
    specs = random_specs(rng, 3)
    for sp in specs:
        sp["ranked"], sp["scores"] = [], []
    outdir = write_outdir(tmp_path / "out", specs)
    for to in ("phoenix", "otel"):
        with pytest.raises(NothingToExport, match="nothing to export"):
            export(outdir, to, tmp_path / f"x.{to}")
        assert not [p for p in tmp_path.iterdir() if p.is_file()]


def test_export_never_creates_the_output_folder(mixed_run, tmp_path):
    outdir, _ = mixed_run
    with pytest.raises(FileNotFoundError, match="does not exist"):
        export(outdir, "jsonl", tmp_path / "nope" / "dir" / "x.jsonl")
    assert not (tmp_path / "nope").exists()

"""Issue 60, item 3's round trip: our verdicts exported, loaded into the tool, pulled back as the tool gives them
(Phoenix's span-annotation dataframe, Langfuse's score listing), corrected there, and read by `fit --labels`:
the same steps come back, a correction made in the tool replaces the verdict it corrects."""

from __future__ import annotations

import json

import pandas as pd
from analytics_synth import random_specs, write_outdir

from masprism_batch.analytics.export import export_files, phoenix_paths
from masprism_batch.fit.labels import from_file
from masprism_batch.outdir.reads import read_dataset
from masprism_batch.trace import Trace


def _run(tmp_path, rng):
    specs = random_specs(rng, 14, spans=True) + random_specs(rng, 6)
    for i, sp in enumerate(specs):
        sp["trace_id"] = f"{rng.getrandbits(128):032x}" if sp["steps"][0]["span_id"] else f"ww/HC-{i}"
        sp["confidence"] = rng.random()
    out = write_outdir(tmp_path / "out", specs)
    traces = {r["trace_id"]: Trace.from_row(r) for r in read_dataset(out / "traces").to_pylist()}
    verdicts = {a["trace_id"]: a["pred_step"] for a in read_dataset(out / "attributions").to_pylist()
                if a["pred_step"] is not None}
    return out, traces, verdicts


def _phoenix_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """What phoenix-client's spans.get_span_annotations_dataframe returns for annotations logged from `rows`."""
    recs = [{"id": f"U3BhbkFubm90YXRpb246{i}", "span_id": r.span_id, "name": r.name, "annotator_kind": r.annotator_kind,
             "result": {"label": r.label, "score": getattr(r, "score", None), "explanation": r.explanation},
             "metadata": r.metadata, "identifier": "", "source": "API", "user_id": None,
             "created_at": "2026-12-03T09:00:00+00:00", "updated_at": "2026-12-03T09:00:00+00:00"}
            for i, r in enumerate(rows.itertuples())]
    df = pd.DataFrame(recs)
    df = pd.concat([df.drop(columns=["result"]),
                    pd.json_normalize(df["result"]).rename(columns=lambda c: f"result.{c}")], axis=1)
    return df.rename(columns={"name": "annotation_name"}).set_index("span_id")


def test_ours_to_phoenix_frame_to_fit_gives_the_same_steps_and_the_correction(tmp_path, rng):
    out, traces, verdicts = _run(tmp_path, rng)
    export_files(out, "phoenix", tmp_path / "ann.parquet", top_k=3)
    paths = phoenix_paths(tmp_path / "ann.parquet")
    rows = pd.concat([pd.read_parquet(p) for t, p in paths.items() if t != "traces" and p.exists()],
                     ignore_index=True)
    span_traces = {t for t, tr in traces.items() if tr.steps[0].span_id and t in verdicts}
    frame = _phoenix_frame(rows)
    for fmt in ("parquet", "csv"):
        f = tmp_path / f"pulled.{fmt}"
        frame.to_parquet(f) if fmt == "parquet" else frame.to_csv(f)
        gold, problems = from_file(f, traces)
        assert {t: g.steps for t, g in gold.items()} == {t: [verdicts[t]] for t in span_traces}, fmt
        assert problems == []
    # chat logs: their trace annotations (on the derived trace id) name the step in our metadata
    chats = {t for t in verdicts if t not in span_traces}
    gold, problems = from_file(paths["traces"], traces)
    assert chats and {t: g.steps for t, g in gold.items()} == {t: [verdicts[t]] for t in chats} and problems == []
    # corrected in Phoenix: a reviewer marks another span of one trace as the failure source
    tid = next(t for t in sorted(span_traces) if len(traces[t].steps) > 1)
    other = next(i for i in range(len(traces[tid].steps)) if i != verdicts[tid])
    fix = pd.DataFrame([{"span_id": traces[tid].steps[other].span_id, "name": "masprism_failure_attribution",
                         "annotator_kind": "HUMAN", "label": "failure_source", "score": None,
                         "explanation": "reviewed", "metadata": {}}])
    both = pd.concat([rows, fix], ignore_index=True)
    _phoenix_frame(both).to_csv(tmp_path / "corrected.csv")
    gold, _ = from_file(tmp_path / "corrected.csv", traces)
    assert gold[tid].steps == [other]
    assert {t: g.steps for t, g in gold.items() if t != tid} == {t: [verdicts[t]] for t in span_traces - {tid}}


def test_ours_to_langfuse_scores_to_fit_gives_the_same_steps_chat_logs_too(tmp_path, rng):
    out, traces, verdicts = _run(tmp_path, rng)
    export_files(out, "langfuse", tmp_path / "scores.jsonl", top_k=2)
    bodies = [json.loads(x) for x in (tmp_path / "scores.jsonl").read_text().splitlines()]
    # as GET /api/public/scores lists them once ingested: a categorical's text in stringValue, value its mapping
    page = {"data": [{**b, "value": 0 if b["dataType"] == "CATEGORICAL" else b["value"],
                      **({"stringValue": b["value"]} if b["dataType"] == "CATEGORICAL" else {}),
                      "source": "API", "timestamp": "2026-12-03T09:00:00.000Z", "createdAt": "2026-12-03T09:00:00.000Z",
                      "updatedAt": "2026-12-03T09:00:00.000Z", "sessionId": None, "datasetRunId": None,
                      "observationId": b.get("observationId"), "environment": "default"} for b in bodies],
            "meta": {"page": 1, "limit": 100, "totalItems": len(bodies), "totalPages": 1}}
    (tmp_path / "scores.json").write_text(json.dumps(page))
    for f in (tmp_path / "scores.json", tmp_path / "scores.jsonl"):  # the listing, and our own file as written
        gold, problems = from_file(f, traces)
        assert {t: g.steps for t, g in gold.items()} == {t: [s] for t, s in verdicts.items()}, f.name
        assert problems == []

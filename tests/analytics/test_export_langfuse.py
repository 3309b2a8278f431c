"""Issue 60, item 4: `export --to langfuse` writes Langfuse score create bodies (POST /api/public/scores), one per
line, naming the same verdict as attributions/; every record carries a 32-hex trace id, a chat log's derived
from its own id."""

from __future__ import annotations

import hashlib
import json
import re

from analytics_synth import random_specs, write_outdir

from masprism_batch.analytics.export import export_files
from masprism_batch.analytics.export_rows import ANNOTATION_NAME
from masprism_batch.outdir.reads import read_dataset

CREATE_FIELDS = {"id", "traceId", "sessionId", "observationId", "datasetRunId", "name", "value", "comment",
                 "metadata", "environment", "queueId", "dataType", "configId"}  # langfuse-python CreateScoreRequest


def test_langfuse_scores_name_the_verdict_with_a_trace_id_each(tmp_path, rng):
    specs = random_specs(rng, 12, spans=True) + random_specs(rng, 6)
    for i, sp in enumerate(specs):
        sp["trace_id"] = f"{rng.getrandbits(128):032x}" if sp["steps"][0]["span_id"] else f"ww/HC-{i}"
        sp["confidence"] = rng.choice([None, rng.random()])
    out = write_outdir(tmp_path / "out", specs)
    written = export_files(out, "langfuse", tmp_path / "s.jsonl", top_k=3)
    lines = [json.loads(x) for x in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert written == {tmp_path / "s.jsonl": len(lines)}
    attr = {a["trace_id"]: a for a in read_dataset(out / "attributions").to_pylist() if a["pred_step"] is not None}
    firsts = {}
    for b in lines:
        assert set(b) <= CREATE_FIELDS and re.fullmatch(r"[0-9a-f]{32}", b["traceId"])
        src = b["metadata"]["trace_id"]
        want = src if re.fullmatch(r"[0-9a-f]{32}", src) else hashlib.sha256(src.encode()).hexdigest()[:32]
        assert b["traceId"] == want
        assert b["dataType"] in {"CATEGORICAL", "NUMERIC"}
        assert isinstance(b["value"], str) == (b["dataType"] == "CATEGORICAL")
        if b["name"] == ANNOTATION_NAME and b["value"] == "failure_source":
            firsts[src] = b
    assert set(firsts) == set(attr)
    for tid, b in firsts.items():  # one verdict: the step and span attributions name
        a = attr[tid]
        assert b["metadata"]["step"] == a["pred_step"] and b["metadata"]["blamed_agent"] == a["pred_agent"]
        assert b.get("observationId") == a["pred_span_id"]  # hex already in the synthetic run; none for chats
    conf = [b for b in lines if b["name"] == "masprism_confidence"]
    assert {b["metadata"]["trace_id"] for b in conf} == {t for t, a in attr.items() if a["confidence"] is not None}
    assert len({b["id"] for b in lines}) == len(lines)  # one id per score: a resend updates, never doubles
    again = tmp_path / "again.jsonl"
    export_files(out, "langfuse", again, top_k=3)
    assert again.read_text() == (tmp_path / "s.jsonl").read_text()


def test_every_otel_record_has_a_trace_id(tmp_path, rng):
    specs = random_specs(rng, 8, spans=True) + random_specs(rng, 8)
    for i, sp in enumerate(specs):
        sp["trace_id"] = f"{rng.getrandbits(128):032x}" if sp["steps"][0]["span_id"] else f"ww/HC-{i}"
    out = write_outdir(tmp_path / "out", specs)
    export_files(out, "otel", tmp_path / "o.jsonl", top_k=2)
    recs = [r for line in (tmp_path / "o.jsonl").read_text().splitlines()
            for rl in json.loads(line)["resourceLogs"] for sl in rl["scopeLogs"] for r in sl["logRecords"]]
    assert recs and all(re.fullmatch(r"[0-9a-f]{32}", r.get("traceId", "")) for r in recs)

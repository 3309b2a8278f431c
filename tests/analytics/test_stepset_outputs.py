"""Issue 59 item 1, the outputs: every reader of a run carries the verdict's steps to read (`read_steps` and the
step-set columns): `show`, `stats` (the coverage achieved where labels exist, the mean set share), the report's
drill-down ("Read these first") and the exports; outputs written before the columns still read (shown as absent)."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
from analytics_synth import random_specs, write_outdir
from typer.testing import CliRunner

from masprism_batch.analytics.export import export_files, jsonl_records, phoenix_rows
from masprism_batch.analytics.export_otel import otel_records
from masprism_batch.analytics.report_data import DrillLimits, build_payloads
from masprism_batch.analytics.stats import compute_stats
from masprism_batch.cli import EXIT_OK, app

SET = ("read_steps", "set_size", "set_share", "set_coverage", "set_by", "localised")


def _labelled_run(tmp_path, drop: bool = False):
    """Four Who&When-like logs of 10 steps, labelled at step 4; their sets hold it in 3 of 4 (shares 0.3, 0.2,
    0.5, 0.2). drop: parts written before the step-set columns existed."""
    specs = random_specs(random.Random(3), 4)
    sets = [[4, 1, 2], [2, 4], [0, 1, 2, 3, 5], [4, 7]]
    for s, read in zip(specs, sets, strict=True):
        s["steps"] = [{"agent": f"A{i % 3}", "content": f"step {i}"} for i in range(10)]
        s["labels"] = {"mistake_step": 4, "mistake_agent": "A1", "error_locations": None, "error_impacts": None,
                       "error_categories": None}
        s["ranked"], s["scores"], s["symptoms"] = read, [1.0] * len(read), [9]
        s["nll"], s["nll2"], s["source"], s["system"] = [1.0] * 10, None, "src/A", "S"
    run = write_outdir(tmp_path / "run", specs)
    for part in sorted((run / "attributions").glob("*.parquet")):
        t = pq.read_table(part)
        rows = t.to_pylist()
        for r in rows:
            read = next(s for s in sets if s[0] == r["pred_step"] and len(s) == len(r["candidates"]))
            r.update({"read_steps": read, "set_size": len(read), "set_share": len(read) / 10, "set_coverage": 0.8,
                      "set_by": "dev:zero-training", "localised": len(read) <= 6})
        t = pa.Table.from_pylist(rows, schema=t.schema)
        pq.write_table(t.drop(list(SET)) if drop else t, part)
    return run


def test_stats_reports_the_coverage_achieved_and_the_mean_set_share(tmp_path):
    st = compute_stats(_labelled_run(tmp_path))
    acc = {r["metric"]: r for r in st["accuracy"].to_pylist() if r["source"] == "src/A"}
    cov, share = acc["set_coverage@0.8"], acc["set_share@0.8"]
    assert cov["n_traces"] == 4 and cov["value"] == 0.75  # sets 1, 2 and 4 hold step 4
    assert abs(cov["random_baseline"] - 0.3) < 1e-9 and abs(share["value"] - 0.3) < 1e-9
    (v,) = st["verdicts"].to_pylist()
    assert abs(v["mean_set_share"] - 0.3) < 1e-9


def test_show_report_and_exports_carry_the_set(tmp_path):
    run = _labelled_run(tmp_path)
    res = CliRunner().invoke(app, ["show", str(run), "--by", "trace"])
    assert res.exit_code == EXIT_OK and "then 1,2" in res.output and "then 4" in res.output, res.output
    att = pq.read_table(run / "attributions")
    ids = att["trace_id"].to_pylist()
    pays = {p["id"]: p for p in build_payloads(run, att, ids, DrillLimits())}
    first = next(r for r in att.to_pylist() if r["read_steps"] == [4, 1, 2])
    assert pays[first["trace_id"]]["set"] == [4, 1, 2] and pays[first["trace_id"]]["setc"] == 0.8
    rec = {r["custom_id"]: r for r in jsonl_records(run)}[first["trace_id"]]
    assert rec["read_steps"] == [4, 1, 2] and rec["set_by"] == "dev:zero-training" and rec["localised"] is True
    rows = phoenix_rows(run)
    ann = next(r for r in rows["traces"] if r["metadata"]["trace_id"] == first["trace_id"])
    assert ann["metadata"]["read_steps"] == [4, 1, 2] and "Read first: step(s) 4, 1, 2 (3 of 10)" in ann["explanation"]
    ev = next(r for r in otel_records(run) if any(a["key"] == "masprism.trace_id" and
                                                  a["value"]["stringValue"] == first["trace_id"] for a in r["attributes"]))
    attrs = {a["key"]: a["value"] for a in ev["attributes"]}
    assert attrs["masprism.read_steps"] == {"stringValue": "4,1,2"} and attrs["masprism.set_size"] == {"intValue": "3"}
    export_files(run, "phoenix", tmp_path / "a.parquet")  # the metadata struct holds the set's types
    assert pq.read_table(tmp_path / "a.traces.parquet").column("metadata").type.get_field_index("read_steps") >= 0


def test_outputs_written_before_the_step_set_still_read(tmp_path):
    run = _labelled_run(tmp_path, drop=True)
    st = compute_stats(run)
    assert not any(r["metric"].startswith("set_") for r in st["accuracy"].to_pylist())
    assert st["verdicts"].to_pylist()[0]["mean_set_share"] is None
    res = CliRunner().invoke(app, ["show", str(run), "--by", "trace"])
    assert res.exit_code == EXIT_OK and "then" not in res.output, res.output
    att = pq.read_table(run / "attributions")
    assert all(p["set"] is None for p in build_payloads(run, att, att["trace_id"].to_pylist(), DrillLimits()))
    recs = list(jsonl_records(run))
    assert recs and all(r["read_steps"] is None for r in recs)
    assert all("Read first" not in r["explanation"] for r in phoenix_rows(run)["traces"])
    assert all(not any(a["key"] == "masprism.read_steps" for a in r["attributes"]) for r in otel_records(run))
    json.dumps(recs, default=str)
    out = tmp_path / "r.html"
    assert CliRunner().invoke(app, ["report", str(run), "-o", str(out)]).exit_code == EXIT_OK

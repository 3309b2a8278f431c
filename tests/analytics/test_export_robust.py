"""Issue 61 finding 6 (the export half): one trace with a 5,000-digit decimal span id made every export (phoenix,
otel, jsonl) exit 1 writing nothing (int() of more than 4,300 digits raises). An export never dies on one record:
an id no backend form holds is handled (no span id; the trace id derived from the text), and a record that still
cannot be built is skipped with a warning, the rest written. Whatever an OUTDIR holds: ingest caps ids today,
OUTDIRs written before it did not."""

from __future__ import annotations

import json
import logging

import pandas as pd
import pytest
from analytics_synth import random_specs, write_outdir

from masprism_batch.analytics import ids
from masprism_batch.analytics.export import export_files, phoenix_paths

HUGE = "9" * 5000  # decimal text of no 64- or 128-bit id, past int()'s 4,300-digit limit


def test_an_id_past_any_width_is_no_id_and_never_parsed():
    assert ids.otel_span_id(HUGE) is None and ids.otel_span_id(HUGE, decimal=True) is None
    assert ids.otel_trace_id(HUGE) is None and ids.otel_trace_id("f" * 2_000_000) is None
    assert len(ids.export_trace_id(HUGE)) == 32  # derived from the text, as for a chat log's id
    assert ids.otel_trace_id(str((1 << 128) - 1)) == "f" * 32  # 39 digits: the widest decimal trace id still read
    assert ids.otel_trace_id(str(1 << 128)) is None


@pytest.fixture
def hostile_run(tmp_path, rng):
    specs = [sp for sp in random_specs(rng, 12, spans=True) if sp["ranked"]]
    bad = specs[0]
    bad["trace_id"] = HUGE
    for s in bad["steps"]:
        s["span_id"] = HUGE[:-1] + str(rng.randrange(10))  # every step, the blamed one too
    return write_outdir(tmp_path / "out", specs), specs


@pytest.mark.parametrize("to", ["phoenix", "otel", "jsonl", "langfuse"])
def test_every_export_writes_every_verdict_past_a_5000_digit_id(hostile_run, tmp_path, to):
    outdir, specs = hostile_run
    out = tmp_path / f"x.{'parquet' if to == 'phoenix' else 'jsonl'}"
    written = export_files(outdir, to, out)
    derived = ids.export_trace_id(HUGE)
    if to == "phoenix":  # on the span as the source named it (no OTel id: its text), in the derived trace
        frames = [pd.read_parquet(p) for p in phoenix_paths(out).values() if p.exists()]
        assert derived in {t for f in frames for t in f["trace_id"]}
        assert sum(len(f) for f in frames) == len(specs)
    elif to == "otel":
        recs = [r for line in out.read_text().splitlines()
                for r in json.loads(line)["resourceLogs"][0]["scopeLogs"][0]["logRecords"]]
        assert len(recs) == len(specs) and {r["traceId"] for r in recs} >= {derived}
        assert all("spanId" not in r for r in recs if r["traceId"] == derived)
    elif to == "langfuse":
        recs = [json.loads(line) for line in out.read_text().splitlines()]
        assert {r["traceId"] for r in recs} == {ids.export_trace_id(sp["trace_id"]) for sp in specs}
        return
    else:
        recs = [json.loads(line) for line in out.read_text().splitlines()]
        assert len(recs) == len(specs) and {r["otel_trace_id"] for r in recs} >= {derived}
    assert sum(written.values()) == len(specs)


@pytest.mark.parametrize("to", ["phoenix", "otel", "jsonl", "langfuse"])
def test_a_record_that_cannot_be_built_is_skipped_with_a_warning_and_the_rest_written(hostile_run, tmp_path, to,
                                                                                       monkeypatch, caplog):
    outdir, specs = hostile_run
    bad = specs[3]["trace_id"]
    real = ids.export_trace_id

    def fails_on_one(tid):
        if tid == bad:
            raise OverflowError("a value no backend form holds")
        return real(tid)

    monkeypatch.setattr(ids, "export_trace_id", fails_on_one)
    out = tmp_path / f"x.{'parquet' if to == 'phoenix' else 'jsonl'}"
    with caplog.at_level(logging.WARNING):
        written = export_files(outdir, to, out)
    assert sum(written.values()) == len(specs) - 1  # one record each (no confidence, no kind in these verdicts)
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "skipped" in said and "OverflowError" in said and "1 verdict(s)" in said, said


@pytest.mark.parametrize("force", [False, True])
def test_a_parquet_export_never_replaces_a_fifo(hostile_run, tmp_path, force):
    """Finding 15: `export --to phoenix --force` replaced a FIFO at F.spans.parquet with a regular file."""
    import os

    from typer.testing import CliRunner

    from masprism_batch.cli import app

    outdir, _ = hostile_run
    out = tmp_path / "F.parquet"
    fifo = phoenix_paths(out)["spans"]
    os.mkfifo(fifo)
    res = CliRunner().invoke(app, ["export", str(outdir), "--to", "phoenix", "-o", str(out),
                                   *(["--force"] if force else [])])
    assert res.exit_code == 1 and "a FIFO or device" in " ".join(res.output.split()), res.output
    assert fifo.is_fifo() and not any(p.exists() for t, p in phoenix_paths(out).items() if t != "spans")

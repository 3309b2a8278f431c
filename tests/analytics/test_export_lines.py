"""Red-team round on the exports: every JSON-lines export (jsonl, langfuse, otel, phoenix's JSON-lines files) holds
one record per line however a reader splits lines. JSON keeps U+2028, U+2029 and U+0085 raw inside a string, and
Python's `str.splitlines()` (the usual way to read such a file, and this repository's own: ingest, the tests) ends
a line at each of them: an agent or trace id holding one broke its record in two lines, neither valid JSON. They
are written as JSON escapes; the values read back are the same."""

from __future__ import annotations

import json

import pytest
from analytics_synth import write_outdir

from masprism_batch.analytics.export import export_files, phoenix_paths, read_jsonl

SEPARATORS = "\u2028\x85\u2029"  # what str.splitlines() ends a line at besides those JSON always escapes


def _run(tmp_path):
    agent = f"Plan{SEPARATORS}ner"
    specs = [{"trace_id": f"t{i}\u2028x", "source": "src", "system": "sys", "labels": None,
              "steps": [{"agent": agent if k == 1 else "B", "content": f"step {k}\u2029", "span_id": f"{k + 1:016x}"}
                        for k in range(3)],
              "ranked": [1, 0], "scores": [0.9, 0.1], "symptoms": [2], "nll": [1.0] * 3, "day_offset": 0,
              "confidence": 0.7, "category": f"kind{SEPARATORS}", "category_confidence": 0.6}
             for i in range(3)]
    return write_outdir(tmp_path / "o", specs), agent


@pytest.mark.parametrize("to", ["jsonl", "langfuse", "otel", "phoenix"])
def test_a_line_separator_in_a_name_never_splits_a_record(tmp_path, to):
    out, agent = _run(tmp_path)
    written = export_files(out, to, tmp_path / "x.jsonl", top_k=2)
    assert written
    for path, n in written.items():
        text = path.read_text(encoding="utf-8")
        assert not any(c in text for c in SEPARATORS), path
        lines = text.splitlines()
        assert len(lines) == (n if to != "otel" else 1), (path, len(lines), n)
        recs = [json.loads(line) for line in lines]
        assert agent in json.dumps(recs, ensure_ascii=False)  # the name read back whole
    if to == "jsonl":
        back = read_jsonl(tmp_path / "x.jsonl")
        assert sorted(back) == [f"t{i}\u2028x" for i in range(3)]
        assert {r["pred_agent"] for r in back.values()} == {agent}
    if to == "phoenix":
        assert set(written) <= set(phoenix_paths(tmp_path / "x.jsonl").values())


def test_logs_whose_ids_name_one_backend_trace_are_said(tmp_path, caplog):
    """A backend knows a trace by its hex id, and ids.py reads `ABC...`, `abc...` and `0xabc...` as the same one:
    two logs so named (ingest keeps both: their ids differ) put their verdicts on one backend trace and span, where
    the later annotation of a name replaces the earlier in Phoenix. The export says so, naming both ids."""
    import logging

    hexid = "abcdef0123456789abcdef0123456789"

    def spec(tid, agent):
        return {"trace_id": tid, "source": "src", "system": "sys", "labels": None, "confidence": 0.5,
                "steps": [{"agent": agent, "content": f"step {k}", "span_id": f"{k + 1:016x}"} for k in range(3)],
                "ranked": [1, 0], "scores": [0.9, 0.1], "symptoms": [2], "nll": [1.0] * 3, "day_offset": 0}

    out = write_outdir(tmp_path / "o", [spec(hexid, "Victim"), spec(hexid.upper(), "Mallory"), spec("other", "B")])
    for to in ("phoenix", "otel", "langfuse"):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            export_files(out, to, tmp_path / f"{to}.jsonl")
        said = " ".join(r.getMessage() for r in caplog.records)
        assert "1 backend trace id" in said and hexid in said and hexid.upper() in said, (to, said)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        export_files(out, "jsonl", tmp_path / "plain.jsonl")  # keyed by the log's own id: nothing shared
    assert "backend trace id" not in " ".join(r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("to", ["jsonl", "langfuse", "otel", "phoenix"])
def test_a_value_json_has_no_form_for_is_written_as_null(tmp_path, to):
    """A NaN or infinite confidence or candidate score in an OUTDIR was written as NaN / Infinity, which JSON has
    no form for: JavaScript's JSON.parse, jq, DuckDB and Langfuse's API refuse the line (ingest makes a log's own
    metadata standard JSON for the same reason). Every JSON-lines export writes null there."""
    nan, inf = float("nan"), float("inf")
    steps = [{"agent": "A", "content": "x", "span_id": f"{k + 1:016x}"} for k in range(3)]
    spec = {"trace_id": "t1", "source": "s", "system": "y", "labels": None, "steps": steps, "ranked": [1, 0, 2],
            "scores": [nan, inf, -inf], "symptoms": [2], "nll": [nan, 1.0, inf], "day_offset": 0, "confidence": nan}
    out = write_outdir(tmp_path / "o", [spec])

    def refuse(c):
        raise ValueError(f"{c} is not JSON")

    for path in export_files(out, to, tmp_path / "x.jsonl", top_k=3):
        for line in path.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line, parse_constant=refuse)  # standard JSON only
            assert rec
    if to == "jsonl":
        rec = read_jsonl(tmp_path / "x.jsonl")["t1"]
        assert rec["confidence"] is None and [c["score"] for c in rec["candidates"]] == [None, None, None]
        assert rec["pred_step"] == 1  # the rest of the record as it was

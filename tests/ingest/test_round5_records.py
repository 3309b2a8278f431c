"""Issue 46, the record-level findings outside the fuzzed formats: a refused `--map` trace costs itself (3); names
from a log are capped and cleaned before they are stored (11); canonical Parquet read in place is checked against
the schema before the run binds it (6); `run_status` words are folded to the three statuses (15); `--map` files
are refused in plain words (16)."""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from ingest_synth import SEED, rng, text
from masprism_batch.pipelines.plan import Shard, read_shard
from typer.testing import CliRunner

from masprism_batch import schema
from masprism_batch.cli import app
from masprism_batch.ingest import read_inputs
from masprism_batch.ingest.mapping import Mapping, compile_path, load_mapping


def _read(path, **kw):
    errors: list[dict] = []
    return list(read_inputs([str(path)], "auto", errors.append, **kw)), errors


@pytest.mark.parametrize("bad", ["long", "control", "list"])
def test_one_refused_mapped_trace_costs_only_itself(tmp_path, bad):
    """Finding 3: a trace id over 1,024 characters or holding a control character on trace 2 of 100 ended the
    document (1 ingested, 98 lost)."""
    r = rng(f"map-{bad}")
    docs = [{"id": f"t{i}", "turns": [{"who": "a", "say": f"step {i}: {text(r, 1, 30)}"}]} for i in range(100)]
    at = r.randrange(1, 100)
    docs[at]["id"] = {"long": "x" * 2000, "control": "a\x1b[2Jb", "list": ["t", "u"]}[bad]
    (tmp_path / "d.json").write_text(json.dumps({"traces": docs}), encoding="utf-8")
    m = Mapping(source="app", traces=compile_path("$.traces[*]", "t"), trace_id=compile_path("$.id", "i"),
                steps=compile_path("$.turns[*]", "s"), step={"agent": compile_path("$.who", "a"),
                                                            "content": compile_path("$.say", "c")})
    got, errors = _read(tmp_path / "d.json", mapping=m)
    kept = {t.trace_id for t in got}
    assert {f"t{i}" for i in range(100) if i != at} <= kept, (len(kept), errors, SEED)
    if bad == "list":  # a list id is read as its text (str of the value): kept, or refused alone
        assert len(kept) >= 99 and len(errors) <= 1
        return
    [e] = errors
    assert e["reason"] == "invalid_trace_id" and f"traces[{at}]" in e["message"], e


def _otlp(service: str, tid: str) -> dict:
    kv = [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
          {"key": "gen_ai.completion.0.content", "value": {"stringValue": "hello"}}]
    return {"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
                               "scopeSpans": [{"spans": [{"traceId": tid, "spanId": "s1", "name": "chat",
                                                          "attributes": kv}]}]}]}


def test_names_from_a_log_are_capped_and_cleaned_before_they_are_stored(tmp_path):
    """Finding 11: a 1 MiB OTLP service.name (or --map source) was copied into every trace's system."""
    huge = "\x1b]0;owned\x07" + "S" * 2**20
    (tmp_path / "o.jsonl").write_text("\n".join(json.dumps(_otlp(huge, f"t{i}")) for i in range(5)) + "\n")
    got, errors = _read(tmp_path / "o.jsonl")
    assert len(got) == 5 and {e["reason"] for e in errors} == {"step_truncated"}
    for t in got:
        assert len(t.system.encode()) <= 256 and "\x1b" not in t.system and "\x07" not in t.system, t.system[:40]
        assert t.system.startswith("\ufffd]0;owned\ufffdSSS")
    agents = json.dumps({"trace_id": "c1", "source": "src\x1b[31m" + "x" * 5000, "system": "sys\n\r2",
                         "steps": [{"agent": "pl\x9banner\u202e", "content": "hi"}]})
    (tmp_path / "c.jsonl").write_text(agents + "\n", encoding="utf-8")
    got, errs = _read(tmp_path / "c.jsonl")
    assert len(got) == 1, errs
    (t,) = got
    assert len(t.source.encode()) <= 256 and t.source.startswith("src\ufffd[31mxxx")
    assert t.system == "sys\ufffd\ufffd2" and t.steps[0].agent == "pl\ufffdanner\ufffd"
    m = Mapping(source="M" * 2**20, steps=compile_path("$.s[*]", "s"), step={"content": compile_path("$.c", "c")})
    (tmp_path / "m.json").write_text(json.dumps({"s": [{"c": "x"}]}))
    (t,), _ = _read(tmp_path / "m.json", mapping=m)
    assert len(t.source.encode()) <= 256 and len(t.system.encode()) <= 256


def test_run_status_words_are_folded_and_unknown_ones_warned_once(tmp_path, caplog):
    """Finding 15: "success", "SUCCEEDED", "ok" were silently unknown in JSON lines (and extra classes from Parquet)."""
    # "ok" is an execution status, no grade of the answer (issue 60): unknown, attributed, never warned about
    words = {"success": "succeeded", "SUCCEEDED": "succeeded", "ok": "unknown", " Passed ": "succeeded",
             "error": "failed", "FAILURE": "failed", "timed-out": "failed", "failed": "failed", "": "unknown",
             "pending-x": "unknown"}
    lines = [json.dumps({"trace_id": f"t{i}", "source": "s", "run_status": w, "steps": [{"agent": "a", "content": "x"}]})
             for i, w in enumerate(list(words) + ["pending-x"])]
    (tmp_path / "s.jsonl").write_text("\n".join(lines) + "\n")
    with caplog.at_level(logging.WARNING, logger="masprism_batch.ingest.status"):
        got, _ = _read(tmp_path / "s.jsonl")
    assert [t.run_status for t in got] == list(words.values()) + ["unknown"]
    assert sum("pending-x" in r.getMessage() for r in caplog.records) <= 1  # once, not per row


def _parquet_row(i: int, **over) -> dict:
    row = {"trace_id": f"p{i}", "source": "pq", "system": "sys", "question": None, "run_status": "failed",
           "labels": None, "metadata": "{}",
           "steps": [{"index": 0, "agent": "a", "content": "x", "role": None, "kind": "message", "span_id": None,
                      "parent_span_id": None, "start_time": datetime(2025, 1, 1, tzinfo=timezone.utc)}]}
    for k, v in over.items():
        if k.startswith("steps."):
            row["steps"][0][k[6:]] = v
        else:
            row[k] = v
    return row


@pytest.mark.parametrize("column,value,kept", [
    ("run_status", 3, True), ("run_status", "ERROR", True), ("system", 7, True), ("source", 9, True),
    ("steps.kind", 4, True), ("steps.index", "0", True), ("steps.start_time", "2025-01-01", False)])
def test_mistyped_canonical_parquet_is_cast_or_rejected_per_row(tmp_path, column, value, kept):
    """Finding 6: a mistyped column of canonical Parquet read in place reached the run's writer (ArrowTypeError, an
    internal error on every retry). Now each row is checked as ingest checks it: cast, or that row rejected."""
    rows = [_parquet_row(i, **{column: value}) for i in range(3)]
    path = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)  # the types inferred from the data: the mistyped column's
    traces, errors = read_shard(Shard("s", str(path), 0, 3, "t.parquet"))
    assert [t.trace_id for t in traces] == (["p0", "p1", "p2"] if kept else [])
    assert errors == [] if kept else [e["record_id"] for e in errors] == ["p0", "p1", "p2"], errors
    written = pa.Table.from_pylist([t.to_row() for t in traces], schema=schema.TRACES)  # what the run binds
    assert written.num_rows == len(traces)
    assert set(written.column("run_status").to_pylist()) <= {"failed", "succeeded", "unknown"}


@pytest.mark.parametrize("case", ["deep", "digits", "utf8"])
def test_map_files_are_refused_in_plain_words(tmp_path, case):
    """Finding 16: a 5,000-deep TOML was a RecursionError (internal error), a 5,000-digit index Python's
    int-digits message, a non-UTF-8 mapping named --config."""
    p = tmp_path / "m.toml"
    if case == "deep":
        p.write_text('source = "x"\nsteps = "$.s"\nq = ' + "[" * 5000 + "]" * 5000 + "\n")
    elif case == "digits":
        p.write_text('source = "x"\nsteps = "$.s[' + "9" * 5000 + ']"\n')
    else:
        p.write_bytes(b'source = "x\xff"\nsteps = "$.s"\n')
    with pytest.raises(ValueError) as got:
        load_mapping(str(p))
    msg = str(got.value)
    assert "--config" not in msg and "int" not in msg.lower().split("index")[0] and len(msg) < 400, msg
    (tmp_path / "in.json").write_text("{}")
    res = CliRunner().invoke(app, ["ingest", str(tmp_path / "in.json"), "-o", str(tmp_path / "out"), "--map", str(p)])
    assert res.exit_code == 1 and "internal" not in res.output and "--config" not in res.output, res.output
    assert res.output.count(str(p)) <= 1 and {"deep": "nested too deeply", "digits": "not a list position",
                                              "utf8": "not UTF-8"}[case] in res.output, res.output

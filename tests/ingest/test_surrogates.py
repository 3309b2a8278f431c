"""Lone surrogates (legal JSON escapes, not encodable as UTF-8) are repaired to U+FFFD as documented, wherever
they are: step text, question, agent names, metadata values and keys; the trace is kept with one
`invalid_utf8` warning, never rejected for it (issue 27 item 9)."""

from __future__ import annotations

import json

from masprism_batch.ingest import read_inputs
from masprism_batch.trace import Trace


def _line(**over):
    rec = {"trace_id": "t1", "source": "app", "question": "q", "steps": [
        {"agent": "a", "role": "assistant", "content": "ok"}], "metadata": {"k": "v"}}
    rec.update(over)
    return json.dumps(rec)  # ensure_ascii: a lone surrogate is written as the escape "\\ud800"


def _read(tmp_path, text):
    (tmp_path / "in.jsonl").write_text(text + "\n")
    errors: list[dict] = []
    return list(read_inputs([str(tmp_path / "in.jsonl")], "auto", errors.append)), errors


def test_surrogate_in_step_text_and_agent_becomes_replacement_character(tmp_path):
    steps = [{"agent": "pl\ud800anner", "role": "assistant", "content": "a\udfffb"}]
    (t,), errors = _read(tmp_path, _line(steps=steps, question="x\ud83d"))
    assert t.steps[0].content == "a\ufffdb" and t.steps[0].agent == "pl\ufffdanner" and t.question == "x\ufffd"
    assert "?" not in t.steps[0].content
    assert [e["reason"] for e in errors] == ["invalid_utf8"]


def test_surrogate_in_metadata_keeps_the_trace(tmp_path):
    (t,), errors = _read(tmp_path, _line(metadata={"note": "bad \ud800 value", "k\udc00": ["x\ud801"]}))
    assert t.metadata == {"note": "bad \ufffd value", "k\ufffd": ["x\ufffd"]}
    assert [e["reason"] for e in errors] == ["invalid_utf8"]
    row = t.to_row()  # the row encoder serialises it: nothing unencodable is left
    assert Trace.from_row(row).metadata["note"] == "bad \ufffd value"
    row["metadata"].encode("utf-8")


def test_valid_pairs_are_untouched(tmp_path):
    (t,), errors = _read(tmp_path, _line(metadata={"emoji": "\U0001f44b"}, steps=[
        {"agent": "a", "content": "hi \U0001f44b"}]))
    assert errors == [] and t.metadata["emoji"] == "\U0001f44b" and t.steps[0].content == "hi \U0001f44b"

"""Issue 61 finding 14 for `fit --labels`: a labels file is read only when it is a regular file of a bounded size
(a FIFO swapped in after the command's check blocked, /dev/zero read to MemoryError), and a file or row of the
wrong shape says what was expected (a JSON array said "no trace_id column"; a row without trace_id "unknown trace
None")."""

from __future__ import annotations

import os
import time

import pytest

from masprism_batch.cli.fit_messages import skipped_summary
from masprism_batch.fit import labels


@pytest.mark.parametrize("kind", ["fifo", "zero", "dir"])
def test_a_labels_file_that_is_no_regular_file_is_refused_at_once(tmp_path, kind):
    path = {"fifo": tmp_path / "l.csv", "zero": "/dev/zero", "dir": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    t = time.monotonic()
    with pytest.raises(labels.LabelsFileError, match="not a regular file"):
        labels.from_file(path, {})
    assert time.monotonic() - t < 5


def test_a_labels_file_past_the_cap_is_refused_naming_it(tmp_path, monkeypatch):
    monkeypatch.setattr(labels, "MAX_LABELS_BYTES", 100)
    p = tmp_path / "l.csv"
    p.write_text("trace_id,step\n" + "t,1\n" * 100)
    with pytest.raises(labels.LabelsFileError, match="414 bytes; a labels file is at most 100"):
        labels.from_file(p, {})


@pytest.mark.parametrize("text,what", [("[1, 2, 3]\n", "a JSON array"), ("[\n {\"trace_id\": \"t\"}\n]\n", "a JSON array"),
                                       ('"t1"\n', "a JSON value"), ("42\n", "a JSON value")])
def test_json_that_is_not_an_object_per_line_says_what_a_labels_file_holds(tmp_path, text, what):
    p = tmp_path / "l.json"
    p.write_text(text)
    with pytest.raises(labels.LabelsFileError) as exc:
        labels.from_file(p, {})
    assert f"{what} where a labels file has one JSON object per line (trace_id, step or span_id, agent)" in str(exc.value)


def test_a_row_without_trace_id_is_said_as_such(tmp_path):
    p = tmp_path / "l.jsonl"
    p.write_text('{"step": 2}\n{"trace_id": null, "step": 1}\n')
    gold, problems = labels.from_file(p, {})
    assert not gold and problems == [f"l.jsonl:{n}: no trace_id (a row names its trace by `trace_id`): row skipped"
                                     for n in (1, 2)]
    assert skipped_summary(problems).startswith("2 label row(s) skipped: 2 no trace_id;")

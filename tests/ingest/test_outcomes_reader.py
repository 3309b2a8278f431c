"""Issue 61 finding 14 for `--outcomes` (an operator file, like the taxonomy and the labels): read only when it is
a regular file of a bounded size (a FIFO never blocks, /dev/zero is refused), and a document or row of the wrong
shape says what was expected (`{"data": 5}` was a TypeError; `[1]` silently no outcome at all)."""

from __future__ import annotations

import os
import time

import pytest

from masprism_batch.ingest.outcomes import load_outcomes


@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_an_outcomes_file_that_is_no_regular_file_is_refused_at_once(tmp_path, kind):
    path = tmp_path / "o.jsonl" if kind == "fifo" else "/dev/zero"
    if kind == "fifo":
        os.mkfifo(path)
    t = time.monotonic()
    with pytest.raises(ValueError, match=f"--outcomes {path}: cannot read it .*not a regular file"):
        load_outcomes(path)
    assert time.monotonic() - t < 5


@pytest.mark.parametrize("name,text,msg", [
    ("o.json", '{"data": 5}', "`data` is a JSON int; expected a list of rows"),
    ("o.json", "[1, 2]", "row 1 is a JSON int; expected an object per row"),
    ("o.jsonl", '{"trace_id": "t", "label": "pass"}\n"x"\n', "row 2 is a JSON str; expected an object per row"),
])
def test_an_outcomes_file_of_the_wrong_shape_says_what_was_expected(tmp_path, name, text, msg):
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(ValueError, match=msg):
        load_outcomes(p)


def test_a_well_formed_file_still_reads(tmp_path):
    p = tmp_path / "o.json"
    p.write_text('{"data": [{"traceId": "a", "value": 1.0}, {"traceId": "b", "value": 0.2}]}')
    assert load_outcomes(p) == {"a": True, "b": False}

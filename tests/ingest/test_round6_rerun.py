"""Issue 61 finding 15 (second bullet): on an incremental rerun, what the folder walk refuses gets the rows a fresh
ingest gives. Before: a log replaced by a link leaving the folder was reported "gone", and a new FIFO or outside
link got no row at all (a fresh ingest of the same folder gives 3)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from masprism_batch.pipelines.staging import stage_raw

from masprism_batch import schema
from masprism_batch.ingest import read_inputs

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs and symbolic links: POSIX")


def _log(path: Path, tid: str) -> None:
    path.write_text(json.dumps({"trace_id": tid, "source": "app", "steps": [{"agent": "a", "content": tid}]}) + "\n",
                    encoding="utf-8")


def _rows(staging: Path) -> list[tuple[str, str]]:
    out = []
    for f in sorted((staging / "errors").glob("part-*.parquet")):
        out += [(Path(r["input_path"]).name, r["reason"]) for r in pq.read_table(f, schema=schema.ERRORS).to_pylist()]
    return sorted(out)


def test_a_rerun_gives_the_walk_rows_a_fresh_ingest_gives(tmp_path):
    folder, outside, staging = tmp_path / "logs", tmp_path / "elsewhere", tmp_path / "OUT" / "_staging"
    folder.mkdir()
    outside.mkdir()
    _log(folder / "a.jsonl", "a")
    _log(folder / "b.jsonl", "b")
    staging.parent.mkdir()
    stage_raw([str(folder)], staging, "auto", 100)
    assert _rows(staging) == []

    # the night's changes: b replaced by a link out of the folder, a FIFO and an outside link appear
    _log(outside / "b.jsonl", "b2")
    (folder / "b.jsonl").unlink()
    (folder / "b.jsonl").symlink_to(outside / "b.jsonl")
    os.mkfifo(folder / "c.jsonl")
    _log(outside / "d.jsonl", "d")
    (folder / "d.jsonl").symlink_to(outside / "d.jsonl")
    fresh: list[dict] = []
    list(read_inputs([str(folder)], "auto", fresh.append))
    expected = sorted((Path(r["input_path"]).name, r["reason"]) for r in fresh)
    assert expected == [("b.jsonl", "symlink_outside_input"), ("c.jsonl", "not_a_regular_file"),
                        ("d.jsonl", "symlink_outside_input")]

    inc = stage_raw([str(folder)], staging, "auto", 100)
    assert inc.removed_files == [], inc  # b is not gone: it is refused, and its row says why
    assert _rows(staging) == expected
    marker = json.loads((staging / "_COMPLETE.json").read_text(encoding="utf-8"))
    assert marker["errors"] == 3

    inc = stage_raw([str(folder)], staging, "auto", 100)  # nothing changed since: no row twice
    assert _rows(staging) == expected and inc.new_traces == 0

"""outdir/history.py: the current attribution rows copied aside, with when and why they were superseded."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from masprism_batch import schema
from masprism_batch.outdir.history import archive_attributions, history_files
from masprism_batch.outdir.parts import write_table_atomic


def _attributions(out, ids):
    rows = [{"trace_id": t, "pred_step": i, "pred_agent": "A", "confidence": 0.5} for i, t in enumerate(ids)]
    sch = schema.TABLES["attributions"]
    table = pa.Table.from_pylist([{c: r.get(c) for c in sch.names} for r in rows], schema=sch)
    write_table_atomic(table, out / "attributions" / "part-0.parquet")


def test_archive_copies_the_named_rows_with_time_and_reason(tmp_path):
    _attributions(tmp_path, ["a", "b", "c"])
    assert archive_attributions(tmp_path, ["b", "c", "zz"], "rescore") == 2
    (f,) = history_files(tmp_path)
    assert f.name.startswith("attributions-") and f.name.endswith("Z-rescore.parquet")
    t = pq.read_table(f)
    assert sorted(t["trace_id"].to_pylist()) == ["b", "c"]
    assert set(t["superseded_by"].to_pylist()) == {"rescore"}
    assert t["superseded_at"].null_count == 0
    assert set(schema.TABLES["attributions"].names) <= set(t.column_names)
    # the live rows are the caller's: untouched
    assert pq.read_table(tmp_path / "attributions")["trace_id"].to_pylist() == ["a", "b", "c"]


def test_all_rows_when_none_and_nothing_written_for_no_match(tmp_path):
    _attributions(tmp_path, ["a", "b"])
    assert archive_attributions(tmp_path, [], "refresh") == 0
    assert history_files(tmp_path) == []
    assert archive_attributions(tmp_path, None, "refresh") == 2
    assert len(history_files(tmp_path)) == 1


def test_reason_from_a_fixed_set(tmp_path):
    _attributions(tmp_path, ["a"])
    with pytest.raises(ValueError, match="unknown history reason"):
        archive_attributions(tmp_path, None, "../x")

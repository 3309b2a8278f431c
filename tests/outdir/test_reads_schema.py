"""An OUTDIR resumed across a release that added columns (issue 59's step sets) keeps them readable: pyarrow takes a
dataset's schema from its first file, so an older shard sorting first hid every newer column (outdir/reads.py)."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from masprism_batch.outdir.reads import open_dataset


@pytest.mark.parametrize("old_first", [True, False])
def test_newer_columns_survive_an_older_first_file(tmp_path, np_rng, old_first):
    d = tmp_path / "attributions"
    d.mkdir()
    n_old, n_new = int(np_rng.integers(1, 20)), int(np_rng.integers(1, 20))
    old = pa.table({"trace_id": [f"old-{i}" for i in range(n_old)],
                    "pred_step": pa.array(np_rng.integers(0, 9, n_old), pa.int32())})
    sizes = [int(x) for x in np_rng.integers(1, 9, n_new)]
    new = pa.table({"trace_id": [f"new-{i}" for i in range(n_new)],
                    "pred_step": pa.array(np_rng.integers(0, 9, n_new), pa.int32()),
                    "set_size": pa.array(sizes, pa.int32()), "extra_note": ["x"] * n_new})
    pq.write_table(old, d / ("a.parquet" if old_first else "b.parquet"))
    pq.write_table(new, d / ("b.parquet" if old_first else "a.parquet"))
    t = open_dataset(d).to_table()
    assert t.num_rows == n_old + n_new
    got = dict(zip(t["trace_id"].to_pylist(), t["set_size"].to_pylist(), strict=True))
    assert [got[f"new-{i}"] for i in range(n_new)] == sizes
    assert all(got[f"old-{i}"] is None for i in range(n_old))
    if not old_first:  # a column the table does not know is kept where the first file has it
        assert "extra_note" in t.column_names


def test_a_table_it_does_not_know_reads_as_before(tmp_path):
    d = tmp_path / "other"
    d.mkdir()
    pq.write_table(pa.table({"a": [1, 2]}), d / "a.parquet")
    assert open_dataset(d).to_table().column_names == ["a"]

"""The issue's acceptance run: `ingest who_and_when trail -o OUT`, read back with DuckDB."""

from __future__ import annotations

import duckdb
from typer.testing import CliRunner

from masprism_batch.cli import EXIT_OK, app


def test_ingest_shared_data_duckdb(shared_data, tmp_path):
    out = tmp_path / "OUT"
    res = CliRunner().invoke(app, ["ingest", str(shared_data / "who_and_when"), str(shared_data / "trail"),
                                   "-o", str(out), "--no-progress"])
    # the malformed TRAIL annotation and a duplicate span are warnings (traces kept, rows in errors/), and so is
    # each file of the folders that is not read (the two LICENSE files: `skipped_file`, issue 47): exit 0
    assert res.exit_code == EXIT_OK, res.output
    assert "4 error rows" in res.output.replace("\n", " ")
    rows = duckdb.sql(f"""
        select split_part(source, '/', 1) as ds, count(*) as n,
               count(*) filter (where labels is not null) as labelled,
               count(*) filter (where labels.mistake_step is not null) as with_step,
               count(*) filter (where len(labels.error_locations) > 0) as with_locations
        from read_parquet('{out}/traces/*.parquet') group by all order by ds""").fetchall()
    # two TRAIL annotations list no errors at all (labelled, but with no location)
    assert rows == [("trail", 87, 86, 0, 84), ("who-and-when", 114, 114, 114, 0)]
    errs = duckdb.sql(f"select reason, record_id from read_parquet('{out}/errors/*.parquet') order by reason").fetchall()
    assert errs == [("duplicate_span", "72822db6e120878d916b515c2501246b"),
                    ("invalid_annotation", "a96c6811716c0473b86a23321db79c34"),
                    ("skipped_file", None), ("skipped_file", None)]
    skipped = duckdb.sql(f"""select input_path, message from read_parquet('{out}/errors/*.parquet')
                             where reason = 'skipped_file' order by 1""").fetchall()
    assert [p.rsplit("/", 2)[-2:] for p, _ in skipped] == [["trail", "LICENSE"], ["who_and_when", "LICENSE"]]
    assert all("not a data file" in m for _, m in skipped)
    # one step per Who&When history message; mistake_step indexes a real step
    bad = duckdb.sql(f"""select count(*) from read_parquet('{out}/traces/*.parquet')
                         where labels.mistake_step >= len(steps)""").fetchall()[0][0]
    assert bad == 0

"""A file among a run's Parquet parts that is not readable Parquet (a stray file, a copy cut short) is said as
such, naming it, by every command that reads the OUTDIR; it was pyarrow's 'Parquet magic bytes not found' shown
as an internal error (outdir/reads.damaged)."""

import random

import pytest
from analytics_synth import random_specs, write_outdir
from typer.testing import CliRunner

from masprism_batch.cli import EXIT_FATAL, app
from masprism_batch.outdir.manifest import DamagedOutput
from masprism_batch.outdir.reads import read_dataset

runner = CliRunner()


@pytest.mark.parametrize("name", ["aaa-first.parquet", "zzz-last.parquet"])  # the footer read first, or later
def test_a_stray_part_is_named_by_every_reader(tmp_path, name, np_rng):
    run = write_outdir(tmp_path / "run", random_specs(random.Random(int(np_rng.integers(1 << 30))), 6))
    (run / "_manifest").mkdir(exist_ok=True)  # read as a run's OUTDIR (outdir/shards.py), not a plain dataset
    good = sorted((run / "attributions").glob("*.parquet"))[0].read_bytes()
    (run / "attributions" / name).write_bytes(good[: len(good) // 2])  # a part cut short
    with pytest.raises(DamagedOutput, match=name):
        read_dataset(run / "attributions")
    for cmd in (["show", str(run)], ["stats", str(run)], ["report", str(run), "-o", str(tmp_path / "r.html")],
                ["pick", str(run), "-o", str(tmp_path / "p.csv")]):
        res = runner.invoke(app, cmd)
        said = " ".join(res.output.split())
        assert res.exit_code == EXIT_FATAL and name in said and "not readable Parquet" in said, (cmd, said)
        assert "internal error" not in said, (cmd, said)

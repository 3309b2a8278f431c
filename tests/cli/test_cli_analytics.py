import pandas as pd
from analytics_synth import random_specs, write_outdir
from typer.testing import CliRunner

from masprism_batch.cli import app


def test_commands_on_a_synthetic_run(tmp_path, rng):
    specs = random_specs(rng, rng.randint(5, 20), spans=True)
    out = write_outdir(tmp_path / "OUT", specs)
    r = CliRunner().invoke(app, ["stats", str(out)])
    assert r.exit_code == 0, r.output
    assert (out / "stats" / "blamed_agents.parquet").is_file()
    r = CliRunner().invoke(app, ["report", str(out), "-o", str(tmp_path / "r.html"), "--max-traces", "3"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "r.html").read_text().count('"id":') == 3
    r = CliRunner().invoke(app, ["export", str(out), "--to", "phoenix", "-o", str(tmp_path / "a.parquet")])
    assert r.exit_code == 0, r.output
    assert len(pd.read_parquet(tmp_path / "a.spans.parquet")) == sum(1 for sp in specs if sp["ranked"])


def test_bad_input_exits_1_with_a_message(tmp_path):
    (tmp_path / "empty").mkdir()
    for args in (["stats", str(tmp_path / "empty")], ["report", str(tmp_path / "empty"), "-o", str(tmp_path / "x")],
                 ["export", str(tmp_path / "empty"), "--to", "otel", "-o", str(tmp_path / "y")]):
        r = CliRunner().invoke(app, args)
        assert r.exit_code == 1 and "attributions holds no Parquet parts" in r.output.replace("\n", ""), args
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()

"""Issue 59: every attribution of a run carries its step set at the run's `--coverage`, led by the blamed step;
`--coverage` outside (0, 1) is refused before any work; a coverage other than the default is a config change."""

from pathlib import Path

import pyarrow.dataset as ds
import pytest
from typer.testing import CliRunner

from masprism_batch.cli import app
from masprism_batch.config import PipelineConfig

runner = CliRunner()
LOGS = Path(__file__).resolve().parents[1] / "data" / "formats"
SET_COLUMNS = ("read_steps", "set_size", "set_share", "set_coverage", "set_by", "localised")


def _attribute(out, *extra):
    res = runner.invoke(app, ["attribute", str(LOGS), "-o", str(out), "--model", "tiny-random", "--no-progress",
                              "--all-runs", *extra])
    assert res.exit_code in (0, 3), res.output
    return ds.dataset(str(out / "attributions")).to_table().to_pylist()


def test_every_attribution_carries_its_set_led_by_the_blamed_step(tmp_path):
    rows = _attribute(tmp_path / "A", "--coverage", "0.9")
    assert rows
    for a in rows:
        assert all(k in a for k in SET_COLUMNS), sorted(a)
        assert a["read_steps"][0] == a["pred_step"], a["trace_id"]  # one verdict: the set starts at it
        assert a["set_size"] == len(a["read_steps"]) == len(set(a["read_steps"]))
        assert 1 <= a["set_size"] <= a["n_steps"] and all(0 <= k < a["n_steps"] for k in a["read_steps"])
        assert a["set_share"] == pytest.approx(a["set_size"] / a["n_steps"])
        assert a["set_coverage"] == 0.9 and a["set_by"] == "dev:zero-training"
        assert a["localised"] == (a["set_share"] <= 0.6)
    low = {a["trace_id"]: a for a in _attribute(tmp_path / "B", "--coverage", "0.5")}
    for a in rows:  # a lower coverage never asks for more steps; the verdict itself does not move
        b = low[a["trace_id"]]
        assert (b["pred_step"], b["pred_agent"]) == (a["pred_step"], a["pred_agent"])
        assert b["set_size"] <= a["set_size"] and a["read_steps"][: b["set_size"]] == b["read_steps"]


@pytest.mark.parametrize("bad", ["0", "1", "1.5", "-0.2", "nan"])
def test_coverage_outside_zero_one_is_refused_before_any_work(tmp_path, bad):
    res = runner.invoke(app, ["attribute", str(LOGS), "-o", str(tmp_path / "out"), "--model", "tiny-random",
                              "--coverage", bad])
    assert res.exit_code == 2 and "coverage" in res.output.lower(), res.output
    assert not (tmp_path / "out").exists()


def test_coverage_is_in_the_config_hash_only_off_its_default():
    base = PipelineConfig()
    assert base.method.coverage == 0.8
    other = PipelineConfig(method={"coverage": 0.9})
    assert other.config_hash() != base.config_hash()
    assert PipelineConfig(method={"coverage": 0.8}).config_hash() == base.config_hash()
    with pytest.raises(ValueError):
        PipelineConfig(method={"coverage": 1.0})


def test_resuming_an_outdir_with_another_coverage_is_refused_and_keeps_its_results(tmp_path):
    out = tmp_path / "A"
    before = _attribute(out)
    res = runner.invoke(app, ["attribute", str(LOGS), "-o", str(out), "--model", "tiny-random", "--no-progress",
                              "--all-runs", "--coverage", "0.9"])
    assert res.exit_code not in (0, 3) and "coverage" in res.output, res.output  # never two coverages in one OUTDIR
    after = ds.dataset(str(out / "attributions")).to_table().to_pylist()
    assert sorted(map(str, after)) == sorted(map(str, before))

"""`masprism-batch fit-heads`: label-free head weights from a folder of logs, usable by the stage."""

from __future__ import annotations

import json

import numpy as np
from typer.testing import CliRunner

from masprism_batch.cli import EXIT_FATAL, EXIT_OK, app
from masprism_batch.cli.demo import _sample_dir
from masprism_batch.method.heads import HeadWeights

runner = CliRunner()


def _fit(tmp_path, traces: int):
    """fit-heads of the demo's logs with the tiny model: (the config file, OUT, the CLI's result)."""
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"model": {"name": "tiny-random"},
                               "render": {"max_context": 768, "window_step_cap": 48}}))
    out = tmp_path / "heads.json"
    res = runner.invoke(app, ["fit-heads", str(_sample_dir()), "-o", str(out), "--config", str(cfg), "--max-traces",
                              str(traces)])
    return cfg, out, res


def test_fit_heads_writes_weights_the_pipeline_loads(tmp_path):
    cfg, out, res = _fit(tmp_path, 4)
    assert res.exit_code == EXIT_OK, res.output
    hw = HeadWeights.load(out)
    assert hw.model_id == "tiny-random" and hw.n_traces >= 1 and hw.n_pairs >= hw.weights.size
    assert np.isfinite(hw.weights).all() and abs(np.abs(hw.weights).sum() - 1) < 1e-6
    # the stage uses them: the learned-attention feature is filled
    from masprism_batch.config import load_config
    from masprism_batch.ingest import read_inputs
    from masprism_batch.model import load_model
    from masprism_batch.stage.attribute import attribute_traces

    # features "all": the faithful verdict reads no learned-head inflow, so by default it is not computed (issue 24)
    c = load_config(str(cfg), method__head_weights=str(out), method__name="masprism", method__features="all")
    model = load_model(c.model, c.signals)
    t = next(iter(read_inputs([str(_sample_dir())])))
    rows = attribute_traces([t], model, c).step_scores
    assert any(r["attn_in_learned"] is not None for r in rows)
    lean = attribute_traces([t], model, c.model_copy(update={"method": c.method.model_copy(update={"features": "verdict"})}))
    assert all(r["attn_in_learned"] is None for r in lean.step_scores)


def test_fit_heads_missing_input_and_bad_output(tmp_path):
    res = runner.invoke(app, ["fit-heads", str(tmp_path / "nope"), "-o", str(tmp_path / "h.json")])
    assert res.exit_code == EXIT_FATAL and "not found" in res.output
    res = runner.invoke(app, ["fit-heads", str(_sample_dir()), "-o", str(tmp_path)])  # a folder, not a file
    assert res.exit_code == EXIT_FATAL


def test_a_write_cut_short_leaves_the_old_weights_whole(tmp_path, monkeypatch):
    """OUT is replaced only once the new weights are written whole: a write that fails partway (here: text the
    file's UTF-8 cannot hold, as a full disk or a kill would) leaves the weights a run may be reading intact."""
    _cfg, out, res = _fit(tmp_path, 2)
    assert res.exit_code == EXIT_OK, res.output
    before = out.read_bytes()
    monkeypatch.setattr(HeadWeights, "to_json", lambda self: '{"cut": "' + "x" * 100_000 + '\ud800"}')
    assert _fit(tmp_path, 2)[2].exit_code != EXIT_OK
    assert out.read_bytes() == before and HeadWeights.load(out).weights.size
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-")] == []

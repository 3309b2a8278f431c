"""Issue 27 item 5: a configuration value that cannot work is refused, naming the field, before OUTDIR is touched
(before this, `token_budget` 0 failed only after staging and the OUTDIR then refused every other configuration;
`max_context` 16 rejected every trace as too long; NaN weights and negative counts ran with exit 0)."""

from __future__ import annotations

import json

import pytest
from pipeline_fakes import make_corpus
from typer.testing import CliRunner

from masprism_batch.cli import app

BAD = [
    ({"batch": {"token_budget": 0}}, "batch.token_budget"),
    ({"batch": {"token_budget": -5}}, "batch.token_budget"),
    ({"render": {"max_context": -1}}, "render.max_context"),
    ({"render": {"max_context": 16}}, "render.max_context"),
    ({"method": {"vote_weight": float("nan")}}, "method.vote_weight"),
    ({"method": {"symptom_ratio": -0.2}}, "method.symptom_ratio"),
    ({"method": {"symptom_ratio_spans": float("inf")}}, "method.symptom_ratio_spans"),
    ({"method": {"top_k_candidates": -1}}, "method.top_k_candidates"),
    ({"method": {"counterfactual_k": -3}}, "method.counterfactual_k"),
    ({"render": {"window_step_cap": -1}}, "render.window_step_cap"),
    ({"render": {"window_digest_share": 5.0}}, "render.window_digest_share"),
    ({"render": {"pass2_key_share": 1.5}}, "render.pass2_key_share"),
    ({"signals": {"layer_fraction": 0}}, "signals.layer_fraction"),
    ({"model": {"threads": 0}}, "model.threads"),
    ({"engine": {"traces_per_shard": 0}}, "engine.traces_per_shard"),
    ({"render": {"max_context": "many"}}, "render.max_context"),
    ({"render": 5}, "render"),
    ([{"batch": {"token_budget": 100}}], "not a list"),
]


@pytest.mark.parametrize(("config", "field"), BAD, ids=[f for _, f in BAD])
@pytest.mark.parametrize("command", ["attribute", "run"])
def test_bad_config_value_is_refused_before_outdir_is_touched(tmp_path, config, field, command):
    make_corpus(tmp_path / "in", 2, 1)
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps(config))  # NaN/Infinity: Python's JSON spelling, which json.loads reads back
    out = tmp_path / "out"
    res = CliRunner().invoke(app, [command, str(tmp_path / "in"), "-o", str(out), "--config", str(cfg),
                                   "--model", "tiny-random", "--no-progress"])
    assert res.exit_code == 1, res.output
    assert "bad configuration" in res.output and field in res.output, res.output
    assert "internal error" not in res.output and "cannot load model" not in res.output
    assert not out.exists(), "OUTDIR was touched by a run whose configuration cannot work"

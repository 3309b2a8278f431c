"""A JSON/TOML boolean where the config expects a number is refused, naming the field (pydantic's lax mode read
`token_budget = true` as 1); numbers still load, an int where a float is expected included, and the boolean
fields still take booleans."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from masprism_batch.cli import app
from masprism_batch.config import PipelineConfig, load_config
from masprism_batch.config_checks import machine_cpus

BOOLEANS = [("batch", "token_budget", "true"), ("method", "symptom_ratio", "false"), ("model", "threads", "true"),
            ("render", "window_step_cap", "true"), ("engine", "cpu_stage_cpus", "true"),
            ("method", "top_k_candidates", "true"), ("ingest", "max_steps", "true")]


@pytest.mark.parametrize(("section", "key", "value"), BOOLEANS, ids=[f"{s}.{k}" for s, k, _ in BOOLEANS])
@pytest.mark.parametrize("fmt", ["toml", "json"])
def test_boolean_for_a_number_is_refused_naming_the_field(tmp_path, section, key, value, fmt):
    path = tmp_path / f"cfg.{fmt}"
    path.write_text(f"[{section}]\n{key} = {value}\n" if fmt == "toml" else f'{{"{section}": {{"{key}": {value}}}}}')
    with pytest.raises(ValueError) as err:
        load_config(str(path))
    assert f"{section}.{key}" in str(err.value) and f"boolean {value}" in str(err.value)


def test_numbers_still_load_and_booleans_stay_booleans(tmp_path):
    path = tmp_path / "cfg.toml"
    threads = machine_cpus()  # model.threads is clamped to the CPUs of the machine (issue 37)
    path.write_text("[batch]\ntoken_budget = 4096\n[method]\nsymptom_ratio = 1\nvote_weight = 0\nrun_pass2 = false\n"
                    "agent_aggregation = true\ncounterfactual_k = 0\n[render]\nwindow_digest_share = 0.5\n"
                    f"window_step_cap = 64\n[engine]\ncpu_stage_cpus = 2\n[model]\nthreads = {threads}\n")
    cfg = load_config(str(path))
    assert cfg.batch.token_budget == 4096 and cfg.model.threads == threads and cfg.render.window_step_cap == 64
    assert cfg.method.symptom_ratio == 1.0 and isinstance(cfg.method.symptom_ratio, float)
    assert cfg.method.vote_weight == 0.0 and cfg.engine.cpu_stage_cpus == 2.0
    assert cfg.method.run_pass2 is False and cfg.method.agent_aggregation is True
    assert cfg.render.window_digest_share == 0.5 and cfg.method.counterfactual_k == 0
    assert load_config(None, batch__token_budget=4096).batch.token_budget == 4096  # CLI overrides: ints as before


def test_cli_refuses_token_budget_true_before_outdir_is_touched(tmp_path):
    (tmp_path / "in.jsonl").write_text(json.dumps({"trace_id": "a", "steps": [{"agent": "x", "content": "y"}]}) + "\n")
    (tmp_path / "cfg.toml").write_text("[batch]\ntoken_budget = true\n")
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["attribute", str(tmp_path / "in.jsonl"), "-o", str(out), "--config",
                                   str(tmp_path / "cfg.toml"), "--model", "tiny-random", "--no-progress"])
    assert res.exit_code == 1, res.output
    assert "bad configuration" in res.output and "batch.token_budget" in res.output and "boolean" in res.output
    assert not out.exists()
    # the validator leaves the default config's hash alone (pinned where `auto` means fp32 on CPU: test_config_hash)
    assert PipelineConfig(model={"dtype": "float32", "device": "cpu"}).config_hash() == "ed28f9cf0ec67f51"

"""Issue 27 item 5: a configuration value that cannot work is refused, naming the field, before OUTDIR is touched
(before this, `token_budget` 0 failed only after staging and the OUTDIR then refused every other configuration;
`max_context` 16 rejected every trace as too long; NaN weights and negative counts ran with exit 0)."""

from __future__ import annotations

import json
import logging
import os
import random
from pathlib import Path

import pytest
from pipeline_fakes import make_corpus
from typer.testing import CliRunner

from masprism_batch.cli import app
from masprism_batch.config import load_config
from masprism_batch.config_checks import machine_cpus

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
    # issue 37 item 5: templates parsed, texts bounded, at load (before: per trace, every trace rejected)
    ({"render": {"header_template": "[Step {index:>100000000}] {agent}:"}}, "render.header_template"),
    ({"render": {"header_template": "{agent.__class__}"}}, "render.header_template"),
    ({"render": {"header_template": "[Step {index] {agent}:"}}, "render.header_template"),
    ({"render": {"header_template": "{step} {agent}"}}, "render.header_template"),
    ({"render": {"question_template": "Task: {question!r:>99999}"}}, "render.question_template"),
    ({"render": {"pass1_preamble": "Log. " * 20_000}}, "render.pass1_preamble"),
    ({"render": {"anomaly_note": "x" * 10_000}}, "render.anomaly_note"),
    ({"render": {"truncation_marker": "." * 1000}}, "render.truncation_marker"),
    # under the length caps, but more tokens of this model than the context leaves for a log: checked at model load
    ({"render": {"max_context": 2048, "pass1_preamble": "Log. " * 800}}, "render.pass1_preamble"),
    ({"render": {"max_context": 1024, "anomaly_note": "Look! " * 200}}, "render.anomaly_note"),
    # item 6: one trace's memory grows with steps squared (the step-attention matrix): bounded by the machine
    ({"ingest": {"max_steps": 10_000_000}}, "ingest.max_steps"),
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


def _head_weights_files(tmp: Path) -> dict[str, str]:
    """Paths that are not what `method.head_weights` claims (each refused at load, issue 37 item 5)."""
    r = random.Random()
    (tmp / "hw").mkdir()
    rows = [[r.random() for _ in range(4)] for _ in range(3)]
    nan = tmp / "hw" / "nan.json"
    nan.write_text(json.dumps({"model_id": "m", "weights": [*rows, [float("nan")] * 4]}))
    ragged = tmp / "hw" / "ragged.json"
    ragged.write_text(json.dumps({"model_id": "m", "weights": [rows[0], rows[1][:2]]}))
    fifo = tmp / "hw" / "fifo.json"
    os.mkfifo(fifo)
    return {"missing": str(tmp / "hw" / "nope.json"), "folder": str(tmp / "hw"), "fifo": str(fifo),
            "nan": str(nan), "ragged": str(ragged), "not_json": __file__}


@pytest.mark.parametrize("case", ["missing", "folder", "fifo", "nan", "ragged", "not_json"])
def test_head_weights_path_checked_before_outdir(tmp_path, case):
    make_corpus(tmp_path / "in", 2, 1)
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"method": {"head_weights": _head_weights_files(tmp_path)[case]}}))
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["attribute", str(tmp_path / "in"), "-o", str(out), "--config", str(cfg),
                                   "--model", "tiny-random", "--no-progress"])
    assert res.exit_code == 1 and "bad configuration" in res.output and "method.head_weights" in res.output, res.output
    assert not out.exists()


def test_good_head_weights_and_templates_load(tmp_path, rng):
    r = rng
    hw = tmp_path / "hw.json"
    hw.write_text(json.dumps({"model_id": "m", "weights": [[r.uniform(-1, 1) for _ in range(3)] for _ in range(2)]}))
    cfg = load_config(None, method__head_weights=str(hw), render__header_template="<{agent}> #{index} {{x}}",
                      render__question_template="Q {{literal}}: {question}")
    assert cfg.method.head_weights == str(hw)


def test_threads_clamped_to_the_machine(caplog):
    cpus = machine_cpus()
    with caplog.at_level(logging.WARNING, logger="masprism_batch.config_checks"):
        cfg = load_config(None, model__threads=cpus * 1000 + random.randrange(1000))
    assert cfg.model.threads == cpus
    assert "model.threads" in caplog.text and f"{cpus} CPU" in caplog.text
    assert load_config(None, model__threads=1).model.threads == 1
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="masprism_batch.config_checks"):
        cfg = load_config(None, engine__pass2_render_threads=cpus + random.randint(1, 10**6))
    assert cfg.engine.pass2_render_threads == cpus and "engine.pass2_render_threads" in caplog.text


@pytest.mark.parametrize("gpus", [0, 2])
def test_workers_capped_to_the_machine(monkeypatch, caplog, gpus):
    """Issue 37 item 6: `--workers 50` on 2 CPUs started 20 model actors (6.1 GB); now at most one per CPU (one
    per GPU on GPUs), with a warning."""
    import ray
    from masprism_batch.pipelines.ray_engine import actor_resources

    from masprism_batch.config import PipelineConfig

    cpus = random.randint(2, 6)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": float(cpus), **({"GPU": float(gpus)} if gpus else {})})
    cfg = PipelineConfig()
    room = gpus or cpus
    with caplog.at_level(logging.WARNING):
        n, resources, _ = actor_resources(room * 10 + random.randint(1, 9), cfg)
    assert n == room and "--workers" in caplog.text
    assert actor_resources(1, cfg)[0] == 1
    if not gpus:
        assert n * resources["num_cpus"] <= cpus


def test_max_steps_bounded_by_the_machines_memory(monkeypatch):
    from masprism_batch import config_checks

    gb = random.randint(2, 64)
    monkeypatch.setattr(config_checks, "machine_memory", lambda: gb * 10**9)
    # linear past the dense budget (issue 37): the most steps whose trace_memory fits
    fits = (gb * 10**9 - config_checks.trace_memory(2048)) // config_checks.BYTES_PER_STEP + 2048
    assert config_checks.trace_memory(fits) <= gb * 10**9 < config_checks.trace_memory(fits + 1)
    assert load_config(None, ingest__max_steps=fits).ingest.max_steps == fits
    with pytest.raises(ValueError, match=f"ingest.max_steps = {fits + 1}: .* at most {fits} steps fit"):
        load_config(None, ingest__max_steps=fits + 1)


@pytest.mark.parametrize("case", ["fifo", "deep", "huge", "not_utf8"])
def test_config_file_itself_checked(tmp_path, case):
    """The --config file is input too: a FIFO (would block the read forever), JSON nested 100,000 deep (a
    RecursionError, an internal error before), a 2 MB file, bytes that are not UTF-8: each one `bad configuration`
    line, nothing written."""
    make_corpus(tmp_path / "in", 2, 1)
    cfg = tmp_path / "cfg.json"
    if case == "fifo":
        os.mkfifo(cfg)
    elif case == "deep":
        cfg.write_text('{"render": ' + "[" * 100_000 + "]" * 100_000 + "}")
    elif case == "huge":
        cfg.write_text(json.dumps({"render": {"pass1_preamble": "x" * 2_000_000}}))
    else:
        cfg.write_bytes(b'{"render": {"truncation_marker": "\xff"}}')
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["attribute", str(tmp_path / "in"), "-o", str(out), "--config", str(cfg),
                                   "--model", "tiny-random", "--no-progress"])
    assert res.exit_code == 1 and "bad configuration" in res.output, res.output
    assert "internal error" not in res.output and not out.exists()


def test_ray_run_checks_prompt_room_before_outdir(tmp_path):
    """`run --engine ray` loads no model in the driver: the prompt texts are checked with the model's tokenizer."""
    make_corpus(tmp_path / "in", 2, 1)
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"render": {"max_context": 1024, "pass2_preamble": "Reconstructed. " * 80}}))
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["run", str(tmp_path / "in"), "-o", str(out), "--config", str(cfg), "--engine",
                                   "ray", "--model", "tiny-random", "--no-progress"])
    assert res.exit_code == 1 and "bad configuration" in res.output and "render.pass2_preamble" in res.output, res.output
    assert not out.exists()

"""Issue 32 through the CLI (tiny random model, logs made here): `--system` names the system of a run's logs
(attributions, `fit`, `--ranker` matching), a fitted ranker applies only to the system it was fitted on, and
`attributions.agent_by` / `stats` say what decided."""

from __future__ import annotations

import json
import random
from pathlib import Path

from ingest_synth import SEED, who_and_when, write_json
from typer.testing import CliRunner

from masprism_batch.cli import EXIT_FATAL, EXIT_OK, app
from masprism_batch.outdir.reads import read_dataset

runner = CliRunner()


def _synth(k: int, seed: int):
    """The method tests' synthetic labelled logs (tests/fit/fit_synth.py), loaded by path."""
    import importlib.util

    import numpy as np

    spec = importlib.util.spec_from_file_location("method_synth", Path(__file__).resolve().parents[1] / "fit"
                                                  / "fit_synth.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rng = np.random.default_rng(seed)
    return [mod.synth_case(rng, i) for i in range(k)]


def _cfg(d: Path) -> Path:
    cfg = d / "c.json"
    cfg.write_text(json.dumps({"model": {"name": "tiny-random"}, "render": {"max_context": 512},
                               "method": {"counterfactual_k": 0}}))
    return cfg


def _attribute(logs, out, cfg, *extra):
    global _said
    res = runner.invoke(app, ["attribute", str(logs), "-o", str(out), "--config", str(cfg), "--no-progress", *extra])
    assert res.exit_code == EXIT_OK, res.output
    _said = " ".join(res.output.split())
    return read_dataset(out / "attributions").to_pylist()


_said = ""  # what the last `_attribute` printed


def test_system_option_names_the_system_and_a_ranker_applies_only_to_it(tmp_path):
    r = random.Random(SEED)
    folder = "exports-" + "".join(r.choice("klmnopq") for _ in range(6))
    for i in range(4):  # Who&When-shaped logs of a team's own system, outside any benchmark folder
        write_json(tmp_path / folder / f"{i}.json", who_and_when(r, r.random() < 0.5)[0])
    logs, cfg, name = tmp_path / folder, _cfg(tmp_path), f"team-{r.randrange(10**6)}"

    rows = _attribute(logs, tmp_path / "run", cfg, "--system", name)
    assert {a["system"] for a in rows} == {name}, f"seed {SEED}"
    assert all(a["verdict_by"].startswith(("rule:", "no_symptom:")) for a in rows)  # nothing fitted for it: zero-training
    for a in rows:  # the blamed agent beside the blamed step's author, with why
        assert a["agent_by"] and a["agent_by"].split(":", 1)[0] in a["pred_agent_rule"]
        if a["pred_agent"] != a["pred_step_agent"]:
            assert a["pred_step_agent"] in a["agent_by"], (a["agent_by"], SEED)
    res = runner.invoke(app, ["stats", str(tmp_path / "run")])
    assert res.exit_code == EXIT_OK and "zero-training, no label read" in " ".join(res.output.split())

    # fit keys the run's logs by the system the run named; 4 labelled logs teach nothing, so no ranker is
    # written (issue 51: it kept the rule's steps and flattened every confidence)
    res = runner.invoke(app, ["fit", str(tmp_path / "run"), "-o", str(tmp_path / "fit.json")])
    assert res.exit_code == EXIT_FATAL and "nothing learned" in res.output, res.output
    assert not (tmp_path / "fit.json").exists()

    # a ranker fitted on `name` (here on synthetic rows) applies to these logs only when they are named so
    from masprism_batch.fit import system as fs
    from masprism_batch.verdict.rankfile import RankerFile

    entry = fs.fit_system(_synth(40, 7), name).entry
    assert entry["verdict"] == "ranker"
    RankerFile("tiny-random", {name: entry}, {}).write(tmp_path / "r.json")
    plain = _attribute(logs, tmp_path / "plain", cfg, "--ranker", str(tmp_path / "r.json"))
    assert all(a["verdict_by"].startswith(("rule:", "no_symptom:")) and a["system"] is None for a in plain)
    named = _attribute(logs, tmp_path / "named", cfg, "--ranker", str(tmp_path / "r.json"), "--system", name)
    assert {a["verdict_by"] for a in named} == {f"ranker:{name}"}
    # issue 51: `--ranker` says which systems it holds and how many logs each matched
    assert f"applies to 1 system(s): {name} (4 logs)" in _said and "no log of this run matched" not in _said
    other = _attribute(logs, tmp_path / "other", cfg, "--ranker", str(tmp_path / "r.json"), "--system", name + "x")
    assert all(a["verdict_by"].startswith(("rule:", "no_symptom:")) for a in other)
    assert f"{name} (0 logs)" in _said and "no log of this run matched" in _said

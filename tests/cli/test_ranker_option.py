"""Issue 50: `--ranker` is the one option that chooses the verdict (rule, packaged, a ranker FILE, masprism), its
file is read once per run, and the former names (`--method`, config `method.ranker_weights`) still work."""

from __future__ import annotations

import json
import random
from pathlib import Path

from ingest_synth import SEED, who_and_when, write_json
from typer.testing import CliRunner

from masprism_batch.cli import EXIT_OK, EXIT_USAGE, app
from masprism_batch.config import load_config
from masprism_batch.outdir.reads import read_dataset

runner = CliRunner()


def _setup(tmp_path: Path):
    """Logs of a named system, a config for the tiny model and a ranker file fitted for that system."""
    import importlib.util

    import numpy as np

    from masprism_batch.fit import system as fs
    from masprism_batch.verdict.rankfile import RankerFile

    r = random.Random(SEED)
    for i in range(3):
        write_json(tmp_path / "logs" / f"{i}.json", who_and_when(r, r.random() < 0.5)[0])
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"model": {"name": "tiny-random"}, "render": {"max_context": 512},
                               "method": {"counterfactual_k": 0}}))
    spec = importlib.util.spec_from_file_location("fit_synth", Path(__file__).resolve().parents[1] / "fit"
                                                  / "fit_synth.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rng = np.random.default_rng(SEED)
    name = f"team-{r.randrange(10**6)}"
    entry = fs.fit_system([mod.synth_case(rng, i) for i in range(40)], name).entry
    RankerFile("tiny-random", {name: entry}, {}).write(tmp_path / "r.json")
    return tmp_path / "logs", cfg, tmp_path / "r.json", name


def test_the_ranker_file_is_read_once_per_run(tmp_path, monkeypatch):
    from masprism_batch.verdict import rankcheck

    logs, cfg, ranker, name = _setup(tmp_path)
    reads = []
    real = rankcheck.read_regular

    def counted(path, limit):
        if Path(path).resolve() == ranker.resolve():
            reads.append(path)
        return real(path, limit)

    monkeypatch.setattr(rankcheck, "read_regular", counted)
    for command in ("attribute", "run"):
        reads.clear()
        out = tmp_path / command
        res = runner.invoke(app, [command, str(logs), "-o", str(out), "--config", str(cfg), "--no-progress",
                                  "--ranker", str(ranker), "--system", name])
        assert res.exit_code == EXIT_OK, res.output
        assert {a["verdict_by"] for a in read_dataset(out / "attributions").to_pylist()} == {f"ranker:{name}"}
        # the CLI's checks, the OUTDIR's binding of its SHA-256 and the verdict policy: one read
        assert len(reads) == 1, (command, reads)


def test_one_option_chooses_the_verdict_and_the_old_names_still_work(tmp_path):
    logs, cfg, ranker, name = _setup(tmp_path)

    def attribute(out, *extra):
        res = runner.invoke(app, ["attribute", str(logs), "-o", str(tmp_path / out), "--config", str(cfg),
                                  "--no-progress", *extra])
        record = json.loads((tmp_path / out / "run.json").read_text()) if res.exit_code == EXIT_OK else None
        return res, record

    res, record = attribute("paper", "--ranker", "masprism")
    assert res.exit_code == EXIT_OK, res.output
    assert record["config"]["method"]["name"] == "masprism" and record["config"]["method"]["ranker"] is None
    res, old = attribute("paper-old", "--method", "masprism")  # the deprecated alias: same config, said so
    assert res.exit_code == EXIT_OK and "--method is deprecated" in " ".join(res.output.split()), res.output
    assert old["config_hash"] == record["config_hash"]
    res, _ = attribute("both", "--method", "masprism", "--ranker", str(ranker))
    assert res.exit_code == EXIT_USAGE and "choose two verdicts" in res.output, res.output
    res, record = attribute("rule", "--ranker", "rule")
    assert res.exit_code == EXIT_OK and record["config"]["method"]["ranker"] is None, res.output
    assert {a["verdict_by"].split(":")[0] for a in read_dataset(tmp_path / "rule" / "attributions").to_pylist()} \
        <= {"rule", "no_symptom"}


def test_the_former_config_name_is_read_with_the_same_hash(tmp_path, caplog):
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"method": {"ranker_weights": "packaged"}}))
    got = load_config(str(old))
    assert got.method.ranker == "packaged" and "is now called method.ranker" in caplog.text
    assert got.config_hash() == load_config(None, method__ranker="packaged").config_hash()
    assert load_config(str(old), method__ranker="rule-file.json").method.ranker == "rule-file.json"  # option wins

"""Issue 59 item 4: `rescore` applies a new ranker, rule, coverage or system to a finished run from its cached
signals (no prefill, no model load), and its verdicts are those of a fresh `attribute` with the same settings."""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from ingest_synth import SEED, who_and_when, write_json
from typer.testing import CliRunner

from masprism_batch.cli import EXIT_FATAL, EXIT_OK, EXIT_USAGE, app
from masprism_batch.outdir.reads import read_dataset

runner = CliRunner()
# every attribution column a verdict decides (the step set's among them, where the schema has them)
VERDICT_COLS = ["trace_id", "system", "n_steps", "pred_step", "pred_agent", "pred_span_id", "candidates", "symptoms",
                "pred_step_agent", "pred_agent_rule", "agent_ranking", "verdict_by", "confidence", "agent_by",
                "config_hash", "read_steps", "set_size", "set_share", "set_coverage", "set_by", "localised"]
STEP_COLS = ["trace_id", "step", "score", "masprism_rank", "final_rank", "final_prob", "pass2_support"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """Logs of a named system, a config for the tiny model, a ranker file fitted for that system."""
    import numpy as np

    from masprism_batch.fit import system as fs
    from masprism_batch.verdict.rankfile import RankerFile

    tmp = tmp_path_factory.mktemp("rescore")
    r = random.Random(SEED)
    for i in range(5):
        write_json(tmp / "logs" / f"{i}.json", who_and_when(r, r.random() < 0.5)[0])
    cfg = tmp / "c.json"
    cfg.write_text(json.dumps({"model": {"name": "tiny-random"}, "render": {"max_context": 512},
                               "method": {"counterfactual_k": 0, "learned_heads": False}}))
    spec = importlib.util.spec_from_file_location("fit_synth", Path(__file__).resolve().parents[1] / "fit"
                                                  / "fit_synth.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rng = np.random.default_rng(SEED)
    name = f"team-{r.randrange(10**6)}"
    entry = fs.fit_system([mod.synth_case(rng, i) for i in range(40)], name).entry
    RankerFile("tiny-random", {name: entry}, {}).write(tmp / "r.json")
    return tmp, cfg, tmp / "r.json", name


def _attribute(tmp, cfg, out, *extra):
    res = runner.invoke(app, ["attribute", str(tmp / "logs"), "-o", str(out), "--config", str(cfg), "--no-progress",
                              *extra])
    assert res.exit_code == EXIT_OK, res.output
    return out


def _verdicts(out: Path) -> list[dict]:
    t = read_dataset(out / "attributions")
    cols = [c for c in VERDICT_COLS if c in t.column_names]
    return sorted(t.select(cols).to_pylist(), key=lambda r: r["trace_id"])


def _steps(out: Path) -> list[dict]:
    t = read_dataset(out / "step_scores")
    return sorted(t.select(STEP_COLS).to_pylist(), key=lambda r: (r["trace_id"], r["step"]))


def _settings(ranker, name):
    """Two settings for logs of a named system: A the zero-training rule, B a fitted ranker and another coverage."""
    return ["--system", name], ["--ranker", str(ranker), "--system", name, "--coverage", "0.6"]


def test_rescored_verdicts_equal_a_fresh_run(setup):
    tmp, cfg, ranker, name = setup
    a, b = _settings(ranker, name)
    run_a = _attribute(tmp, cfg, tmp / "a", *a)
    fresh_b = _attribute(tmp, cfg, tmp / "fresh-b", *b)
    res = runner.invoke(app, ["rescore", str(run_a), "-o", str(tmp / "a-to-b"), *b])
    assert res.exit_code == EXIT_OK, res.output
    assert "no prefill" in res.output
    got, want = _verdicts(tmp / "a-to-b"), _verdicts(fresh_b)
    assert {v["verdict_by"] for v in want} == {f"ranker:{name}"}  # B really is another verdict than A's
    assert got == want
    assert _steps(tmp / "a-to-b") == _steps(fresh_b)
    # and back: B rescored to A is a fresh A
    res = runner.invoke(app, ["rescore", str(fresh_b), "-o", str(tmp / "b-to-a"), "--ranker", "rule",
                              "--coverage", "0.8"])
    assert res.exit_code == EXIT_OK, res.output
    assert _verdicts(tmp / "b-to-a") == _verdicts(run_a)
    # the new OUTDIR is a run: `show` and a resume of the same attribute command (nothing left to do) read it
    assert runner.invoke(app, ["show", str(tmp / "a-to-b")]).exit_code == EXIT_OK
    res = runner.invoke(app, ["attribute", str(tmp / "logs"), "-o", str(tmp / "a-to-b"), "--config", str(cfg),
                              "--no-progress", *b])
    assert res.exit_code == EXIT_OK, res.output
    assert _verdicts(tmp / "a-to-b") == want


def test_in_place_keeps_the_old_verdicts_as_history(setup):
    tmp, cfg, ranker, name = setup
    a, b = _settings(ranker, name)
    run = _attribute(tmp, cfg, tmp / "inplace", *a)
    before = _verdicts(run)
    fresh_b = tmp / "fresh-b2"
    _attribute(tmp, cfg, fresh_b, *b)
    res = runner.invoke(app, ["rescore", str(run), "--in-place", *b])
    assert res.exit_code == EXIT_OK, res.output
    assert _verdicts(run) == _verdicts(fresh_b)
    (hist,) = sorted((run / "history").glob("*.parquet"))
    old = pq.read_table(hist).to_pylist()
    assert {r["superseded_by"] for r in old} == {"rescore"}
    assert sorted((r["trace_id"], r["pred_step"], r["verdict_by"]) for r in old) == \
        sorted((r["trace_id"], r["pred_step"], r["verdict_by"]) for r in before)


def test_usage_and_refusals(setup, tmp_path):
    tmp, cfg, ranker, name = setup
    run = _attribute(tmp, cfg, tmp_path / "r")
    assert runner.invoke(app, ["rescore", str(run)]).exit_code == EXIT_USAGE  # neither -o nor --in-place
    res = runner.invoke(app, ["rescore", str(run), "-o", str(run)])
    assert res.exit_code == EXIT_USAGE
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    res = runner.invoke(app, ["rescore", str(run), "-o", str(tmp_path / "full")])
    assert res.exit_code == EXIT_FATAL and "not empty" in res.output
    res = runner.invoke(app, ["rescore", str(run), "-o", str(tmp_path / "n"), "--ranker", str(tmp_path / "none.json")])
    assert res.exit_code == EXIT_FATAL and "not found" in res.output


def test_a_ranker_reading_features_the_run_did_not_compute_is_refused_naming_them(setup, tmp_path):
    """The run computed counterfactuals only where its verdicts read them (none here): a rule that orders by
    them needs a new run with --all-features, said before anything is written."""
    from masprism_batch.pipelines import rescore as rs

    from masprism_batch.config import load_config

    tmp, cfg, ranker, name = setup
    cf_cfg = tmp_path / "cf.json"
    cf_cfg.write_text(json.dumps({"model": {"name": "tiny-random"}, "render": {"max_context": 512},
                                  "method": {"counterfactual_k": 2, "learned_heads": False}}))
    run = _attribute(tmp, cf_cfg, tmp_path / "r")
    folder = tmp_path / "cfrule"
    folder.mkdir()
    (folder / "fallback.json").write_text(json.dumps({"rule": "counterfactual", "agent_rule": "most_active"}))
    old = rs.run_config(run)
    new = rs.with_settings(old, {"ranker": str(folder)})
    with pytest.raises(rs.RescoreError, match=r"counterfactual \(cf_effect\).*--all-features"):
        rs.rescore(run, tmp_path / "out", new, None)
    assert not (tmp_path / "out").exists()
    assert load_config(None).method.features == "verdict"


def test_attribute_on_an_outdir_of_other_settings_names_them_and_points_to_rescore(setup, tmp_path):
    tmp, cfg, ranker, name = setup
    a, b = _settings(ranker, name)
    run = _attribute(tmp, cfg, tmp_path / "r", *a)
    res = runner.invoke(app, ["attribute", str(tmp / "logs"), "-o", str(run), "--config", str(cfg), "--no-progress",
                              *b])
    said = " ".join(res.output.split())
    assert res.exit_code == EXIT_FATAL, res.output
    assert "--ranker (method.ranker): none in the run" in said and "--coverage (method.coverage): 0.8 in the run, 0.6" in said
    assert f"masprism-batch rescore {run} --coverage 0.6 --ranker {ranker} -o NEW_OUTDIR" in said and "'config_hash'" not in said
    # a difference rescore cannot apply (the model's reading) says to use a new OUTDIR
    other = tmp_path / "c2.json"
    other.write_text(json.dumps({**json.loads(cfg.read_text()), "render": {"max_context": 384}}))
    res = runner.invoke(app, ["attribute", str(tmp / "logs"), "-o", str(run), "--config", str(other),
                              "--no-progress", *b])
    said = " ".join(res.output.split())
    assert res.exit_code == EXIT_FATAL and "--max-context (render.max_context): 512 in the run, 384 now" in said
    assert "use a new OUTDIR (--coverage, --ranker alone could be applied" in said, said


def test_an_outdir_written_before_pass2_support_still_rescores_as_a_fresh_run(setup, tmp_path):
    """Outputs of a rule run list every candidate with its support in attributions.candidates: a rescore of an
    OUTDIR whose step_scores predate `pass2_support` takes it from there."""
    from masprism_batch.pipelines import rescore as rs

    from masprism_batch.outdir.shards import OUTPUT_TABLES, ShardStore
    from masprism_batch.verdict.rankfile import RankerSetting

    tmp, cfg, ranker, name = setup
    a, b = _settings(ranker, name)
    run = _attribute(tmp, cfg, tmp_path / "old", *a)
    store = ShardStore(run)
    header = store.read_header()
    for sid, entry in store.verified().items():
        tables = {t: pq.read_table(store.part_path(t, sid)) for t in OUTPUT_TABLES}
        tables["step_scores"] = tables["step_scores"].drop(["pass2_support"])
        store.commit(sid, tables, {k: v for k, v in entry.items() if k not in ("shard_id", "run_id", "parts")},
                     header["run_id"])
    old = read_dataset(run / "step_scores")  # no file holds the column: read as the table's own, all null
    assert "pass2_support" not in old.column_names or old["pass2_support"].null_count == old.num_rows
    new = rs.with_settings(rs.run_config(run), {"ranker": str(ranker), "coverage": 0.6})
    summary = rs.rescore(run, tmp_path / "new", new, RankerSetting.read(str(ranker)))
    assert summary.support_unknown == 0 and summary.traces == 5
    assert _verdicts(tmp_path / "new") == _verdicts(_attribute(tmp, cfg, tmp_path / "fresh", *b))


@pytest.mark.parametrize("inside", ["_staging/new", "attributions/new", "new"])
def test_a_new_outdir_inside_the_run_is_refused_before_any_write(setup, tmp_path, inside):
    """-o under OUTDIR: under `_staging/` the copy of the staged inputs copied itself into itself until a
    RecursionError (a traceback, and OUTDIR/_staging left holding the nested copies); elsewhere the rescored run
    sat inside the one it came from, where its parts mix with the run's own."""
    tmp, cfg, _ranker, _name = setup
    run = _attribute(tmp, cfg, tmp_path / "r")
    before = sorted(str(p.relative_to(run)) for p in run.rglob("*"))
    res = runner.invoke(app, ["rescore", str(run), "-o", str(run / inside), "--coverage", "0.6"])
    assert res.exit_code == EXIT_USAGE and "inside OUTDIR" in res.output, res.output
    assert sorted(str(p.relative_to(run)) for p in run.rglob("*")) == before  # nothing created or copied


def test_an_outdir_in_use_or_a_failed_write_is_one_error_line(setup, tmp_path, monkeypatch):
    """OUTDIR locked by a live `attribute` was an OutdirLocked out of the command (the last-resort 'internal error,
    not a problem with your input'); an OSError while writing (disk full, -o under a file) a traceback alike."""
    import subprocess
    import sys

    tmp, cfg, _ranker, _name = setup
    run = _attribute(tmp, cfg, tmp_path / "r")
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom masprism_batch.outdir.lock import "
                               "OutdirLock\nwith OutdirLock(sys.argv[1], 'attribute'):\n    print('held', flush=True)\n"
                               "    time.sleep(60)", str(run)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        for where in (["-o", str(tmp_path / "new")], ["--in-place"]):
            res = runner.invoke(app, ["rescore", str(run), *where, "--coverage", "0.6"])
            assert res.exit_code == EXIT_FATAL and "in use by another run" in res.output, res.output
            assert not isinstance(res.exception, Exception) or isinstance(res.exception, SystemExit), res.exception
    finally:
        holder.kill()
        holder.wait()
    (tmp_path / "file").write_text("x")
    res = runner.invoke(app, ["rescore", str(run), "-o", str(tmp_path / "file" / "new"), "--coverage", "0.6"])
    assert res.exit_code == EXIT_FATAL and "error:" in res.output and isinstance(res.exception, SystemExit), res.output
    from masprism_batch.outdir.shards import ShardStore

    def full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ShardStore, "commit", full)
    res = runner.invoke(app, ["rescore", str(run), "-o", str(tmp_path / "new2"), "--coverage", "0.6"])
    assert res.exit_code == EXIT_FATAL and "No space left" in res.output and "incomplete" in res.output, res.output
    assert isinstance(res.exception, SystemExit)
    res = runner.invoke(app, ["rescore", str(run), "--in-place", "--coverage", "0.6"])
    assert res.exit_code == EXIT_FATAL and "No space left" in res.output and "again" in res.output, res.output
    assert isinstance(res.exception, SystemExit)


def test_the_runs_own_ranker_file_changed_or_gone_is_said_when_kept(setup, tmp_path):
    """Without --ranker a rescore keeps the run's ranker: where its file now holds another fit (the same path
    rewritten by a later `fit --force`), the rescore applied the new one without a word (blamed steps moved on a
    --coverage change); where it is gone, 'ranker file not found' did not say it was the run's own. Named again
    with --ranker, the file as it is now applies."""
    import shutil

    import numpy as np

    from masprism_batch.fit import system as fs
    from masprism_batch.verdict.rankfile import RankerFile

    tmp, cfg, ranker, name = setup
    mine = tmp_path / "ranker.json"
    shutil.copy(ranker, mine)
    run = _attribute(tmp, cfg, tmp_path / "r", "--ranker", str(mine), "--system", name)
    spec = importlib.util.spec_from_file_location("fit_synth", Path(__file__).resolve().parents[1] / "fit"
                                                  / "fit_synth.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rng = np.random.default_rng(int(np.random.default_rng().integers(1 << 30)))
    other = fs.fit_system([mod.synth_case(rng, i, gold_by="rule") for i in range(40)], name).entry
    RankerFile("tiny-random", {name: other}, {}).write(mine)
    res = runner.invoke(app, ["rescore", str(run), "-o", str(tmp_path / "a"), "--coverage", "0.6"])
    assert res.exit_code == EXIT_FATAL and "changed since the run" in res.output and "--ranker" in res.output, \
        res.output
    assert not (tmp_path / "a" / "attributions").exists()
    res = runner.invoke(app, ["rescore", str(run), "-o", str(tmp_path / "b"), "--coverage", "0.6", "--ranker",
                              str(mine)])
    assert res.exit_code == EXIT_OK, res.output
    mine.unlink()
    res = runner.invoke(app, ["rescore", str(run), "-o", str(tmp_path / "c"), "--coverage", "0.6"])
    assert res.exit_code == EXIT_FATAL and "the run's ranker file" in res.output and "--ranker" in res.output, \
        res.output

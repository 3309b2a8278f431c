"""Issue 35, items 6 and 7: what a new user meets in the first hour. `fit` summarises skipped label rows in one
line and writes its ranker file readable like every other output; a bad `--ranker` is refused before the model
loads; a wrong `--format` is caught on the first files before OUT exists; `report` / `export` never replace a
file without `--force`; every command has `-v/--verbose` with a description; the demo says where its output is
and what to run next, in one folder it reuses."""

from __future__ import annotations

import json
import logging
import os
import random
import re
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from masprism_batch.cli import EXIT_FATAL, EXIT_OK, app

runner = CliRunner()
FORMATS = Path(__file__).resolve().parents[1] / "data" / "formats"
COMMANDS = ["demo", "ingest", "attribute", "run", "eval", "fit", "fit-heads", "stats", "report", "export", "models"]


def _flat(text: str) -> str:
    return re.sub(r"[\s│╭╮╰╯─]+", " ", text)


@pytest.fixture(scope="module")
def labelled_run(tmp_path_factory, module_seed):
    """A finished tiny-random run over labelled canonical logs (random text, random labelled step)."""
    rng = random.Random(module_seed)
    d = tmp_path_factory.mktemp("first_hour")
    words = "plan search file error retry tool answer check result failed timeout".split()
    with open(d / "logs.jsonl", "w") as f:
        for j in range(rng.randint(10, 13)):  # at least fit.MIN_K: a fit below it writes no ranker (issue 51)
            n = rng.randint(4, 8)
            steps = [{"index": i, "agent": rng.choice(["Planner", "Coder", "Critic"]),
                      "content": " ".join(rng.choices(words, k=rng.randint(3, 10)))} for i in range(n)]
            f.write(json.dumps({"trace_id": f"sys-{j}-{rng.getrandbits(24):06x}", "source": "jsonl", "system": "sys",
                                "steps": steps, "labels": {"mistake_step": rng.randrange(n),
                                                           "mistake_agent": steps[0]["agent"]}}) + "\n")
    res = runner.invoke(app, ["attribute", str(d / "logs.jsonl"), "-o", str(d / "run"), "--model", "tiny-random",
                              "--no-progress"])
    assert res.exit_code == EXIT_OK, res.output
    return d


def test_fit_summarises_skipped_label_rows_in_one_line(labelled_run, tmp_path, rng, caplog):
    ids = [r["trace_id"] for r in map(json.loads, (labelled_run / "logs.jsonl").read_text().splitlines())]
    unknown = [f"gone-{rng.getrandbits(32):08x}" for _ in range(rng.randint(8, 30))]
    rows = [{"trace_id": t, "step": 0} for t in ids] + [{"trace_id": t, "step": 1} for t in unknown]
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "ranker.json"
    res = runner.invoke(app, ["fit", str(labelled_run / "run"), "--labels", str(labels), "-o", str(out)])
    assert res.exit_code == EXIT_OK, res.output
    text = _flat(res.output)
    assert text.count("row(s) skipped") == 1 and "row skipped" not in text  # one line, not one per row
    assert f"{len(unknown)} label row(s) skipped" in text
    assert f"{len(unknown)} trace in none of the runs" in text and all(u in text for u in unknown[:3])
    assert unknown[3] not in text and f"({len(unknown) - 3} more)" in text
    # the ranker file is readable like every other output: 0666 under the umask, not mkstemp's 0600
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask
    caplog.set_level(logging.DEBUG, logger="masprism_batch.cli.fit")
    res = runner.invoke(app, ["fit", str(labelled_run / "run"), "--labels", str(labels), "-o", str(tmp_path / "v.json"),
                              "-v"])
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert all(u in logged for u in unknown)  # --verbose lists each row


@pytest.mark.parametrize("bad", ["missing", "csv"])
def test_ranker_is_validated_before_the_model_loads(tmp_path, monkeypatch, bad):
    import masprism_batch.pipelines.model_stage as model_stage

    def no_model(cfg):
        raise AssertionError("the model was loaded before --ranker was checked")

    monkeypatch.setattr(model_stage, "load_model", no_model)
    ranker = tmp_path / "r.csv"
    if bad == "csv":
        ranker.write_text("trace_id,step\nx,1\n")
    out = tmp_path / "OUT"
    res = runner.invoke(app, ["attribute", str(FORMATS / "openai_chat.json"), "-o", str(out), "--model",
                              "tiny-random", "--ranker", str(ranker)])
    assert res.exit_code == EXIT_FATAL, res.output
    assert "ranker" in res.output and "AssertionError" not in res.output and not out.exists()


def test_wrong_format_is_caught_on_the_first_files_before_out_exists(tmp_path):
    out = tmp_path / "OUT"
    for cmd in (["ingest"], ["attribute", "--model", "tiny-random"]):
        res = runner.invoke(app, [*cmd, str(FORMATS / "openai_chat.json"), "-o", str(out), "-f", "swe-agent"])
        text = _flat(res.output)
        assert res.exit_code == EXIT_FATAL, res.output
        assert "--format swe-agent reads no trace" in text and "looks like --format openai" in text
        assert not out.exists()


def test_report_and_export_refuse_to_overwrite_without_force(labelled_run, tmp_path, rng):
    run = str(labelled_run / "run")
    for argv, name in ((["report", run], "r.html"), (["export", run, "--to", "jsonl"], "a.jsonl"),
                       (["export", run, "--to", "phoenix"], "a.traces.parquet")):
        target = tmp_path / name
        before = f"keep me {rng.random()}"
        target.write_text(before)
        given = tmp_path / name.replace(".traces", "")  # phoenix: -o names the files of its targets
        res = runner.invoke(app, [*argv, "-o", str(given)])
        assert res.exit_code == EXIT_FATAL and "--force" in res.output, res.output
        assert target.read_text() == before
        res = runner.invoke(app, [*argv, "-o", str(given), "--force"])
        assert res.exit_code == EXIT_OK, res.output
        assert target.read_bytes() != before.encode()


@pytest.mark.parametrize("cmd", COMMANDS)
def test_every_command_has_a_described_verbose_option(cmd):
    text = _flat(runner.invoke(app, [cmd, "--help"]).output)
    assert re.search(r"--verbose -v (<bool> )?debug logging", text), text


def test_attribute_takes_f_like_ingest():
    for cmd in ("ingest", "attribute", "run"):
        assert re.search(r"--format -f", _flat(runner.invoke(app, [cmd, "--help"]).output)), cmd


def test_export_help_example_matches_the_readme():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    example = re.search(r"Example: (masprism-batch export \S+ --to phoenix -o \S+)",
                        _flat(runner.invoke(app, ["export", "--help"]).output)).group(1)
    assert example in readme


def test_demo_reuses_one_folder_and_says_what_next(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # the demo folder lives in the cache root under HOME
    outs = []
    for _ in range(2):
        res = runner.invoke(app, ["demo", "--model", "tiny-random", "--progress-interval", "0"])
        assert res.exit_code == EXIT_OK, res.output
        lines = [ln for ln in res.output.splitlines() if ln.strip()]
        assert lines[-1].startswith("next: masprism-batch report ") and lines[-2].startswith("outputs: ")
        outs.append(lines[-2].split()[1])
    assert outs[0] == outs[1] and Path(outs[0]).is_dir()
    assert sorted(p.name for p in (tmp_path / ".cache" / "masprism-batch").iterdir() if "demo" in p.name) == ["demo"]

"""Issue 51 items 4 and 8: one set of counts in every output (terminal, run.json, stats, report), each row of
errors/ with the file it came from, `show` listing verdicts per trace, and an empty input refused before a model
loads."""

import json
import re
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from typer.testing import CliRunner

from masprism_batch.cli import EXIT_FATAL, EXIT_REJECTED, app

runner = CliRunner()


def _flat(text: str) -> str:
    return " ".join(text.split())


def _logs(tmp_path: Path, rng) -> tuple[Path, dict[str, list[str]]]:
    """Two canonical JSON-lines files with failed, succeeded and unknown runs, and one file that is no JSON."""
    d = tmp_path / "logs"
    d.mkdir()
    by_file: dict[str, list[str]] = {}
    for name in ("a.jsonl", "b.jsonl"):
        statuses = ["failed", "succeeded", "unknown"] + rng.choices(["failed", "succeeded"], k=rng.randint(1, 3))
        lines = []
        for st in statuses:
            tid = f"{name[0]}-{st}-{rng.getrandbits(32):08x}"
            steps = [{"index": k, "agent": rng.choice(["Planner", "Coder"]), "content": f"step {k} {rng.random():.5f}"}
                     for k in range(rng.randint(2, 4))]
            lines.append(json.dumps({"trace_id": tid, "source": "jsonl", "steps": steps, "run_status": st}))
            by_file.setdefault(st, []).append(str(d / name))
        (d / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    (d / "broken.json").write_text("{not json", encoding="utf-8")
    return d, by_file


def _counts(text: str) -> tuple[int, ...]:
    m = re.search(r"(\d+) attributed, (\d+) rejected.*?, (\d+) set aside as succeeded, (\d+) warnings?", _flat(text))
    assert m, text
    return tuple(int(x) for x in m.groups())


def test_counts_agree_everywhere_and_name_their_files(tmp_path, rng):
    logs, by_file = _logs(tmp_path, rng)
    out = tmp_path / "OUT"
    res = runner.invoke(app, ["attribute", str(logs), "-o", str(out), "--model", "tiny-random", "--no-progress"])
    assert res.exit_code == EXIT_REJECTED, res.output
    want = (len(by_file["failed"]) + len(by_file["unknown"]), 1, len(by_file["succeeded"]), 0)
    assert _counts(res.output) == want
    assert "{" not in res.output.split("attributed", 1)[1].split("\n", 1)[0]  # no raw Python dict
    counts = json.loads((out / "run.json").read_text())["counts"]
    assert (counts["attributed"], counts["rejected"], counts["succeeded"], counts["warnings"]) == want
    res = runner.invoke(app, ["stats", str(out)])
    assert res.exit_code == 0 and _counts(res.output) == want, res.output
    res = runner.invoke(app, ["report", str(out), "-o", str(tmp_path / "r.html")])
    assert res.exit_code == 0, res.output
    html = (tmp_path / "r.html").read_text()
    for label, n in zip(("traces attributed", "rejected", "set aside as succeeded", "warnings (traces kept)"),
                        want, strict=True):
        assert re.search(rf'<div class="kv">{n}</div><div class="kl">{re.escape(label)}</div>', html), label
    errors = ds.dataset(str(out / "errors")).to_table().to_pylist()
    succeeded = sorted(e["input_path"] for e in errors if e["reason"] == "succeeded_run")
    assert succeeded == sorted(by_file["succeeded"])  # each set-aside run with the file it came from
    res = runner.invoke(app, ["show", str(out), "--errors"])
    assert res.exit_code == 0 and "broken.json" in res.output and "set aside" in res.output, res.output


def test_show_lists_every_verdict(tmp_path, rng):
    logs, by_file = _logs(tmp_path, rng)
    out = tmp_path / "OUT"
    runner.invoke(app, ["attribute", str(logs), "-o", str(out), "--model", "tiny-random", "--no-progress"])
    attrs = ds.dataset(str(out / "attributions")).to_table().to_pylist()
    res = runner.invoke(app, ["show", str(out), "--by", "trace"])
    assert res.exit_code == 0, res.output
    text = _flat(res.output)
    assert f"{len(attrs)} verdicts" in text
    for a in attrs:
        assert a["trace_id"] in res.output and a["verdict_by"] in text
    res = runner.invoke(app, ["show", str(out), "--limit", "1"])
    assert f"{len(attrs) - 1} more" in res.output


def test_empty_input_is_refused_before_the_model_loads(tmp_path, monkeypatch):
    import masprism_batch.pipelines.model_stage as model_stage

    def no_model(*a, **k):
        raise AssertionError("the model was loaded for an empty input")

    monkeypatch.setattr(model_stage, "load_model", no_model)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("not a log")
    for cmd in ("attribute", "run"):
        res = runner.invoke(app, [cmd, str(tmp_path / "empty"), "-o", str(tmp_path / "OUT")])
        assert res.exit_code == EXIT_FATAL and "no usable traces" in _flat(res.output), res.output
        assert not (tmp_path / "OUT").exists()


COMMANDS = ["demo", "ingest", "attribute", "show", "stats", "report", "export", "fit", "fit-heads", "run", "eval",
            "models"]


@pytest.mark.parametrize("cmd", COMMANDS)
def test_help_has_no_type_tags_and_one_meaning_per_short_flag(cmd):
    from masprism_batch.cli import SHORT_FLAGS

    text = _flat(runner.invoke(app, [cmd, "--help"], env={"COLUMNS": "200"}).output)
    assert not re.search(r"<(bool|int|str|path|float|list\[[^\]]*\])>", text), text
    usage = re.search(r"Usage: \S+ \S+ \[OPTIONS\](.*?) (?:Attribute|Find|Print|Write|One|Export|Check|Fit|The|"
                      r"Learn|List|Score|Show|Try|[A-Z])", text).group(1)
    assert "{" not in usage and "<" not in usage, usage  # INPUTS..., not {inputs}...
    for long, short in re.findall(r"│ [* ]*(--[a-z][a-z-]*)\s+(?:--no-[a-z-]+\s+)?(-[a-zA-Z])\s", text):
        assert SHORT_FLAGS.get(short) == long, (cmd, short, long)
    assert not re.search(r"--force\s+-[a-zA-Z]\s", text)


def test_version_and_command_order_follow_the_readme():
    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0 and re.match(r"masprism-batch \S+", res.output)
    text = runner.invoke(app, ["--help"], env={"COLUMNS": "200"}).output
    listed = [c for c in re.findall(r"│ ([a-z-]+) ", text) if c in COMMANDS]
    assert listed == COMMANDS
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    sections = [s for s in re.findall(r"^## (.+)$", readme, re.M)]
    panels = [p for p in re.findall(r"╭─ (.+?) ─", text) if p not in ("Options", "Models")]
    order = [next((i for i, s in enumerate(sections) if p.lower()[:12] in s.lower()), None) for p in panels]
    assert None not in order and order == sorted(order), (panels, sections)

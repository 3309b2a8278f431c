"""Issue 60 item 5: `--refresh` re-attributes the traces of a changed file whose content changed (not the
ones appended around them), keeps their old verdicts in OUT/history/, and leaves one live row per trace in every
output; without the flag a changed file's old traces keep their verdicts (as before)."""

import json
from pathlib import Path

import pyarrow.dataset as ds
from typer.testing import CliRunner

from masprism_batch.cli import EXIT_OK, app
from masprism_batch.outdir.history import history_files

runner = CliRunner()


def _trace(rng, tid: str) -> dict:
    steps = [{"index": k, "agent": rng.choice(["Planner", "Coder"]), "content": f"step {k}: {rng.random():.6f}"}
             for k in range(rng.randint(2, 4))]
    return {"trace_id": tid, "source": "jsonl", "steps": steps, "run_status": "failed"}


def _write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _rows(out: Path, table: str, key: str = "trace_id") -> list[str]:
    return ds.dataset(str(out / table)).to_table(columns=[key])[key].to_pylist()


def _attribute(logs: Path, out: Path, *extra: str):
    res = runner.invoke(app, ["attribute", str(logs), "-o", str(out), "--model", "tiny-random", "--no-progress",
                              "--traces-per-shard", "2", *extra])
    assert res.exit_code == EXIT_OK, res.output
    return " ".join(res.output.split()), json.loads((out / "run.json").read_text())


def _scenario(tmp_path, rng):
    logs, out = tmp_path / "logs", tmp_path / "OUT"
    logs.mkdir()
    a = [_trace(rng, f"a{i}") for i in range(4)]
    _write(logs / "a.jsonl", a)
    _write(logs / "b.jsonl", [_trace(rng, "b0")])
    _attribute(logs, out)
    before = {r["trace_id"]: r for r in ds.dataset(str(out / "traces")).to_table().to_pylist()}
    # a.jsonl changes: one trace edited, the others as they were, one appended
    edited = rng.randrange(4)
    a[edited] = _trace(rng, f"a{edited}")
    _write(logs / "a.jsonl", a + [_trace(rng, "a9")])
    return logs, out, f"a{edited}", before


def test_without_the_flag_a_changed_file_keeps_its_old_verdicts(tmp_path, rng):
    logs, out, edited, before = _scenario(tmp_path, rng)
    said, run = _attribute(logs, out)
    assert "--refresh re-attributes" in said
    assert sorted(_rows(out, "attributions")) == sorted(list(before) + ["a9"])
    steps = {r["trace_id"]: r["steps"] for r in ds.dataset(str(out / "traces")).to_table().to_pylist()}
    assert steps[edited] == before[edited]["steps"] and history_files(out) == []


def test_refresh_re_attributes_exactly_the_edited_trace_and_keeps_history(tmp_path, rng):
    logs, out, edited, before = _scenario(tmp_path, rng)
    old = {r["trace_id"]: r for r in ds.dataset(str(out / "attributions")).to_table().to_pylist()}
    said, run = _attribute(logs, out, "--refresh")
    assert "1 trace(s) of changed files re-attributed" in said, said
    inv = run["this_invocation"]
    assert inv["inputs"]["refreshed_ids"] == [edited] and inv["counts"]["attributed"] == 2  # edited + appended
    for table in ("traces", "attributions", "step_scores"):
        ids = _rows(out, table)
        if table != "step_scores":
            assert sorted(ids) == sorted(list(before) + ["a9"]), table  # one live row per trace
    steps = {r["trace_id"]: r["steps"] for r in ds.dataset(str(out / "traces")).to_table().to_pylist()}
    assert steps[edited] != before[edited]["steps"]
    assert all(steps[t] == before[t]["steps"] for t in before if t != edited)
    scored = {}
    for r in ds.dataset(str(out / "step_scores")).to_table(columns=["trace_id", "step"]).to_pylist():
        scored.setdefault(r["trace_id"], []).append(r["step"])
    assert len(scored[edited]) == len(steps[edited]) == len(set(scored[edited]))  # the old step rows are gone
    files = history_files(out)
    assert len(files) == 1 and "refresh" in files[0].name
    hist = ds.dataset(str(files[0])).to_table().to_pylist()
    assert [h["trace_id"] for h in hist] == [edited] and hist[0]["superseded_by"] == "refresh"
    assert hist[0]["pred_step"] == old[edited]["pred_step"]
    assert run["counts"]["attributed"] == len(before) + 1
    # the next run has nothing new: no model, no second archive
    said, run = _attribute(logs, out, "--refresh")
    assert run["this_invocation"]["model_loaded"] is False and len(history_files(out)) == 1
    res = runner.invoke(app, ["stats", str(out)])
    assert res.exit_code == EXIT_OK and f"{len(before) + 1} attributed" in " ".join(res.output.split()), res.output


def test_a_refresh_cut_short_while_taking_old_rows_out_is_finished_by_the_next_run(tmp_path, rng, monkeypatch):
    # the refresh dies after rewriting one part of an older shard (its manifest entry not yet rewritten): that
    # shard now reads as damaged. The next run must finish taking the old rows out, not re-run the old shard
    # (whose staged input still holds the edited trace's old content: a second live row, rejected as a duplicate)
    from masprism_batch.outdir import shards

    logs, out, edited, before = _scenario(tmp_path, rng)
    real, calls = shards.write_table_atomic, []

    def dies_on_the_second_part(*a, **k):
        calls.append(a[1])
        if len(calls) == 2:
            raise OSError("disk went away")
        return real(*a, **k)

    monkeypatch.setattr(shards, "write_table_atomic", dies_on_the_second_part)
    res = runner.invoke(app, ["attribute", str(logs), "-o", str(out), "--model", "tiny-random", "--no-progress",
                              "--traces-per-shard", "2", "--refresh"])
    assert res.exit_code != EXIT_OK and len(calls) == 2, res.output
    assert (out / "history" / "purging.json").is_file()  # it died inside the purge, an old shard half rewritten
    monkeypatch.setattr(shards, "write_table_atomic", real)
    said, run = _attribute(logs, out, "--refresh")
    for table in ("traces", "attributions"):
        assert sorted(_rows(out, table)) == sorted(list(before) + ["a9"]), table  # one live row per trace
    steps = {r["trace_id"]: r["steps"] for r in ds.dataset(str(out / "traces")).to_table().to_pylist()}
    assert steps[edited] != before[edited]["steps"]
    assert not any(r == "duplicate_trace_id" for r in ds.dataset(str(out / "errors")).to_table()["reason"].to_pylist())
    hist = [h["trace_id"] for f in history_files(out) for h in ds.dataset(str(f)).to_table().to_pylist()]
    assert hist == [edited]  # archived once, though the purge ran twice
    assert not (out / "history" / "purging.json").exists()

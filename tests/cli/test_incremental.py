"""Issue 51 item 3: a nightly job re-runs the same command over a log folder that grew. Exactly the new traces
are attributed (never one twice), a changed file is said and read again, and run.json and the summary say how
many were new. Both engines plan through the same staging (staging.stage_raw); the Ray case is one slow test."""

import json
import re
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from typer.testing import CliRunner

from masprism_batch.cli import EXIT_OK, app

runner = CliRunner()


def _log(rng, prefix: str, n: int) -> tuple[str, list[str]]:
    lines, ids = [], []
    for _ in range(n):
        tid = f"{prefix}-{rng.getrandbits(40):010x}"
        steps = [{"index": k, "agent": rng.choice(["Planner", "Coder", "Critic"]),
                  "content": f"step {k}: {rng.random():.6f}"} for k in range(rng.randint(2, 5))]
        lines.append(json.dumps({"trace_id": tid, "source": "jsonl", "steps": steps, "run_status": "failed"}))
        ids.append(tid)
    return "\n".join(lines) + "\n", ids


def _run(logs: Path, out: Path, *extra: str) -> tuple[str, dict, list[str]]:
    res = runner.invoke(app, ["run", str(logs), "-o", str(out), "--model", "tiny-random", "--no-progress",
                              "--traces-per-shard", "2", *extra])
    assert res.exit_code == EXIT_OK, res.output
    ids = ds.dataset(str(out / "attributions")).to_table(columns=["trace_id"])["trace_id"].to_pylist()
    return " ".join(res.output.split()), json.loads((out / "run.json").read_text()), ids


def _scenario(tmp_path, rng, *extra):
    logs, out = tmp_path / "logs", tmp_path / "OUT"
    logs.mkdir()
    text_a, ids_a = _log(rng, "a", rng.randint(2, 4))
    (logs / "a.jsonl").write_text(text_a)
    said, record, ids = _run(logs, out, *extra)
    assert sorted(ids) == sorted(ids_a) and record["this_invocation"]["inputs"]["new_traces"] == len(ids_a)

    # the same command, nothing new: nothing run, and it says so
    said, record, ids = _run(logs, out, *extra)
    assert sorted(ids) == sorted(ids_a) and "0 new trace(s)" in said
    assert record["this_invocation"]["inputs"]["new_traces"] == 0

    # a new file: exactly its traces (one repeating an id already attributed is not attributed again)
    text_b, ids_b = _log(rng, "b", rng.randint(1, 3))
    (logs / "b.jsonl").write_text(text_b + text_a.splitlines()[0] + "\n")
    said, record, ids = _run(logs, out, *extra)
    assert sorted(ids) == sorted(ids_a + ids_b), "a trace attributed twice or a new one missed"
    inc = record["this_invocation"]["inputs"]
    assert (inc["new_traces"], inc["new_files_count"], inc["already_staged"]) == (len(ids_b), 1, 1)
    assert f"{len(ids_b)} new trace(s)" in said and "1 new file(s)" in said
    assert record["counts"]["attributed"] == len(ids_a) + len(ids_b)

    # a file that changed (a log appended to): said, read again, only its new traces attributed
    text_c, ids_c = _log(rng, "c", rng.randint(1, 2))
    (logs / "a.jsonl").write_text(text_a + text_c)
    said, record, ids = _run(logs, out, *extra)
    assert sorted(ids) == sorted(ids_a + ids_b + ids_c) and len(ids) == len(set(ids))
    assert re.search(r"1 changed since the last run, read again \(\S*a\.jsonl\)", said), said
    assert record["this_invocation"]["inputs"]["already_staged"] == len(ids_a)


def test_a_grown_folder_attributes_exactly_the_new_traces(tmp_path, rng):
    _scenario(tmp_path, rng)


@pytest.mark.slow
@pytest.mark.ray
def test_a_grown_folder_attributes_exactly_the_new_traces_on_ray(tmp_path, rng):
    pytest.importorskip("ray")
    _scenario(tmp_path, rng, "--engine", "ray", "--num-cpus", "2")


def test_an_interrupted_increment_is_staged_again(tmp_path, rng, monkeypatch):
    """Parts of an increment cut short (the marker does not list them) are removed and staged again, never
    planned half-done."""
    from masprism_batch.pipelines import increment

    logs, out = tmp_path / "logs", tmp_path / "OUT"
    logs.mkdir()
    text_a, ids_a = _log(rng, "a", 2)
    (logs / "a.jsonl").write_text(text_a)
    _run(logs, out)
    text_b, ids_b = _log(rng, "b", 3)
    (logs / "b.jsonl").write_text(text_b)
    real = increment.write_json_atomic

    def crash(obj, path):  # the generation's parts are in place, its marker never written
        raise KeyboardInterrupt

    monkeypatch.setattr(increment, "write_json_atomic", crash)
    res = runner.invoke(app, ["run", str(logs), "-o", str(out), "--model", "tiny-random", "--no-progress",
                              "--traces-per-shard", "2"])
    assert res.exit_code != EXIT_OK
    assert list((out / "_staging" / "traces").glob("part-g*.parquet"))  # the cut-short parts are there
    monkeypatch.setattr(increment, "write_json_atomic", real)
    said, record, ids = _run(logs, out)
    assert sorted(ids) == sorted(ids_a + ids_b) and len(ids) == len(set(ids))

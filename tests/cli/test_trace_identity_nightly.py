"""Issue 61 findings 1-3, nightly: a rerun of the same command into its OUTDIR attributes exactly the new runs
when a log is rotated, appended to, or a new night's folder holds a file of the same name; and an OUTDIR staged
under the id scheme before ingest/run_ids.py (ids from file names) resumes across the change. The code of
9473d5c attributed day 1 again and skipped day 2 (rotation), attributed run 1 of a CrewAI log again (append),
and skipped `night2/logs.txt` as already attributed."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from masprism_batch.pipelines import increment
from typer.testing import CliRunner

from masprism_batch.cli import EXIT_OK, app
from masprism_batch.ingest import run_ids

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ingest"))
from test_trace_identity import crew_log  # noqa: E402 - the CrewAI log builder of the ingest test

runner = CliRunner()


def _chat(day: int, n: int) -> str:
    """OpenAI chat records without an id: ingest names them by content, where 9473d5c used `<file>#<line>`."""
    return "".join(json.dumps({"messages": [
        {"role": "user", "content": f"day {day} question {k}"},
        {"role": "assistant", "content": f"day {day} answer {k}: it failed"}]}) + "\n" for k in range(n))


def _run(logs: Path, out: Path) -> tuple[str, dict, list[str]]:
    res = runner.invoke(app, ["run", str(logs), "-o", str(out), "--model", "tiny-random", "--no-progress",
                              "--traces-per-shard", "2"])
    assert res.exit_code == EXIT_OK, res.output
    ids = ds.dataset(str(out / "attributions")).to_table(columns=["trace_id"])["trace_id"].to_pylist()
    return " ".join(res.output.split()), json.loads((out / "run.json").read_text()), ids


def _questions(out: Path) -> list[str]:
    """The content of every attributed run (the same run under two ids shows twice)."""
    ids = set(ds.dataset(str(out / "attributions")).to_table(columns=["trace_id"])["trace_id"].to_pylist())
    rows = ds.dataset(str(out / "traces")).to_table(columns=["trace_id", "question", "steps"]).to_pylist()
    return sorted(repr([(s["content"], s["start_time"]) for s in r["steps"]]) for r in rows if r["trace_id"] in ids)


def _rotate(logs: Path, day: int, n: int) -> None:
    os.replace(logs / "chat.jsonl", logs / f"chat-day{day - 1}.jsonl")
    (logs / "chat.jsonl").write_text(_chat(day, n))


def _nights(tmp_path, first_night, next_night) -> tuple[list[str], list[str], dict]:
    """Run over the folder `first_night(logs)` wrote, let `next_night(logs)` change it, run again: the ids of both
    runs and the second run's `inputs` record. Every attributed run is attributed once (by content)."""
    logs, out = tmp_path / "logs", tmp_path / "OUT"
    logs.mkdir()
    first_night(logs)
    _, _, first = _run(logs, out)
    next_night(logs)
    said, record, ids = _run(logs, out)
    assert set(first) <= set(ids), "a run attributed on night 1 changed its id"
    assert len(ids) == len(set(ids)) and len(_questions(out)) == len(set(_questions(out))), "a run attributed twice"
    return first, ids, record["this_invocation"]["inputs"]


def test_a_rotated_log_attributes_exactly_the_new_days_runs(tmp_path):
    """Finding 2: chat.jsonl -> chat-day1.jsonl and a new chat.jsonl (9473d5c: day 1 again, day 2 skipped)."""
    first, ids, inc = _nights(tmp_path, lambda logs: (logs / "chat.jsonl").write_text(_chat(1, 3)),
                              lambda logs: _rotate(logs, 2, 3))
    assert len(first) == 3 and len(ids) == 6 and (inc["new_traces"], inc["already_staged"]) == (3, 3), inc


def test_a_second_kickoff_appended_to_a_crewai_log_is_the_only_new_run(tmp_path):
    """Finding 3: run 1 keeps its id when run 2 is appended (9473d5c: `#1`, `#2`, run 1 attributed again)."""
    def append(logs):
        with open(logs / "logs.txt", "a") as f:
            f.write(crew_log(1, "crew", first=1))
    first, ids, inc = _nights(tmp_path, lambda logs: (logs / "logs.txt").write_text(crew_log(1, "crew")), append)
    assert len(first) == 1 and len(ids) == 2 and (inc["new_traces"], inc["already_staged"]) == (1, 1), inc


def test_a_new_nights_log_of_the_same_name_is_attributed(tmp_path):
    """Finding 1 across nights: `night2/logs.txt` beside `night1/logs.txt` (9473d5c: "already attributed")."""
    def night(n):
        def write(logs):
            (logs / f"night{n}").mkdir()
            (logs / f"night{n}" / "logs.txt").write_text(crew_log(n, "crew", runs=2))
        return write
    first, ids, inc = _nights(tmp_path, night(1), night(2))
    assert len(first) == 2 and len(ids) == 4 and (inc["new_traces"], inc["new_files_count"]) == (2, 1), inc


def test_an_outdir_of_the_file_name_scheme_resumes_across_the_change(tmp_path, monkeypatch):
    logs, out = tmp_path / "logs", tmp_path / "OUT"
    logs.mkdir()
    (logs / "chat.jsonl").write_text(_chat(1, 3))
    (logs / "logs.txt").write_text(crew_log(1, "crew"))
    monkeypatch.setattr(run_ids, "ID_SCHEME", 1)  # staged as the code before ingest/run_ids.py did
    _, _, first = _run(logs, out)
    assert sorted(first) == ["crewai/logs.txt", "openai/chat#1", "openai/chat#2", "openai/chat#3"]
    marker = json.loads((out / "_staging" / "_COMPLETE.json").read_text())
    marker.pop("id_scheme")  # an OUTDIR of that version records no scheme at all
    (out / "_staging" / "_COMPLETE.json").write_text(json.dumps(marker))

    monkeypatch.setattr(run_ids, "ID_SCHEME", 2)
    _rotate(logs, 2, 2)  # the worst night for a change of ids: rotated and appended at once
    with open(logs / "logs.txt", "a") as f:
        f.write(crew_log(1, "crew", first=1))
    said, record, ids = _run(logs, out)
    assert set(first) <= set(ids) and len(ids) == len(set(ids)) == 4 + 2 + 1, said
    assert len(_questions(out)) == len(set(_questions(out))) == 7, "an old run attributed again"
    inc = record["this_invocation"]["inputs"]
    assert (inc["new_traces"], inc["already_staged"]) == (3, 4), inc
    marker = json.loads((out / "_staging" / "_COMPLETE.json").read_text())
    assert marker["id_scheme"] == 2 and marker["legacy_parts"] and all(
        p.startswith("traces/part-0") for p in marker["legacy_parts"])

    # a later night still knows the old runs: the day-1 log appended to again runs only its new line; the old
    # parts' digests were kept the first time, not read again
    assert (out / "_staging" / increment.LEGACY_DIGESTS).is_file()
    monkeypatch.setattr(increment, "_staged_digests", lambda files: pytest.fail("old parts read again"))
    with open(logs / "chat-day1.jsonl", "a") as f:
        f.write(_chat(9, 1))
    said, record, ids = _run(logs, out)
    assert len(ids) == len(set(ids)) == 8 and len(set(_questions(out))) == 8, said
    assert record["this_invocation"]["inputs"]["new_traces"] == 1

"""Issue 34 item 5: `ingest --map mapping.toml` reads a format ingest does not know, by JSON paths; shown on two
real formats (the mappings in tests/data/formats/_maps, also in docs/formats.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ingest_synth import SEED, rng, text
from typer.testing import CliRunner

from masprism_batch.cli import EXIT_OK, app
from masprism_batch.ingest import read_inputs
from masprism_batch.ingest.mapping import compile_path, load_mapping, select
from masprism_batch.outdir.reads import read_dataset

DATA = Path(__file__).resolve().parents[1] / "data" / "formats"


def _read(path, m):
    errors: list[dict] = []
    return list(read_inputs([str(path)], "auto", errors.append, mapping=m)), errors


def test_paths_select_keys_indexes_and_every_item():
    r = rng("paths")
    items = [{"k": text(r, 1, 8), "n": [r.randint(0, 9) for _ in range(3)]} for _ in range(r.randint(2, 5))]
    doc = {"a": {"b c": items}}
    assert select(doc, compile_path('$.a["b c"][*].k', "p")) == [i["k"] for i in items], f"seed {SEED}"
    assert select(doc, compile_path("$.a['b c'][-1].n[0]", "p")) == [items[-1]["n"][0]]
    assert select(doc, compile_path("$.a.missing[*]", "p")) == []
    for bad in ("a.b", "$.a..b", "$[x]", 3):
        with pytest.raises(ValueError):
            compile_path(bad, "p")


def test_mapping_reads_an_inspect_log_like_its_adapter():
    m = load_mapping(str(DATA / "_maps" / "inspect_json.toml"))
    path = DATA / "_real" / "inspect_ai" / "log_formats.json"
    (t,), errors = _read(path, m)
    (native,), _ = _read(path, None)
    assert errors == [] and t.source == "inspect-by-map" and t.question == native.question
    assert [(s.agent, s.content) for s in t.steps] == [(s.role, s.content) for s in native.steps]


def test_mapping_reads_a_mini_swe_agent_list(tmp_path):
    m = load_mapping(str(DATA / "_maps" / "mini_swe_agent.toml"))
    path = DATA / "_real" / "mini_swe_agent" / "github_issue.traj.json"
    msgs = json.loads(path.read_text())
    (t,), errors = _read(path, m)
    assert errors == [] and t.question == msgs[1]["content"]
    assert t.trace_id.startswith("mini-swe-by-map/github_issue.traj~")  # the file's name, and its run's digest
    assert [s.content for s in t.steps] == [m_["content"] for m_ in msgs]  # the last message is empty, kept as given
    assert [s.agent for s in t.steps] == [m_["role"] for m_ in msgs]


def test_cli_map_and_its_refusals(tmp_path):
    r = rng("cli-map")
    runs = {"runs": [{"id": f"r{i}", "task": text(r, 3, 30), "events": [
        {"who": "planner", "say": text(r, 3, 30), "calls": [{"tool": "search", "args": {"q": i}}]},
        {"who": "search", "out": text(r, 3, 30)}]} for i in range(r.randint(1, 4))]}
    (tmp_path / "runs.json").write_text(json.dumps(runs))
    (tmp_path / "m.toml").write_text('source = "mytool"\ntraces = "$.runs[*]"\ntrace_id = "$.id"\nquestion = "$.task"\n'
                                     'steps = "$.events[*]"\n[step]\nagent = "$.who"\ncontent = "$.say"\n'
                                     'tool_calls = "$.calls[*]"\ntool_name = "$.tool"\ntool_args = "$.args"\n'
                                     'result = "$.out"\n')
    res = CliRunner().invoke(app, ["ingest", str(tmp_path / "runs.json"), "--map", str(tmp_path / "m.toml"),
                                   "-o", str(tmp_path / "OUT"), "--no-progress"])
    assert res.exit_code == EXIT_OK, res.output
    rows = read_dataset(tmp_path / "OUT" / "traces").to_pylist()
    assert [x["trace_id"] for x in rows] == [run["id"] for run in runs["runs"]]
    for row, run in zip(rows, runs["runs"], strict=True):
        assert row["source"] == "mytool" and row["question"] == run["task"]
        s0, s1 = row["steps"]
        assert s0["agent"] == "planner" and s0["content"].endswith('Tool call: search({"q": ' + run["id"][1:] + "})")
        assert (s1["agent"], s1["kind"], s1["content"]) == ("search", "tool", f"Output: {run['events'][1]['out']}")
    (tmp_path / "bad.toml").write_text('source = "x"\nsteps = "events"\n')
    res = CliRunner().invoke(app, ["ingest", str(tmp_path / "runs.json"), "--map", str(tmp_path / "bad.toml"),
                                   "-o", str(tmp_path / "O2"), "--no-progress"])
    assert res.exit_code == 1 and "starting with '$'" in res.output and not (tmp_path / "O2").exists()
    res = CliRunner().invoke(app, ["ingest", str(tmp_path / "runs.json"), "--map", str(tmp_path / "m.toml"),
                                   "--format", "openai", "-o", str(tmp_path / "O3"), "--no-progress"])
    assert res.exit_code == 2

"""Issue 35, item 3 and issue 60 item 1: a run's status is read from every format that records it; by default
every run is attributed except one graded as passed (tau-bench's reward, a canonical run_status, the team's
`--outcomes`): an execution status of OK is no grade. The runs set aside are counted by signal and listed
(`--all-runs` attributes them too). Checked on the real exports in ../shared/data/real_exports/ and on random
status fields."""

import json
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from typer.testing import CliRunner

from masprism_batch.cli import EXIT_OK, app
from masprism_batch.ingest import ingest, status

REAL = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "real_exports"
needs_real = pytest.mark.skipif(not REAL.is_dir(), reason=f"real exports not found at {REAL}")


def test_status_rules_on_random_fields(rng):
    codes = {2: "failed", "STATUS_CODE_ERROR": "failed", "error": "failed", "Error": "failed", 1: "succeeded",
             "ok": "succeeded", "STATUS_CODE_OK": "succeeded", 0: None, "unset": None, "Unset": None}  # per span
    for _ in range(200):
        picks = rng.choices(list(codes), k=rng.randint(1, 8))
        spans = [rng.choice([{"status": {"code": c}}, {"status": {"status_code": c}}, {"status_code": c}])
                 for c in picks]
        got = [codes[c] for c in picks]
        want = "failed" if "failed" in got else "unknown"  # spans OK: no exception, no grade of the run
        assert status.combine_statuses(status.span_status(s) for s in spans) == want
    r = rng.random()
    assert status.of_reward(r) == ("succeeded" if r >= 1 else "failed") and status.of_reward(1.0) == "succeeded"
    assert status.of_reward(None) == "unknown" and status.of_reward(True) == "unknown"
    assert status.of_exit_status("submitted") == "unknown"
    assert status.of_exit_status(rng.choice(["exit_cost", "exit_context", "exit_error", "LimitsExceeded"])) == "failed"
    assert status.of_langfuse({"output": "x"}, [{"level": "DEFAULT"}, {"level": "ERROR"}]) == "failed"
    assert status.of_langfuse({"output": "x"}, [{"level": "DEFAULT"}]) == "unknown"
    assert status.of_langsmith([{"error": "boom"}], {"outputs": {"a": 1}}) == "failed"


@pytest.mark.data
@needs_real
def test_real_exports_carry_their_status(tmp_path):
    ingest([str(REAL)], tmp_path / "i", "auto", progress=False)
    rows = ds.dataset(str(tmp_path / "i" / "traces")).to_table(columns=["source", "run_status"]).to_pylist()
    by = {}
    for r in rows:
        by.setdefault(r["source"], set()).add(r["run_status"])
    # any-agent's OTel SDK dumps (spans OK), the Langfuse and LangSmith downloads (an output, no error): an
    # execution status, no grade of the answer; nothing in these files records a failure or a graded success
    for src in ("otel", "langfuse", "langsmith", "openai", "openhands", "swe-agent", "tau-bench"):
        assert by[src] == {"unknown"}, src


def _canonical(tmp_path: Path, rng) -> tuple[Path, dict[str, str]]:
    """Canonical JSON lines whose traces carry a random run_status each (every status present)."""
    want = {}
    lines = []
    statuses = ["failed", "succeeded", "unknown"] + rng.choices(["failed", "succeeded", "unknown"], k=rng.randint(2, 5))
    for i, st in enumerate(statuses):
        tid = f"t{i}-{rng.getrandbits(32):08x}"
        steps = [{"index": k, "agent": rng.choice(["Planner", "Coder"]), "content": f"step {k} {rng.random():.6f}"}
                 for k in range(rng.randint(2, 5))]
        lines.append(json.dumps({"trace_id": tid, "source": "jsonl", "steps": steps, "run_status": st}))
        want[tid] = st
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return src, want


def _attributed(out: Path) -> set[str]:
    return set(ds.dataset(str(out / "attributions")).to_table(columns=["trace_id"])["trace_id"].to_pylist())


@pytest.mark.data
@needs_real
def test_only_runs_graded_passed_are_set_aside(tmp_path, rng):
    src, want = _canonical(tmp_path, rng)
    inputs = [str(src), str(REAL / "otel-sdk-spans"), str(REAL / "swe-agent")]
    real_ok = {"115825058289444712299650141807529952578", "100927429609276267646756448943279827607"}
    # the team's outcomes (a Phoenix trace-evaluation export): one OTel run graded correct, the other not
    graded = sorted(real_ok)
    (tmp_path / "evals.csv").write_text("context.trace_id,label,score\n"
                                        f"{graded[0]},correct,1\n{graded[1]},incorrect,0\n", encoding="utf-8")
    runner = CliRunner()
    out = tmp_path / "out"
    res = runner.invoke(app, ["attribute", *inputs, "-o", str(out), "--model", "tiny-random",
                              "--progress-interval", "0", "--outcomes", str(tmp_path / "evals.csv")])
    assert res.exit_code == EXIT_OK, res.output
    traces = ds.dataset(str(out / "traces")).to_table(columns=["trace_id", "run_status"]).to_pylist()
    errors = ds.dataset(str(out / "errors")).to_table().to_pylist()
    skipped = {e["record_id"] for e in errors if e["reason"] == "succeeded_run"}
    assert skipped == {t for t, s in want.items() if s == "succeeded"} | {graded[0]}
    swe = {t for t in _attributed(out) if t.startswith("swe-agent/function_calling_simple")}  # its id scheme aside
    assert len(swe) == 1 and _attributed(out) - swe == {t for t, s in want.items() if s != "succeeded"} | {graded[1]}
    assert {r["run_status"] for r in traces} <= {"failed", "unknown"}
    assert {r["run_status"] for r in traces if r["trace_id"] == graded[1]} == {"failed"}
    n_field = sum(s == "succeeded" for s in want.values())
    said = " ".join(res.output.split())
    assert f"{len(skipped)} run(s) set aside as graded passed, by signal: outcomes x1, run_status x{n_field}" in said
    assert json.loads((out / "run.json").read_text())["counts"]["succeeded_by_signal"] == {
        "outcomes": 1, "run_status": n_field}
    # stats show the split
    res = runner.invoke(app, ["stats", str(out)])
    assert res.exit_code == EXIT_OK, res.output
    split = ds.dataset(str(out / "stats" / "run_status.parquet")).to_table().to_pylist()
    aside = {r["set_aside_by"]: r["n_traces"] for r in split if not r["attributed"]}
    assert aside == {"outcomes": 1, "run_status": n_field}
    assert sum(r["n_traces"] for r in split if r["attributed"]) == len(_attributed(out))
    assert f"succeeded runs not attributed: {len(skipped)}" in " ".join(res.output.split())
    res = runner.invoke(app, ["report", str(out), "-o", str(tmp_path / "r.html")])
    assert res.exit_code == EXIT_OK, res.output
    assert f"succeeded runs not attributed: {len(skipped)}" in (tmp_path / "r.html").read_text(encoding="utf-8")
    # --all-runs attributes them too (into another OUT: another selection of runs)
    out2 = tmp_path / "all"
    res = runner.invoke(app, ["attribute", *inputs, "-o", str(out2), "--model", "tiny-random",
                              "--progress-interval", "0", "--all-runs"])
    assert res.exit_code == EXIT_OK, res.output
    assert _attributed(out2) - swe == set(want) | real_ok


SHAPES = Path(__file__).resolve().parents[1] / "data" / "formats"


def _statuses(path: Path) -> list[str]:
    from masprism_batch.ingest import read_inputs

    return [t.run_status for t in read_inputs([str(path)], on_error=lambda e: None)]


def _write(tmp_path: Path, name: str, doc) -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(doc), encoding="utf-8")
    return p


def test_each_reader_sets_the_status_its_format_records(tmp_path, rng):
    """The readers, not only the rules: a status field flipped at random in each format's fixture."""
    # OTLP JSON: a span with status code 2 (ERROR) fails the run; OK spans and none in error: no grade, unknown
    doc = json.loads((SHAPES / "otel_genai.json").read_text())
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert set(_statuses(_write(tmp_path, "o0.json", doc))) == {"unknown"}
    for s in spans:
        s["status"] = {"code": rng.choice([1, "STATUS_CODE_OK"])}
    assert set(_statuses(_write(tmp_path, "o1.json", doc))) == {"unknown"}
    rng.choice(spans)["status"] = {"code": rng.choice([2, "STATUS_CODE_ERROR"])}
    assert set(_statuses(_write(tmp_path, "o2.json", doc))) == {"failed"}
    # OTel SDK span dumps
    doc = json.loads((SHAPES / "_shapes" / "otel_sdk_spans.json").read_text())
    assert set(_statuses(_write(tmp_path, "s0.json", doc))) == {"unknown"}  # UNSET everywhere
    rng.choice(doc["spans"])["status"] = {"status_code": rng.choice(["ERROR", "error"])}
    assert set(_statuses(_write(tmp_path, "s1.json", doc))) == {"failed"}
    # Jaeger: an `error` tag
    doc = json.loads((SHAPES / "_shapes" / "jaeger.json").read_text())
    rng.choice(doc["data"][0]["spans"])["tags"].append({"key": "error", "type": "bool", "value": True})
    assert set(_statuses(_write(tmp_path, "j.json", doc))) == {"failed"}
    # Langfuse: an observation at level ERROR
    doc = json.loads((SHAPES / "_shapes" / "langfuse_ui_download.json").read_text())
    assert set(_statuses(_write(tmp_path, "l0.json", doc))) == {"unknown"}  # no output, no error
    doc["trace"]["output"] = f"done {rng.random()}"
    assert set(_statuses(_write(tmp_path, "l1.json", doc))) == {"unknown"}  # an output is no grade
    rng.choice(doc["observations"])["level"] = "ERROR"
    assert set(_statuses(_write(tmp_path, "l2.json", doc))) == {"failed"}
    # tau-bench results: the reward
    doc = json.loads((SHAPES / "_shapes" / "taubench_results.json").read_text())
    rewards = [rng.choice([0.0, 1.0, round(rng.random(), 3)]) for _ in doc]
    for r, w in zip(doc, rewards, strict=True):
        r["reward"] = w
    assert _statuses(_write(tmp_path, "t.json", doc)) == ["succeeded" if w >= 1 else "failed" for w in rewards]
    # SWE-agent: exit_status (a submission is not graded)
    doc = json.loads((SHAPES / "_shapes" / "swe_agent" / "fix_typo.traj").read_text())
    assert _statuses(_write(tmp_path, "a.traj", doc)) == ["unknown"]
    doc["info"]["exit_status"] = rng.choice(["exit_cost", "exit_context", "exit_format", "exit_error"])
    assert _statuses(_write(tmp_path, "b.traj", doc)) == ["failed"]
    # OpenHands: an error observation / agent state
    doc = json.loads((SHAPES / "_shapes" / "openhands_events.json").read_text())
    assert _statuses(_write(tmp_path, "h0.json", doc)) == ["unknown"]
    obs = next(e for e in doc if "observation" in e)
    obs.setdefault("extras", {})["agent_state"] = "error"
    assert _statuses(_write(tmp_path, "h1.json", doc)) == ["failed"]
    # LangSmith run trees: a run with an error (the fixture's tool run) fails it; without: the root's outputs
    lines = [json.loads(x) for x in (SHAPES / "langsmith_runs.jsonl").read_text().splitlines() if x.strip()]
    assert _statuses(SHAPES / "langsmith_runs.jsonl") == ["failed"]
    for r in lines:
        r["error"] = None
    clean = tmp_path / "ls.jsonl"
    clean.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    assert _statuses(clean) == ["unknown"]  # outputs and no error: no grade of the answer

"""One verdict everywhere (issue 15, item 5): one trace through every output names the same step and agent.

The trace is attributed once with the tiny random model (default method); then attributions/, step_scores/,
the Phoenix/OTel/JSONL exports, the stats tables, the report's drill-down data and the demo's terminal lines
are read back and must all name attributions' `pred_step` and `pred_agent`. A doctored copy of the OUTDIR,
whose attributions blame an agent that wrote no step at all, checks that no output re-derives the verdict.
The DuckDB "blamed" one-liners of docs/reporting.md are executed against the same OUTDIR.
"""

import importlib
import io as _io
import json
import re
import shutil
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from rich.console import Console
from typer.testing import CliRunner

from masprism_batch import schema
from masprism_batch.analytics import report, stats
from masprism_batch.cli import EXIT_OK, app
from masprism_batch.cli import demo as demo_cli
from masprism_batch.trace import Labels, Step, Trace

export = importlib.import_module("masprism_batch.analytics.export")  # the package re-exports a function of that name
REPORTING_DOC = Path(__file__).resolve().parents[2] / "docs" / "reporting.md"
AGENTS = ["Planner", "Coder", "Terminal", "Coder", "Terminal", "Planner", "Coder"]
TEXT = ["Plan: search the file and sum the values.", "def total(xs): return sum(xs)",
        "Traceback: NameError: name 'xs' is not defined", "Fixed the call: total(values)", "exitcode: 0, 41",
        "The answer is 41.", "Error: the expected answer was 42, the sum skipped one value."]


# A ranker that favours the first step a little: the top step is step 0 (Planner), while the agent with the most
# probability summed over its steps is Coder (3 of 7 steps): pred_agent differs from the blamed step's author.
# (a ranker file as `masprism-batch fit` writes it, for the trace's system "toy"; no offset toward the rule)
AGGREGATE_RANKER = {"format": "masprism-batch ranker", "version": 3, "model_id": "tiny-random", "systems": {"toy": {
    "system": "toy", "verdict": "ranker", "rule": "faithful", "features": ["is_first"], "weights": [0.5],
    "mean": [0.0], "std": [1.0], "offset": "rule", "offset_scale": 0.0, "agent_rule": "aggregate"}}}


@pytest.fixture(scope="module", params=["aggregate-ranker", "packaged"])
def outdir(request, tmp_path_factory):
    """The default method with a ranker whose agent rule is "aggregate", and with the packaged configuration."""
    base = tmp_path_factory.mktemp("verdict")
    extra = []
    if request.param == "aggregate-ranker":
        (base / "ranker.json").write_text(json.dumps(AGGREGATE_RANKER), encoding="utf-8")
        (base / "cfg.json").write_text(json.dumps({"method": {"ranker": str(base / "ranker.json")}}),
                                       encoding="utf-8")
        extra = ["--config", str(base / "cfg.json")]
    t = Trace(trace_id="one", source="jsonl", system="toy",
              steps=[Step(index=i, agent=a, role="assistant", content=c)
                     for i, (a, c) in enumerate(zip(AGENTS, TEXT, strict=True))],
              labels=Labels(mistake_step=1, mistake_agent="Coder"))
    src = base / "in.jsonl"
    src.write_text(json.dumps(t.to_row(), default=str) + "\n", encoding="utf-8")
    out = base / "out"
    res = CliRunner().invoke(app, ["attribute", str(src), "-o", str(out), "--model", "tiny-random",
                                   "--progress-interval", "0", *extra])
    assert res.exit_code == EXIT_OK, res.output
    if request.param == "aggregate-ranker":  # the case this test exists for really happened
        a = _attribution(out)
        assert (a["pred_step"], a["pred_step_agent"], a["pred_agent"]) == (0, "Planner", "Coder")
    return out


def _attribution(outdir: Path) -> dict:
    (a,) = ds.dataset(str(outdir / "attributions")).to_table().to_pylist()
    return a


def _doctor(outdir: Path, dst: Path, **changes) -> Path:
    """A copy of OUTDIR (plain Parquet layout) whose attributions row carries `changes`."""
    for name in ("step_scores", "traces"):
        (dst / name).mkdir(parents=True)
        for i, p in enumerate(sorted((outdir / name).glob("*.parquet"))):
            shutil.copy(p, dst / name / f"part-{i}.parquet")
    row = {**_attribution(outdir), **changes}
    (dst / "attributions").mkdir()
    pq.write_table(pa.Table.from_pylist([row], schema=schema.ATTRIBUTIONS), dst / "attributions" / "part-0.parquet")
    return dst


def _outputs(outdir: Path, tmp: Path) -> dict[str, tuple]:
    """(step, agent) as each output names the verdict of the single trace."""
    got: dict[str, tuple] = {}
    # exports: the trace has no span ids, so Phoenix gets a trace annotation, in the file of that target
    ph = tmp / "ann.traces.jsonl"
    files = export.export_files(outdir, "phoenix", tmp / "ann.jsonl", top_k=3)
    (rec, *_) = [json.loads(x) for x in ph.read_text().splitlines()]
    assert rec["label"] == "failure_source" and set(files) == {ph} and "span_id" not in rec
    assert rec["metadata"]["step"] == rec["metadata"]["blamed_step"]
    got["phoenix"] = (rec["metadata"]["blamed_step"], rec["metadata"]["blamed_agent"])
    m = re.search(r"Blamed: step (\d+) \(written by [^)]*\); blamed agent (\S+) ", rec["explanation"])
    got["phoenix explanation"] = (int(m.group(1)), m.group(2))
    ot = tmp / "ev.jsonl"
    export.export(outdir, "otel", ot, top_k=3)
    recs = [r for line in ot.read_text().splitlines()
            for r in json.loads(line)["resourceLogs"][0]["scopeLogs"][0]["logRecords"]]
    first = {a["key"]: next(iter(a["value"].values())) for a in recs[0]["attributes"]}
    assert first["gen_ai.evaluation.score.label"] == "failure_source" and first["masprism.rank"] == "1"
    got["otel rank 1"] = (int(first["masprism.step"]), first["masprism.blamed_agent"])
    got["otel blamed"] = (int(first["masprism.blamed_step"]), first["masprism.blamed_agent"])
    js = tmp / "a.jsonl"
    export.export(outdir, "jsonl", js)
    (j,) = export.read_jsonl(js).values()
    got["jsonl"] = (j["pred_step"], j["pred_agent"])
    # stats
    st = stats.compute_stats(outdir)
    (ba,) = st["blamed_agents"].to_pylist()
    (pos,) = [r for r in st["step_position"].to_pylist() if r["measure"] == "absolute"]
    got["stats"] = (pos["bin"], ba["agent"])
    blamed_authors = [r["agent"] for r in st["nll_by_agent"].to_pylist() for _ in range(r["n_blamed"])]
    got["stats n_blamed (author)"] = (pos["bin"], blamed_authors)
    # report: the drill-down data embedded in the HTML
    html_path = tmp / "r.html"
    report.build_report(outdir, html_path)
    payload = json.loads(re.search(r'<script type="application/json" id="report-data">(.*?)</script>',
                                   html_path.read_text(encoding="utf-8"), re.S).group(1))
    (t,) = payload["traces"]
    got["report"] = (t["pred"], t["agent"])
    got["report author"] = (t["pred"], t["pa"])
    # demo / terminal printing
    buf = _io.StringIO()
    old, demo_cli.console = demo_cli.console, Console(file=buf, width=400)
    try:
        demo_cli._print_attributions(outdir)
    finally:
        demo_cli.console = old
    text = buf.getvalue()
    m = re.search(r"predicted: step (\d+) \(written by ([^)]*)\); blamed agent: (\S+)", text)
    got["demo"] = (int(m.group(1)), m.group(3))
    got["demo author"] = (int(m.group(1)), m.group(2))
    return got


def _check(got: dict, step: int, agent: str, author: str) -> None:
    for k, v in got.items():
        if k == "stats n_blamed (author)":
            assert v == (step, [author]), k
        elif k.endswith("author"):
            assert v == (step, author), k
        else:
            assert v == (step, agent), (k, v, (step, agent))


def test_every_output_names_the_same_step_and_agent(outdir, tmp_path):
    a = _attribution(outdir)
    step, agent = a["pred_step"], a["pred_agent"]
    assert a["method"] == "ranked" and a["candidates"][0]["step"] == step
    assert a["pred_step_agent"] == AGENTS[step]
    # author / aggregate, or a zero-training agent rule of fallback.json (most_active, guard:t, active, mix:b:
    # issues 23, 32)
    from masprism_batch.verdict import rules

    assert a["pred_agent_rule"] in ("author", "aggregate", *rules.AGENT_RULES)
    assert a["agent_ranking"] and a["agent_ranking"][0]["agent"] == agent
    if a["pred_agent_rule"] in ("aggregate", "active", "most_active") or a["pred_agent_rule"].startswith("mix:"):
        assert sum(r["score"] for r in a["agent_ranking"]) == pytest.approx(1.0)
    elif not a["pred_agent_rule"].startswith("guard:"):  # a guard keeps the most active agent or moves to the votes'
        assert agent == AGENTS[step]
    rows = sorted(ds.dataset(str(outdir / "step_scores")).to_table().to_pylist(), key=lambda r: r["step"])
    ranked = sorted((r for r in rows if r["final_rank"] is not None), key=lambda r: r["final_rank"])
    assert ranked[0]["step"] == step and [r["final_rank"] for r in ranked] == list(range(1, len(ranked) + 1))
    assert [r["step"] for r in ranked[: len(a["candidates"])]] == [c["step"] for c in a["candidates"]]
    if rows[0]["final_prob"] is not None:  # the learned ranker ran: a probability and a rank for every step
        assert len(ranked) == len(AGENTS)
        assert max(rows, key=lambda r: (r["final_prob"], -r["step"]))["step"] == step
        assert sum(r["final_prob"] for r in rows) == pytest.approx(1.0, abs=1e-5)
    assert [r["rank"] for r in rows] == [r["masprism_rank"] for r in rows]  # old name kept for old readers
    _check(_outputs(outdir, tmp_path), step, agent, AGENTS[step])


def test_outputs_read_the_verdict_and_never_recompute_it(outdir, tmp_path):
    """Blame an agent that wrote no step (as the aggregate rule may blame another agent than the step's author):
    every output must still name exactly what attributions say."""
    a = _attribution(outdir)
    d = _doctor(outdir, tmp_path / "doctored", pred_agent="Auditor", pred_agent_rule="aggregate",
                agent_ranking=[{"agent": "Auditor", "score": 0.9}, {"agent": a["pred_step_agent"], "score": 0.1}])
    (tmp_path / "x").mkdir()
    _check(_outputs(d, tmp_path / "x"), a["pred_step"], "Auditor", a["pred_step_agent"])


def _readme_duckdb() -> list[str]:
    text = REPORTING_DOC.read_text(encoding="utf-8")
    block = text.split("## DuckDB one-liners over OUTDIR", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [q.replace("\n", " ") for q in re.findall(r'duckdb -c "(.*?)"', block, re.S)]


def test_readme_duckdb_examples_give_the_blamed_step_and_agent(outdir):
    queries = _readme_duckdb()
    assert len(queries) >= 5
    stats.write_stats(outdir)
    con = duckdb.connect()
    results = []
    for q in queries:
        folder = re.search(r"'OUT/([a-z_]+)/", q).group(1)
        if not list((outdir / folder).glob("*.parquet")):
            assert folder == "errors", q  # a clean run writes no error part; every other example must run
            results.append(None)
            continue
        results.append(con.sql(q.replace("'OUT/", f"'{outdir}/")).fetchall())
    a = _attribution(outdir)
    blamed = [q for q in queries if "blamed" in q.lower() or "pred_" in q]
    assert blamed, "docs/reporting.md has no blamed-step example"
    by_q = dict(zip(queries, results, strict=True))
    (verdict,) = [by_q[q] for q in queries if "pred_step_agent" in q]
    assert verdict == [(a["trace_id"], a["pred_step"], a["pred_step_agent"], a["pred_agent"], a["pred_agent_rule"])]
    (most,) = [by_q[q] for q in queries if "pred_agent, count(*)" in q]
    assert most == [(a["source"], a["pred_agent"], 1)]
    (top3,) = [by_q[q] for q in queries if "final_rank <= 3" in q]
    assert [r[1] for r in top3][:1] == [a["pred_step"]]
    assert [r[1] for r in top3] == [c["step"] for c in a["candidates"][:3]]
    (nll,) = [by_q[q] for q in queries if "final_rank = 1" in q]
    assert [(r[0], r[1]) for r in nll if r[1]] == [(a["pred_step_agent"], True)]

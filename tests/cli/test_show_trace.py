"""Issue 60, item 6: `show OUT TRACE_ID` prints one verdict at a glance (it was refused: "unexpected extra
argument"): the candidates with their step texts, the symptoms, the agent rule actually used and its evidence,
the confidence, the step set where the output has one; the listing's "decided by" names the agent rule too."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
from analytics_synth import write_outdir
from typer.testing import CliRunner

from masprism_batch.cli import app


def _step(agent, content, span=None):
    return {"agent": agent, "content": content, "span_id": span}


def _run(tmp_path, step_set: bool):
    long = "the planner read the 2019 report instead of the 2021 one and " * 30
    specs = [{"trace_id": "ww/HC-32", "source": "ww", "system": "X", "steps": [
        _step("Orchestrator", "plan the search"), _step("WebSurfer", long), _step("Coder", "Error: no such file"),
        _step("Orchestrator", "final answer 12")], "labels": None, "ranked": [1, 2, 0], "scores": [3.5, 2.0, 0.5],
        "symptoms": [2, 3], "nll": [1.0, 2.0, 3.0, 1.0], "confidence": 0.43, "verdict_by": "rule:faithful",
        "pred_agent_rule": "mix:0.5"}]
    out = write_outdir(tmp_path / "out", specs)
    part = next((out / "attributions").glob("*.parquet"))
    t = pq.read_table(part)
    t = t.set_column(t.schema.get_field_index("pred_agent"), "pred_agent", pa.array(["Orchestrator"]))
    t = t.set_column(t.schema.get_field_index("agent_by"), "agent_by",
                     pa.array(["mix:0.5: Orchestrator wrote 2 of 4 steps and none of the blamed"]))
    if step_set:
        for name, arr in (("read_steps", pa.array([[1, 2]], pa.list_(pa.int32()))), ("set_size", pa.array([2])),
                          ("set_share", pa.array([0.5])), ("set_coverage", pa.array([0.9])),
                          ("set_by", pa.array(["dev:zero-training"])), ("localised", pa.array([True]))):
            t = t.drop_columns([name]) if name in t.column_names else t
            t = t.append_column(name, arr)
    pq.write_table(t, part)
    return out


def test_show_one_trace_at_a_glance(tmp_path):
    out = _run(tmp_path, step_set=True)
    r = CliRunner().invoke(app, ["show", str(out), "ww/HC-32"], env={"COLUMNS": "160"})
    assert r.exit_code == 0, r.output
    text = r.output
    for want in ("rank", "symptoms it explains", "WebSurfer", "3.5", "predicted: step 1 (written by WebSurfer); "
                 "blamed agent: Orchestrator (mix:0.5: Orchestrator wrote", "decided by rule:faithful, confidence "
                 "0.43", "the agent rule mix:0.5", "symptoms (steps where the failure shows): 2, 3",
                 "read steps 1, 2", "set_size 2 (50% of the log)", "set_coverage 0.90 by dev:zero-training",
                 "localised", "blamed step 1 (WebSurfer): the planner read"):
        assert want in " ".join(text.split()), want
    assert "chars)" in text and len(text) < 6000  # the 1,900-character step is cut to a screen


def test_show_without_a_step_set_and_the_listing_names_the_agent_rule(tmp_path):
    out = _run(tmp_path, step_set=False)
    r = CliRunner().invoke(app, ["show", str(out), "ww/HC-32"], env={"COLUMNS": "160"})
    assert r.exit_code == 0 and "read steps" not in r.output
    r = CliRunner().invoke(app, ["show", str(out)], env={"COLUMNS": "160"})
    assert r.exit_code == 0 and "agent_by mix:0.5" in " ".join(r.output.split())


def test_show_an_unknown_trace_says_so(tmp_path):
    out = _run(tmp_path, step_set=False)
    r = CliRunner().invoke(app, ["show", str(out), "nope"])
    assert r.exit_code == 1 and "'nope' is not in" in r.output and "ww/HC-32" in r.output
    r = CliRunner().invoke(app, ["show", str(out), "ww/HC-32", "--errors"])
    assert r.exit_code == 2

"""run.json says where the time and tokens went (issue 24, item 3); `--all-features` computes what no verdict reads."""

from __future__ import annotations

import json
import random

import pyarrow.dataset as ds
from typer.testing import CliRunner

from masprism_batch.cli import EXIT_OK, app
from masprism_batch.trace import Step, Trace

runner = CliRunner()
WORDS = ["search", "the", "result", "error", "file", "answer", "plan", "code", "failed", "value"]


def _corpus(tmp_path, n=4, seed=None):
    rng = random.Random(seed)
    calm = [w for w in WORDS if w not in ("error", "failed")]

    def steps(m):
        # failure words only in the last step: it is a symptom with earlier candidates, so pass 2 always runs
        # (a symptom at step 0 has no candidate and skips pass 2; a random corpus hit that now and then)
        return [Step(index=j, agent=rng.choice(["Planner", "Coder"]),
                     content=" ".join(rng.choice(WORDS if j == m - 1 else calm) for _ in range(rng.randint(5, 40)))
                     + (" error: failed" if j == m - 1 else "")) for j in range(m)]

    traces = [Trace(trace_id=f"t{i}", source="my-team", steps=steps(rng.randint(4, 9))) for i in range(n)]
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(json.dumps(t.to_row(), default=str) for t in traces) + "\n", encoding="utf-8")
    return src


def _attribute(tmp_path, src, name, *extra):
    out = tmp_path / name
    res = runner.invoke(app, ["attribute", str(src), "-o", str(out), "--model", "tiny-random", "--max-context", "1024",
                              "--no-progress", *extra])
    assert res.exit_code == EXIT_OK, res.output
    return out, json.loads((out / "run.json").read_text()), res.output


def test_run_json_has_tokens_per_stage_and_the_cli_prints_the_breakdown(tmp_path):
    src = _corpus(tmp_path)
    out, run, text = _attribute(tmp_path, src, "lean")
    tok, sec = run["stage_tokens_total"], run["stage_seconds_total"]
    assert tok["tokens_pass1"] + tok["tokens_pass2"] == run["counts"]["tokens"] > 0
    assert tok["tokens_pass1"] > 0 and tok["tokens_pass2"] > 0
    assert sec["seconds_pass1"] > 0 and sec["seconds_pass2"] > 0
    assert sec["seconds_pass1"] + sec["seconds_pass2"] + sec["seconds_counterfactual"] <= sec["seconds_model"] + 1e-3
    # no fitted ranker for "my-team" and the packaged rule reads no costly feature: nothing re-read, nulls
    assert tok["tokens_counterfactual"] == 0 and sec["seconds_counterfactual"] < 0.5
    cf = ds.dataset(str(out / "step_scores")).to_table(columns=["cf_effect"])["cf_effect"].to_pylist()
    assert all(x is None for x in cf)
    line = next(ln for ln in text.splitlines() if ln.startswith("time:"))
    assert "pass 1" in line and "pass 2" in line and "counterfactuals" in line and "write" in line

    full, run_all, _ = _attribute(tmp_path, src, "all", "--all-features")
    assert run_all["stage_tokens_total"]["tokens_counterfactual"] > 0
    assert run_all["config"]["method"]["features"] == "all" and run_all["config_hash"] != run["config_hash"]
    cf = ds.dataset(str(full / "step_scores")).to_table(columns=["cf_effect"])["cf_effect"].to_pylist()
    assert any(x is not None for x in cf)
    # the verdicts do not depend on what the verdict does not read
    key = ["trace_id", "pred_step", "pred_agent"]
    lean = sorted(ds.dataset(str(out / "attributions")).to_table(columns=key).to_pylist(), key=lambda r: r["trace_id"])
    every = sorted(ds.dataset(str(full / "attributions")).to_table(columns=key).to_pylist(), key=lambda r: r["trace_id"])
    assert lean == every

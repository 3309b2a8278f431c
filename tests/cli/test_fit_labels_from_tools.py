"""Issue 60 item 3 through the CLI: `export --to langfuse`, the scores listed back as Langfuse's
`GET /api/public/scores` gives them, then `fit --labels` on that page fits the same labelled logs; an annotation
name no record has stops `fit` with the names the file holds (`--label-name`)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from masprism_batch.cli import EXIT_FATAL, EXIT_OK, app

runner = CliRunner()


def _run(d):
    logs = d / "logs.jsonl"
    with open(logs, "w") as f:
        for j in range(12):
            steps = [{"index": i, "agent": ["Planner", "Coder", "Critic"][i % 3], "role": "assistant",
                      "content": f"step {i} of log {j}: plan search retry answer"} for i in range(6)]
            f.write(json.dumps({"trace_id": f"ww/HC-{j}", "source": "jsonl", "system": "billing-bot",
                                "steps": steps, "labels": None}) + "\n")
    cfg = d / "c.json"
    cfg.write_text(json.dumps({"model": {"name": "tiny-random"}, "render": {"max_context": 512},
                               "method": {"counterfactual_k": 0}}))
    res = runner.invoke(app, ["attribute", str(logs), "-o", str(d / "run"), "--config", str(cfg), "--no-progress"])
    assert res.exit_code == EXIT_OK, res.output
    return d / "run"


def test_langfuse_scores_back_into_fit(tmp_path):
    run = _run(tmp_path)
    res = runner.invoke(app, ["export", str(run), "--to", "langfuse", "-o", str(tmp_path / "s.jsonl")])
    assert res.exit_code == EXIT_OK, res.output
    bodies = [json.loads(x) for x in (tmp_path / "s.jsonl").read_text().splitlines()]
    page = {"data": [{**b, "value": 0, "stringValue": b["value"], "source": "API"} if b["dataType"] == "CATEGORICAL"
                     else {**b, "source": "API"} for b in bodies], "meta": {"page": 1, "totalItems": len(bodies)}}
    (tmp_path / "page.json").write_text(json.dumps(page))
    res = runner.invoke(app, ["fit", str(run), "--labels", str(tmp_path / "page.json"), "-o", str(tmp_path / "r.json")])
    assert res.exit_code == EXIT_OK, res.output
    assert "billing-bot: k=12" in res.output
    res = runner.invoke(app, ["fit", str(run), "--labels", str(tmp_path / "page.json"), "-o", str(tmp_path / "q.json"),
                              "--label-name", "reviewed_failure"])
    assert res.exit_code == EXIT_FATAL and "no langfuse record named 'reviewed_failure'" in " ".join(res.output.split())
    assert "masprism_failure_attribution=failure_source" not in res.output  # other names listed by name
    assert not (tmp_path / "q.json").exists()

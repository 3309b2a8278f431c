"""Issue 51 item 7: a zero-training verdict no symptom points to says so (`verdict_by` no_symptom:<rule>, the
report and `show` name it) with a random pick's confidence; its step and agent stay what the rule chose."""

import pyarrow.dataset as ds
from typer.testing import CliRunner

from masprism_batch.cli import app
from masprism_batch.verdict import decide

runner = CliRunner()


def _attribute(logs, out):
    res = runner.invoke(app, ["attribute", str(logs), "-o", str(out), "--model", "tiny-random", "--no-progress",
                              "--all-runs"])
    assert res.exit_code in (0, 3), res.output
    return {r["trace_id"]: r for r in ds.dataset(str(out / "attributions")).to_table().to_pylist()}


def test_a_verdict_without_symptom_says_so_and_keeps_its_step(tmp_path, monkeypatch):
    from pathlib import Path

    logs = Path(__file__).resolve().parents[1] / "data" / "formats"
    labelled = _attribute(logs, tmp_path / "A")
    monkeypatch.setattr(decide, "_no_symptom", lambda base, order: False)  # the verdicts as before the label
    before = _attribute(logs, tmp_path / "B")
    assert labelled.keys() == before.keys()
    flagged = 0
    for tid, a in labelled.items():
        b = before[tid]
        assert (a["pred_step"], a["pred_agent"]) == (b["pred_step"], b["pred_agent"]), tid
        top = next(c for c in a["candidates"] if c["step"] == a["pred_step"])
        if a["verdict_by"].startswith("no_symptom:"):
            flagged += 1
            assert not top["symptoms"] and a["verdict_by"] == "no_symptom:" + b["verdict_by"].split(":", 1)[1]
            assert a["confidence"] == 1.0 / a["n_steps"]
        else:
            assert a["verdict_by"] == b["verdict_by"] and top["symptoms"], tid
    assert flagged, "no verdict without symptom in this sample: the test checks nothing"
    res = runner.invoke(app, ["show", str(tmp_path / "A"), "--limit", "0"])
    assert "no_symptom:" in res.output

"""What the report's numbers mean: in-sample accuracy for the packaged ranker weights (`fitted_on`), the errors
panel naming files and reasons, the roll-up across sources, names never clipped, `--trace` ids checked."""

from __future__ import annotations

import hashlib
import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from analytics_synth import random_specs, write_outdir

from masprism_batch.analytics import AnalyticsInputError, build_report, compute_stats, insample
from masprism_batch.analytics.insample import InSample, fitted_prefixes


def _sha(t: str, n: int = 16) -> str:
    return hashlib.sha256(t.encode()).hexdigest()[:n]


def _as_ranked(outdir):
    for p in (outdir / "attributions").glob("*.parquet"):
        t = pq.read_table(p)
        pq.write_table(t.set_column(t.schema.get_field_index("method"), "method",
                                    pa.array(["ranked"] * t.num_rows)), p)


def test_fitted_on_loader(tmp_path):
    w = tmp_path / "w"
    w.mkdir()
    (w / "ranker-chat.json").write_text(json.dumps({"features": [], "weights": []}))
    fitted_prefixes.cache_clear()
    assert InSample(str(w)).known is False and InSample(str(w))("a") is None
    (w / "ranker.json").write_text(json.dumps({"features": [], "fitted_on": [_sha("a"), _sha("b", 8)]}))
    (w / "ranker-spans.json").write_text(json.dumps({"fitted_on": {"trail": [_sha("c", 64)]}}))
    fitted_prefixes.cache_clear()
    f = InSample(str(w))
    assert f.known and f("a") and f("b") and f("c") and not f("d")


def test_accuracy_says_whether_it_is_in_sample(tmp_path, rng, monkeypatch):
    specs = [sp for sp in random_specs(rng, 30) if sp["labels"] and sp["ranked"]]
    out = write_outdir(tmp_path / "o", specs)
    w = tmp_path / "weights"
    w.mkdir()
    monkeypatch.setattr(insample, "weights_dir", lambda: w)
    # faithful method: nothing is in-sample
    fitted_prefixes.cache_clear()
    acc = compute_stats(out)["accuracy"].to_pylist()
    assert acc and {r["sample"] for r in acc} == {"n/a: faithful method"}
    _as_ranked(out)
    # ranked, no list shipped: unknown (and the report says where the held-out figures are)
    fitted_prefixes.cache_clear()
    acc = compute_stats(out)["accuracy"].to_pylist()
    assert {r["sample"] for r in acc} == {"unknown"} and all(r["n_in_sample"] is None for r in acc)
    # ranked, every scored trace listed: in-sample
    (w / "ranker-chat.json").write_text(json.dumps({"fitted_on": [_sha(sp["trace_id"]) for sp in specs]}))
    fitted_prefixes.cache_clear()
    st = compute_stats(out)
    acc = st["accuracy"].to_pylist()
    assert {r["sample"] for r in acc} == {"in-sample"} and all(r["n_in_sample"] > 0 for r in acc)
    build_report(out, tmp_path / "r.html")
    html = (tmp_path / "r.html").read_text()
    assert "in-sample: all" in html and "optimistic" in html and "in-sample for the packaged weights?" in html
    fitted_prefixes.cache_clear()


def test_a_zero_training_verdict_is_held_out_wherever_its_log_came_from(tmp_path, rng, monkeypatch):
    """The demo's dev logs, attributed by the rule: no label was read, so stats must not call the figure
    in-sample "for the packaged ranker weights" (the packaged rankers apply only when named)."""
    specs = [sp for sp in random_specs(rng, 30) if sp["labels"] and sp["ranked"]]
    for sp in specs:
        sp["verdict_by"] = "rule:faithful"
    specs[0]["verdict_by"] = "ranker:who-and-when/x"  # one packaged-ranker verdict: partly in-sample
    out = write_outdir(tmp_path / "o", specs)
    _as_ranked(out)
    w = tmp_path / "weights"
    w.mkdir()
    (w / "ranker-chat.json").write_text(json.dumps({"fitted_on": [_sha(sp["trace_id"]) for sp in specs]}))
    monkeypatch.setattr(insample, "weights_dir", lambda: w)
    fitted_prefixes.cache_clear()
    acc = compute_stats(out)["accuracy"].to_pylist()
    by_source = {r["source"]: r["n_in_sample"] for r in acc}
    src0 = specs[0]["source"]
    assert by_source[src0] == 1 and all(v == 0 for s, v in by_source.items() if s != src0), by_source
    fitted_prefixes.cache_clear()


def test_errors_panel_rollup_and_unclipped_names(tmp_path, rng):
    specs = random_specs(rng, 12)
    long_agent = "ResearchCoordinatorAgentWithAVeryLongName_v2.specialist"
    for sp in specs:
        for s in sp["steps"]:
            s["agent"] = long_agent
    errors = [{"input_path": f"/logs/day{i}/run-{i}.json", "record_id": f"line {i}", "stage": "ingest",
               "reason": "invalid_json", "message": f"invalid JSON: Expecting value: line {i}", "time": None}
              for i in range(3)]
    out = write_outdir(tmp_path / "o", specs, errors=errors)
    build_report(out, tmp_path / "r.html")
    html = (tmp_path / "r.html").read_text()
    overview = html.split('id="drilldown"')[0]
    for e in errors:
        assert e["input_path"] in overview and e["record_id"] in overview
    assert "invalid_json" in overview and "Files and records (3 of 3)" in overview
    assert "Roll-up across sources" in overview and "all sources" in overview
    # the long agent name is in the chart whole (wrapped over tspans), never cut with an ellipsis
    svg_text = "".join(re.findall(r"<tspan[^>]*>([^<]*)</tspan>", overview))
    assert long_agent in svg_text.replace(" ", "") and "ResearchCoordinatorAgentWithAVe…" not in overview


def test_report_trace_ids_are_checked_when_strict(tmp_path, rng):
    specs = random_specs(rng, 5)
    out = write_outdir(tmp_path / "o", specs)
    with pytest.raises(AnalyticsInputError, match="no-such-id"):
        build_report(out, tmp_path / "r.html", include=["no-such-id"], strict_include=True)
    assert not (tmp_path / "r.html").exists()
    build_report(out, tmp_path / "r.html", include=[specs[0]["trace_id"]], strict_include=True)

"""The failure kind on every dashboard output: stats tables, the report's first section and its links, the
Phoenix and OTel exports (the kind as the annotation label) -- from one tiny-random run."""

import importlib
import json
import re

import pyarrow.dataset as ds
import pytest
from typer.testing import CliRunner

from masprism_batch.analytics import report, stats
from masprism_batch.cli import EXIT_OK, app
from masprism_batch.trace import Step, Trace

export = importlib.import_module("masprism_batch.analytics.export")
TEXT = ["Plan: search the file and sum the values.", "Tool: python\nInput: total(xs)",
        "Traceback: NameError: name 'xs' is not defined", "Tool: web_search\nInput: total(xs)",
        "Error: HTTP 404 not found", "The answer is 41."]


@pytest.fixture(scope="module")
def outdir(tmp_path_factory):
    base = tmp_path_factory.mktemp("kinds")
    traces = [Trace(trace_id=f"t{j}", source="jsonl", system="toy" if j % 2 else "other",
                    steps=[Step(index=i, agent="AB"[(i + j) % 2], role="assistant", content=c, span_id=f"{i + 1:016x}")
                           for i, c in enumerate(TEXT[j % 3:] + TEXT[:j % 3])]) for j in range(5)]
    src = base / "in.jsonl"
    src.write_text("".join(json.dumps(t.to_row(), default=str) + "\n" for t in traces), encoding="utf-8")
    res = CliRunner().invoke(app, ["attribute", str(src), "-o", str(base / "out"), "--model", "tiny-random",
                                   "--progress-interval", "0", "--taxonomy", "trail"])
    assert res.exit_code == EXIT_OK, res.output
    return base / "out"


def _atts(outdir):
    return {a["trace_id"]: a for a in ds.dataset(str(outdir / "attributions")).to_table().to_pylist()}


def test_stats_tables_count_every_verdict(outdir):
    t = stats.compute_stats(outdir)
    atts = _atts(outdir)
    cats = t["failure_categories"].to_pylist()
    assert sum(r["n_traces"] for r in cats) == len(atts) == 5
    for src, sysm in {(r["source"], r["system"]) for r in cats}:
        assert sum(r["share"] for r in cats if (r["source"], r["system"]) == (src, sysm)) == pytest.approx(1)
    want = {}
    for a in atts.values():
        want[(a["system"], a["category"])] = want.get((a["system"], a["category"]), 0) + 1
    assert {(r["system"], r["category"]): r["n_traces"] for r in cats} == want
    by = t["categories_by"].to_pylist()
    for dim in ("agent", "day"):
        assert sum(r["n_traces"] for r in by if r["dimension"] == dim) == 5
    agent = {(r["value"], r["category"]): r["n_traces"] for r in by if r["dimension"] == "agent"}
    for a in atts.values():
        assert agent[(a["pred_agent"], a["category"])] >= 1


def test_report_opens_with_what_fails_most(outdir, tmp_path):
    out = tmp_path / "r.html"
    report.build_report(outdir, out)
    html = out.read_text(encoding="utf-8")
    assert html.index('id="what-fails-most"') < html.index('id="overview"')
    section = html[html.index('id="what-fails-most"'):html.index('id="overview"')]
    atts = _atts(outdir)
    for cat in {a["category"] for a in atts.values()}:
        assert f"<td>{cat}</td>" in section
    data = json.loads(re.search(r'id="report-data">(.*?)</script>', html, re.S).group(1))
    ids = [p["id"] for p in data["traces"]]
    links = re.findall(r'href="#t=(\d+)">([^<]+)</a>', section)
    assert links, "no example trace linked"
    for idx, tid in links:  # each link opens the trace it names, whose kind is the row's
        assert ids[int(idx)] == tid and data["traces"][int(idx)]["cat"] == atts[tid]["category"]


def test_exports_carry_the_kind_as_label(outdir, tmp_path):
    atts = _atts(outdir)
    by_target = export.phoenix_rows(outdir)  # every blamed step here has a span id: all are span annotations
    assert not by_target["traces"]
    rows = [r for r in by_target["spans"] if r["name"] == export.CATEGORY_ANNOTATION]
    assert len(rows) == 5
    verdict = {r["metadata"]["trace_id"]: r for r in by_target["spans"] if r["name"] == export.ANNOTATION_NAME}
    for r in rows:
        a = atts[r["metadata"]["trace_id"]]
        assert r["label"] == a["category"] and r["score"] == pytest.approx(a["category_confidence"])
        assert r["span_id"] == verdict[a["trace_id"]]["span_id"]  # on the blamed span, beside the verdict
    kinds = []
    for rec in export.otel_records(outdir):
        attrs = {kv["key"]: next(iter(kv["value"].values())) for kv in rec["attributes"]}
        if attrs["gen_ai.evaluation.name"] == export.CATEGORY_ANNOTATION:
            kinds.append(attrs)
            assert attrs["gen_ai.evaluation.score.label"] == atts[attrs["masprism.trace_id"]]["category"]
    assert len(kinds) == 5

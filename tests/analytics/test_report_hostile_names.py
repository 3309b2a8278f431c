"""Issue 27 items 6 and 9 (report side): a run with no attribution row yet, and agent names that hold NUL,
bidirectional controls (U+202E) or lone surrogates, which must never reach the SVG/HTML text raw."""

from __future__ import annotations

import re

import pyarrow.parquet as pq
from analytics_synth import write_outdir
from typer.testing import CliRunner

from masprism_batch import schema
from masprism_batch.analytics import svg
from masprism_batch.cli import app

RAW = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def test_report_on_a_run_with_no_attribution_row(tmp_path):
    """Mid-run before the first commit, or a run whose every trace was rejected: an empty attributions/ part."""
    out = tmp_path / "out"
    for name in ("attributions", "step_scores", "traces"):
        (out / name).mkdir(parents=True)
        pq.write_table(schema.TABLES[name].empty_table(), out / name / "part-0.parquet")
    res = CliRunner().invoke(app, ["report", str(out), "-o", str(tmp_path / "r.html")])
    assert res.exit_code == 0, res.output
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "0 traces" in html or ">0<" in html


def test_agent_names_with_nul_and_bidi_controls_are_shown_escaped(tmp_path):
    evil = ["plan\x00ner", "coder\u202etxt.exe", "web\u2066x\u2069"]
    specs = [{"trace_id": f"t{i}", "source": "fake", "system": "s", "labels": None,
              "steps": [{"agent": evil[(i + k) % 3], "content": f"step {k} error"} for k in range(4)],
              "ranked": [i % 4, (i + 1) % 4], "scores": [0.9, 0.1], "symptoms": [3], "nll": [1.0, 2.0, 3.0, 4.0],
              "day_offset": 0} for i in range(6)]
    out = write_outdir(tmp_path / "out", specs)
    res = CliRunner().invoke(app, ["report", str(out), "-o", str(tmp_path / "r.html")])
    assert res.exit_code == 0, res.output
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    svgs = re.findall(r"<svg.*?</svg>", html, flags=re.S)
    assert svgs, "the report has no chart"
    for s in svgs:
        assert not RAW.search(s), f"a raw control character in the SVG: {RAW.search(s)!r}"
    assert "coder\\u202Etxt.exe" in html  # shown, visibly, not dropped
    # the drill-down's JSON payload (report_data, rendered by script as text) is checked by its own tests
    text = re.sub(r"<script.*?</script>", "", html, flags=re.S)
    assert not RAW.search(text), f"a raw control character in the report's HTML: {RAW.search(text)!r}"


def test_escape_makes_controls_and_surrogates_visible():
    assert svg.escape("a\x00<b>\u202e\ud800") == "a\\u0000&lt;b&gt;\\u202E\\uD800"
    assert svg.escape("tab\tnew\nline é") == "tab\tnew\nline é"

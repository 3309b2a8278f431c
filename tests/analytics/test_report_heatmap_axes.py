"""The drill-down heatmap has axis titles and step numbers: report.js run under Node with a minimal DOM stub
(skipped without `node`; the Chromium tests in test_analytics_report_browser.py cover the real page)."""

from __future__ import annotations

import shutil

import pytest
from analytics_synth import random_specs, write_outdir
from report_js_dom import run_page

from masprism_batch.analytics import build_report

TAIL = r"""
console.log(JSON.stringify(drawn));
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="node not installed")
def test_heatmap_draws_axis_titles_and_step_numbers(tmp_path, rng):
    specs = random_specs(rng, 3)
    for sp in specs:  # 12 steps each, so the first trace shown has a heatmap with numbered axes
        sp["steps"] = (sp["steps"] * 13)[:12]
        sp["nll"] = (sp["nll"] * 13)[:12]
        sp["nll2"] = None
        sp["symptoms"] = [s for s in sp["symptoms"] if s < 12]
        sp["ranked"], sp["scores"] = [0], [1.0]
    write_outdir(tmp_path / "o", specs)
    build_report(tmp_path / "o", tmp_path / "r.html")
    html = (tmp_path / "r.html").read_text()
    drawn = run_page(html, TAIL, tmp_path)
    assert "attended step j →" in drawn and "attending step i →" in drawn
    assert {str(i) for i in range(12)} <= set(drawn)  # every step numbered on the axes (cells are large here)

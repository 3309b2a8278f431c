"""Issue 60, item 6, report side: without failure kinds the report opens with "Where blame falls" (blamed agents
and positions, confident vs not; it opened with an empty "What fails most" holding one "uncategorised 100%"
row), and the trace list opens sorted by confidence, most confident first (it was log order)."""

from __future__ import annotations

import re
import shutil

import pytest
from analytics_synth import hand_specs, write_outdir
from report_js_dom import run_page

from masprism_batch.analytics import build_report


def _specs():
    specs = hand_specs()  # h1: B at step 1 of 4, h2: A at step 2 of 3, h3: C at 0 of 2, s1: B at 1 of 4
    for sp, conf in zip(specs, [0.8, 0.3, None, 0.65], strict=True):
        sp["confidence"] = conf
    return specs


def test_without_kinds_the_report_opens_with_where_blame_falls(tmp_path):
    write_outdir(tmp_path / "o", _specs())
    build_report(tmp_path / "o", tmp_path / "r.html")
    html = (tmp_path / "r.html").read_text()
    assert 'id="what-fails-most"' not in html and "uncategorised" not in html
    start = html.index('id="where-blame-falls"')
    assert start < html.index('id="overview"')
    section = re.sub(r"<[^>]+>", " ", html[start:html.index('id="overview"')])
    words = " ".join(section.split())
    assert "4 attributed failures. 2 verdicts (50%) are confident" in words
    assert "1 are not, 1 have no confidence" in words
    # blamed agents (hand_specs' pred steps: h1 step 1 = B, h2 step 2 = B, h3 step 0 = C, s1 step 1 = B):
    # B in ww twice (0.8, 0.3), B in tr once (0.65), C in ww once (none); positions by thirds of each log
    assert "B ww 2 50% 1 (50%) 0.55" in words and "B tr 1 25% 1 (100%) 0.65" in words and "C ww 1 25% 0 (0%) -" in words
    assert "first third 1 25% 0 (0%) -" in words and "middle third 2 50% 2 (100%) 0.73" in words
    assert "last third 1 25% 0 (0%) 0.30" in words


TAIL = r"""
console.log(JSON.stringify(els['#trace-list tbody'].children.map((tr) => tr.children[0]._t)));
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="node not installed")
def test_the_trace_list_opens_most_confident_first(tmp_path):
    write_outdir(tmp_path / "o", _specs())
    build_report(tmp_path / "o", tmp_path / "r.html")
    html = (tmp_path / "r.html").read_text()
    assert run_page(html, TAIL, tmp_path) == ["h1", "s1", "h2", "h3"]  # 0.8, 0.65, 0.3, none

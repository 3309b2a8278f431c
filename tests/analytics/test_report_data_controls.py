"""Issue 27 item 9, drill-down side: every string of a trace that reaches the report -- the SVG/HTML overview and
the drill-down JSON that report.js shows as text -- has its bidirectional controls (U+202A-U+202E, U+2066-U+2069,
U+200E/U+200F, U+061C), NUL and other controls replaced by a visible \\uXXXX escape (svg.visible), the rest of the
text kept."""

from __future__ import annotations

import json
import re

from analytics_synth import write_outdir
from typer.testing import CliRunner

from masprism_batch.analytics.report_data import mark_bidi
from masprism_batch.cli import app

BAD = "\x00\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
RAW = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f" + BAD[1:] + "]")


def _strings(x):
    if isinstance(x, str):
        yield x
    elif isinstance(x, dict):
        for k, v in x.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(x, list):
        for v in x:
            yield from _strings(v)


def test_every_trace_string_in_the_report_file_is_neutralised(tmp_path):
    agents = ["plan\x00ner", "coder\u202etxt.exe", "web\u2066x\u2069", "rtl\u200f\u061cmark\u200e",
              "emb\u202a\u202b\u202c\u202dded", "iso\u2067\u2068late"]
    specs = []
    for i in range(4):
        steps = [{"agent": agents[(i + k) % len(agents)], "kind": "tool\u202e",
                  "content": f"step {k} said {BAD[k % len(BAD)]}error{BAD[(k + 5) % len(BAD)]} here",
                  "span_id": f"span{k}\u2066{i}"} for k in range(6)]
        specs.append({"trace_id": f"t{i}\u202efdp.exe", "source": "src\u2067A", "system": "sys\x00S",
                      "question": "what\u202e is\x00 it?", "steps": steps,
                      "labels": {"mistake_step": None, "mistake_agent": agents[i] + "\u202e",
                                 "error_locations": [steps[2]["span_id"]], "error_impacts": ["HIGH"],
                                 "error_categories": ["x"]},
                      "ranked": [2, 0, 4], "scores": [0.9, 0.5, 0.1], "symptoms": [5], "nll": [1.0] * 6,
                      "day_offset": 0})
    out = write_outdir(tmp_path / "out", specs)
    res = CliRunner().invoke(app, ["report", str(out), "-o", str(tmp_path / "r.html")])
    assert res.exit_code == 0, res.output
    html = (tmp_path / "r.html").read_text(encoding="utf-8")

    hit = RAW.search(html)
    assert not hit, f"raw {hit.group()!r} in the report file at {hit.start()}: {html[hit.start() - 60: hit.end() + 20]!r}"
    data = json.loads(re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html,
                                flags=re.S).group(1))
    assert len(data["traces"]) == 4
    for s in _strings(data):  # JSON's own \u0000 escapes come back as raw characters here: none may remain
        assert not RAW.search(s), f"a control character reaches report.js: {s!r}"

    # the visible text is kept, each control shown as its \uXXXX escape, in every field report.js shows
    t = next(t for t in data["traces"] if t["id"] == "t0\\u202Efdp.exe")
    assert (t["src"], t["sys"], t["q"]) == ("src\\u2067A", "sys\\u0000S", "what\\u202E is\\u0000 it?")
    assert t["pred"] == 2 and t["agent"] == t["pa"] == mark_bidi(agents[2]) == "web\\u2066x\\u2069"
    assert [c[2] for c in t["cands"]] == ["web\\u2066x\\u2069", "plan\\u0000ner", "emb\\u202A\\u202B\\u202C\\u202Dded"]
    assert t["gold"]["agent"] == "plan\\u0000ner\\u202E" and t["gold"]["locs"] == ["span2\\u20660"]
    assert t["steps"][1]["a"] == "coder\\u202Etxt.exe" and t["steps"][1]["k"] == "tool\\u202E"
    assert t["steps"][1]["t"] == "step 1 said \\u061Cerror\\u202C here" and t["steps"][1]["sp"] == "span1\\u20660"
    assert t["steps"][3]["a"] == "rtl\\u200F\\u061Cmark\\u200E"
    assert "coder\\u202Etxt.exe" in re.sub(r"<script.*?</script>", "", html, flags=re.S)  # the overview's charts


def test_mark_bidi_is_the_reports_one_neutraliser():
    from masprism_batch.analytics import svg

    for c in BAD:
        assert mark_bidi(f"a{c}b") == svg.visible(f"a{c}b") == f"a\\u{ord(c):04X}b"
    assert mark_bidi("tab\tnew\nline é") == "tab\tnew\nline é"
    assert mark_bidi(None) is None and mark_bidi(3) == 3

"""Red-team round on the report: ids and names a log controls must never steer what the report links or marks.

- "What fails most" links each kind's example traces to their drill-down (#t=<index>). The index was looked up by
  the payload's id, which is the id shown escaped (`mark_bidi`): a trace id holding a bidi control got no link, and
  a second log whose id is that escape's text (`t\\u202EA`, typed out) took the link of the first.
"""

from __future__ import annotations

import json
import re

from analytics_synth import write_outdir

from masprism_batch.analytics import build_report


def _spec(tid: str, kind: str, steps: list[dict] | None = None, **kw) -> dict:
    steps = steps or [{"agent": "A", "content": f"step {k}"} for k in range(3)]
    n = len(steps)
    return {"trace_id": tid, "source": "src", "system": "sys", "labels": None, "steps": steps,
            "ranked": [1, 0], "scores": [0.9, 0.1], "symptoms": [n - 1], "nll": [1.0] * n, "day_offset": 0,
            "category": kind, "category_family": "fam", "category_confidence": 0.9, **kw}


def _data(html: str) -> dict:
    return json.loads(re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html,
                                re.S).group(1))


def test_every_example_link_opens_its_own_trace_even_when_ids_look_alike_once_escaped(tmp_path):
    # the second id is the first's escaped form typed out: both show as t\u202EA
    specs = [_spec("t\u202eA", "alpha kind"), _spec("t\\u202EA", "beta kind"), _spec("plain", "gamma kind")]
    write_outdir(tmp_path / "o", specs)
    build_report(tmp_path / "o", tmp_path / "r.html")
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    data = _data(html)
    section = html[html.index('id="what-fails-most"'):html.index('id="overview"')]
    kinds = section[section.index('id="kinds"'):]
    rows = re.findall(r"<tr><td>([^<]*)</td>.*?</tr>", kinds[:kinds.index("</table>")], re.S)
    assert sorted(rows) == ["alpha kind", "beta kind", "gamma kind"], rows
    for kind in rows:
        row = re.search(rf"<tr><td>{kind}</td>(.*?)</tr>", section, re.S).group(1)
        links = re.findall(r'href="#t=(\d+)"', row)
        assert len(links) == 1, (kind, row)  # every example trace is in the drill-down: linked
        assert data["traces"][int(links[0])]["cat"] == kind, (kind, data["traces"][int(links[0])]["id"])

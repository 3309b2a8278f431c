"""Red-team round on the report: ids and names a log controls must never steer what the report links or marks.

- "What fails most" links each kind's example traces to their drill-down (#t=<index>). The index was looked up by
  the payload's id, which is the id shown escaped (`mark_bidi`): a trace id holding a bidi control got no link, and
  a second log whose id is that escape's text (`t\\u202EA`, typed out) took the link of the first.
"""

from __future__ import annotations

import json
import re

from analytics_synth import write_outdir
from report_js_dom import run_page

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


TAIL = r"""
// the opened trace's step table: per step, the badges its text cell carries
const steps = els['detail'].children.find((c) => c.className === 'steps');
console.log(JSON.stringify(steps.children.map((tr) => tr.children[3].children
  .filter((c) => (c.className || '').startsWith('badge')).map((c) => c._t))));
"""


def _badges(tmp_path, html: str) -> list[list[str]]:
    import shutil

    import pytest

    if shutil.which("node") is None:
        pytest.skip("node not installed: the drill-down script is run in node")
    return run_page(html, TAIL, tmp_path)


def test_a_span_id_named_like_an_object_property_is_not_marked_labelled(tmp_path):
    """The labelled spans were looked up in a plain object: a step whose span id is `constructor`, `toString` or
    `__proto__` found Object's own member there and was badged "labelled" (a gold label the data never gave)."""
    names = ["constructor", "toString", "__proto__", "hasOwnProperty", "gold-span"]
    steps = [{"agent": "A", "content": f"step {k}", "span_id": sp} for k, sp in enumerate(names)]
    labels = {"mistake_step": None, "mistake_agent": None, "error_locations": ["gold-span"],
              "error_impacts": ["HIGH"], "error_categories": ["x"]}
    write_outdir(tmp_path / "o", [_spec("t1", "k", steps=steps, labels=labels)])
    build_report(tmp_path / "o", tmp_path / "r.html")
    badges = _badges(tmp_path, (tmp_path / "r.html").read_text(encoding="utf-8"))
    assert [("labelled" in b) for b in badges] == [False, False, False, False, True], badges


def test_one_trace_past_the_byte_budget_costs_its_own_place_only(tmp_path):
    """The drill-down stopped at the first trace that did not fit its byte budget: one log of many steps whose
    names are all escapes (each control shown as six characters), first in the sample (asked for, or an id whose
    hash sorts first), left every later trace out, the one a user asked for with --trace too. It is skipped
    alone; the traces after it still fill the budget."""
    from masprism_batch.analytics.report_data import DrillLimits

    big = [{"agent": "\x01" * 200, "content": "\x02" * 200} for _ in range(300)]
    specs = [_spec("big", "k", steps=big), *(_spec(f"small{i}", "k") for i in range(4))]
    write_outdir(tmp_path / "o", specs)
    lim = DrillLimits(max_traces=10, budget_bytes=60_000)
    s = build_report(tmp_path / "o", tmp_path / "r.html", lim, include=["big", "small3"])
    ids = [t["id"] for t in _data((tmp_path / "r.html").read_text(encoding="utf-8"))["traces"]]
    assert "big" not in ids and sorted(ids) == ["small0", "small1", "small2", "small3"], ids
    assert ids[0] == "small3" and s["drilldown"] == 4  # the one asked for keeps its place first


HIDDEN = "\u200b\u200c\u200d\u2060\ufeff\u00ad\U000e0041\u180e"  # zero widths, BOM, soft hyphen, tag A


def test_zero_width_and_other_format_characters_are_shown_in_the_report_as_in_the_terminal(tmp_path):
    """The report made visible controls and bidi controls only: an agent `Plan\\u200bner` (a zero width space)
    drew a second bar labelled as `Planner`, and a trace id holding U+FEFF or a tag character listed as another,
    where `show` prints each such character escaped (schema.terminal: Unicode Cf). The report escapes them too."""
    import unicodedata

    steps = [{"agent": ["Planner", "Plan\u200bner", f"Coder{HIDDEN}"][k % 3], "content": f"step{HIDDEN}{k}"}
             for k in range(4)]
    specs = [_spec(tid, "k", steps=steps, question=f"what{HIDDEN}?") for tid in ("abc", "a\u200bbc", "\ufeffabc")]
    write_outdir(tmp_path / "o", specs)
    build_report(tmp_path / "o", tmp_path / "r.html")
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    raw = [c for c in set(html) if unicodedata.category(c) == "Cf"]
    assert not raw, [hex(ord(c)) for c in raw]
    data = _data(html)
    shown = json.dumps(data, ensure_ascii=False)  # the JSON's own escapes read back as characters
    assert not [c for c in set(shown) if unicodedata.category(c) == "Cf"]
    assert sorted(t["id"] for t in data["traces"]) == ["\\uFEFFabc", "a\\u200Bbc", "abc"]
    assert "Plan\\u200Bner" in html and "\\U000E0041" in html



def test_report_trace_takes_the_id_as_the_terminal_shows_it(tmp_path):
    """`report --trace ID` with the id copied from `show`'s listing (a zero width shown `\\u200b`) puts that trace
    in the drill-down (it was "not in attributions/"); text two ids show as is refused, naming both."""
    import pytest

    from masprism_batch.analytics import AnalyticsInputError

    write_outdir(tmp_path / "o", [_spec("x\u200by", "k"), _spec("t\u202eA", "k"), _spec("t\\u202eA", "k"),
                                  *(_spec(f"p{i}", "k") for i in range(5))])
    from masprism_batch.analytics.report_data import DrillLimits

    build_report(tmp_path / "o", tmp_path / "r.html", DrillLimits(max_traces=1), include=["x\\u200by"],
                 strict_include=True)
    assert _data((tmp_path / "r.html").read_text(encoding="utf-8"))["traces"][0]["id"] == "x\\u200By"  # asked first
    with pytest.raises(AnalyticsInputError, match="2 traces show as"):
        build_report(tmp_path / "o", tmp_path / "r2.html", include=["t\\u202eA"], strict_include=True)


def _section_sizes(html: str) -> tuple[str, str, str]:
    days = re.search(r'<svg[^>]*>(?:(?!</svg>).)*Attributed failures per (?:(?!</svg>).)*</svg>', html, re.S)
    trend = re.search(r"<h3>Trend across run dates[^<]*</h3>(<table.*?</table>)", html, re.S)
    rollup = re.search(r"<h3>Roll-up across sources</h3>(<table.*?</table>)", html, re.S)
    return days.group() if days else "", trend.group(0) if trend else "", rollup.group(1)


def test_the_overview_stays_bounded_whatever_the_logs_dates_and_system_names(tmp_path):
    """The overview grew with every distinct day a log's start time names (a bar per day, a trend column per day)
    and every distinct system name (all listed in one roll-up cell): logs with a start time each in another year
    and a system name each made the report grow past its ~15 MB bound at 100,000 traces (150 bytes a day, up to
    256 a name). Past a year of days the chart and trend count by month, then by year (the latest 366 at most);
    the roll-up names the 10 systems with most traces and counts the rest. Every failed run is still counted."""
    n = 400
    specs = [_spec(f"t{i}", f"kind{i % 2}", system=f"system-{i:04d}", day_offset=i * 300) for i in range(n)]
    write_outdir(tmp_path / "o", specs)
    build_report(tmp_path / "o", tmp_path / "r.html")
    days, trend, rollup = _section_sizes((tmp_path / "r.html").read_text(encoding="utf-8"))
    bars = re.findall(r"<title>([^<]*): ([\d,]+)</title>", days)
    assert "per year" in days and 1 < len(bars) <= 366, (len(bars), days[:300])
    assert sum(int(v.replace(",", "")) for _, v in bars) == n  # 400 runs over 329 years: every one counted
    assert re.fullmatch(r"\d{4}", bars[0][0]) and "per year" in trend and trend.count("<th>") <= 367
    assert rollup.count("system-") == 10 and "390 more" in rollup, rollup[:600]


def test_a_run_within_a_year_keeps_its_days(tmp_path):
    specs = [_spec(f"t{i}", "k", day_offset=i) for i in range(30)]
    write_outdir(tmp_path / "o", specs)
    build_report(tmp_path / "o", tmp_path / "r.html")
    days, _, rollup = _section_sizes((tmp_path / "r.html").read_text(encoding="utf-8"))
    bars = re.findall(r"<title>([^<]*): ([\d,]+)</title>", days)
    assert "per day" in days and len(bars) == 30 and bars[0][0] == "2026-11-20"
    assert "more" not in rollup


def test_the_overview_breaks_out_the_sources_with_most_traces_only(tmp_path):
    """A JSON-lines log names its own `source`: one per log drew five charts per log in the overview (about 4 kB
    each log: 400 MB at 100,000 logs), a roll-up row and accuracy rows each. The overview breaks out the 20 sources
    with most traces; the others are counted in one roll-up row, and the total still covers every trace."""
    labels = {"mistake_step": 1, "mistake_agent": "A"}
    specs = [_spec(f"big{i}", "k", source="main", labels=labels) for i in range(5)]
    specs += [_spec(f"t{i}", "k", source=f"src-{i:03d}", labels=labels) for i in range(60)]
    write_outdir(tmp_path / "o", specs)
    s = build_report(tmp_path / "o", tmp_path / "r.html")
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    overview = html[html.index('id="overview"'):html.index('id="drilldown"')]
    heads = re.findall(r'<section class="source"><h3>Source: ([^<]*)</h3>', overview)
    assert len(heads) == 20 and heads[0] == "main", heads  # the most traces first... then by name
    rollup = _section_sizes(html)[2]
    assert "41 other sources" in rollup and re.search(r"<td>all sources</td><td>65</td>", rollup), rollup[-800:]
    acc = overview[overview.index("Accuracy where labels exist"):]
    assert len(set(re.findall(r"src-\d{3}", acc[:acc.index("</table>")]))) <= 19
    assert s["traces"] == 65

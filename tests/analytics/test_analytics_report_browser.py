"""The report in a real headless Chromium: loads offline with no console errors, key elements visible,
drill-down works, and hostile trace data renders as inert text (XSS)."""

import os
import random
from pathlib import Path

import pytest
from analytics_synth import random_specs, write_outdir

from masprism_batch.analytics.report import build_report
from masprism_batch.analytics.report_data import DrillLimits

pytestmark = pytest.mark.browser

# Each payload, if it ever ran, would set window.__xss to its own number.
PAYLOADS = [
    "<script>window.__xss=1</script>",
    '"><img src=x onerror="window.__xss=2">',
    "</textarea><script>window.__xss=3</script>",
    "</script><script>window.__xss=4</script>",
    "javascript:window.__xss=5",
    '{{constructor.constructor("window.__xss=6")()}}',
    "${window.__xss=7}",
    "<svg onload=window.__xss=8>",
    "\u2028\u2029<!-- <iframe srcdoc='<script>parent.__xss=9</script>'>",
    "&lt;b&gt;entity&amp;",
]


def _open(drv, path: Path):
    drv.get(path.resolve().as_uri())
    assert drv.execute_script("return document.body.getAttribute('data-ready')") == "1", "report JS did not finish"


def _errors(drv) -> list:
    return [e for e in drv.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]


def _artifacts(tmp_path: Path) -> Path:
    d = Path(os.environ.get("MASPRISM_ARTIFACTS", tmp_path))
    d.mkdir(parents=True, exist_ok=True)
    return d


def test_report_loads_offline_without_errors(browser, tmp_path, rng):
    specs = random_specs(rng, rng.randint(30, 70)) + random_specs(rng, rng.randint(3, 8), spans=True)
    for i, sp in enumerate(specs):
        sp["trace_id"] += f"-{i}"
    write_outdir(tmp_path / "o", specs)
    build_report(tmp_path / "o", tmp_path / "r.html")
    browser.get_log("browser")  # drop anything from earlier pages
    _open(browser, tmp_path / "r.html")
    for sel in ("#overview svg.chart", "#trace-list tbody tr", "#detail canvas", "#detail table.steps",
                "#detail h3"):
        assert browser.find_element("css selector", sel).is_displayed(), sel
    rows = browser.find_elements("css selector", "#trace-list tbody tr")
    assert len(rows) == min(25, len(specs))
    browser.find_element("id", "next").click()
    pick = browser.find_elements("css selector", "#trace-list tbody tr")[0]
    tid = pick.find_element("css selector", "td.id").text
    pick.click()
    assert browser.find_element("css selector", "#detail h3").text == tid
    n = next(len(sp["steps"]) for sp in specs if sp["trace_id"] == tid)
    assert len(browser.find_elements("css selector", "#detail table.steps tr")) == n
    browser.find_element("id", "filter").send_keys(specs[-1]["trace_id"])
    assert len(browser.find_elements("css selector", "#trace-list tbody tr")) == 1
    shot = _artifacts(tmp_path) / "report.png"
    browser.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert _errors(browser) == []


def _hostile_outdir(out: Path) -> tuple[Path, list[dict]]:
    rng = random.Random(7)
    specs = random_specs(rng, len(PAYLOADS))
    for i, (sp, p) in enumerate(zip(specs, PAYLOADS, strict=True)):
        sp["trace_id"] = f"{p}#{i}"
        sp["source"], sp["system"], sp["question"] = p, p, p
        for s in sp["steps"]:
            s["agent"], s["content"] = p, f"before {p} after"
        if sp["labels"]:
            sp["labels"]["mistake_agent"] = p
    return write_outdir(out, specs), specs


@pytest.mark.parametrize("csp", [True, False], ids=["with-csp", "escaping-alone"])
def test_hostile_trace_data_renders_as_inert_text(browser, tmp_path, csp):
    """With the CSP off too, so the escaping is tested on its own (the CSP would hide an escaping bug)."""
    outdir, specs = _hostile_outdir(tmp_path / "o")
    build_report(outdir, tmp_path / "r.html", DrillLimits(max_traces=50), csp=csp)
    browser.get_log("browser")
    _open(browser, tmp_path / "r.html")
    rows = browser.find_elements("css selector", "#trace-list tbody tr")
    assert len(rows) == len(PAYLOADS)
    shown = set()
    for i in range(len(rows)):
        browser.find_elements("css selector", "#trace-list tbody tr")[i].click()
        shown.add(browser.execute_script("return document.querySelector('#detail h3').textContent"))
        text = browser.execute_script("return document.getElementById('detail').textContent")
        tid = browser.execute_script("return document.querySelector('#detail h3').textContent")
        payload = tid.rsplit("#", 1)[0]
        assert f"before {payload} after" in text  # shown literally, not parsed
    assert shown == {sp["trace_id"] for sp in specs}
    browser.find_element("id", "filter").send_keys(PAYLOADS[0])
    overview = browser.find_element("id", "overview").text
    assert "{{constructor" in overview and "${window.__xss=7}" in overview
    assert browser.execute_script("return window.__xss") is None
    assert browser.execute_script("return document.querySelectorAll('script').length") == 2
    assert browser.execute_script("return document.querySelectorAll('img, iframe, [onerror], [onload]').length") == 0
    assert browser.execute_script("return document.querySelectorAll('a[href^=\"javascript\"]').length") == 0
    assert _errors(browser) == []


def test_detector_fires_on_a_real_injection(browser, tmp_path):
    """The flag check above can fail: the same payload, pasted unescaped into a page, does set it."""
    page = tmp_path / "bad.html"
    page.write_text(f"<!DOCTYPE html><html><body><p>{PAYLOADS[1]}</p><script>document.body.setAttribute("
                    "'data-ready','1')</script></body></html>")
    _open(browser, page)
    browser.implicitly_wait(0)
    assert browser.execute_script("return window.__xss") == 2
    browser.get_log("browser")


def test_empty_run_page_has_no_errors(browser, tmp_path):
    import pyarrow as pa

    from masprism_batch import schema
    from masprism_batch.outdir.parts import write_table_atomic

    write_table_atomic(pa.Table.from_pylist([], schema=schema.ATTRIBUTIONS), tmp_path / "o" / "attributions" / "p.parquet")
    build_report(tmp_path / "o", tmp_path / "r.html")
    browser.get_log("browser")
    _open(browser, tmp_path / "r.html")
    assert "0 traces" in browser.find_element("id", "page").text
    assert _errors(browser) == []

"""The report's "What fails most" section in a real headless Chromium (issue 49): it is the first section,
visible, and each example link opens the trace it names in the drill-down, which names the trace's kind."""

import json

import pyarrow.dataset as ds
import pytest
from typer.testing import CliRunner

from masprism_batch.analytics.report import build_report
from masprism_batch.cli import EXIT_OK, app
from masprism_batch.trace import Step, Trace

pytestmark = pytest.mark.browser
TEXT = ["Plan: search the file and sum the values.", "Tool: python\nInput: total(xs)",
        "Traceback: NameError: name 'xs' is not defined", "Error: HTTP 404 not found", "The answer is 41."]


def test_what_fails_most_in_a_browser(browser, tmp_path):
    # imported here: the `browser` fixture has skipped the test already where selenium is not installed
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    traces = [Trace(trace_id=f"kind-{j}", source="jsonl", system="toy",
                    steps=[Step(index=i, agent="AB"[(i + j) % 2], role="assistant", content=c)
                           for i, c in enumerate(TEXT[j % 3:] + TEXT[:j % 3])]) for j in range(4)]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(t.to_row(), default=str) + "\n" for t in traces), encoding="utf-8")
    res = CliRunner().invoke(app, ["attribute", str(src), "-o", str(tmp_path / "o"), "--model", "tiny-random",
                                   "--progress-interval", "0", "--taxonomy", "trail"])
    assert res.exit_code == EXIT_OK, res.output
    kinds = {a["trace_id"]: a["category"] for a in ds.dataset(str(tmp_path / "o" / "attributions")).to_table().to_pylist()}
    build_report(tmp_path / "o", tmp_path / "r.html")
    browser.get_log("browser")
    browser.get((tmp_path / "r.html").resolve().as_uri())
    assert browser.execute_script("return document.body.getAttribute('data-ready')") == "1"
    first = browser.find_element("id", "what-fails-most")
    assert first.is_displayed()
    assert first.location["y"] < browser.find_element("id", "overview").location["y"]
    assert browser.find_element("css selector", "#what-fails-most svg.chart").is_displayed()
    links = browser.find_elements("css selector", "#what-fails-most a.ex")
    assert links
    for i in range(min(3, len(links))):
        # found again each time: the drill-down re-renders the page's detail (a held element may go stale), and
        # the link sets location.hash, which the drill-down follows on the hashchange event, after click() returns
        link = browser.find_elements("css selector", "#what-fails-most a.ex")[i]
        tid = link.text
        link.click()
        WebDriverWait(browser, 5, ignored_exceptions=(StaleElementReferenceException,)).until(
            lambda b, tid=tid: b.find_element("css selector", "#detail h3").text == tid)
        h3 = browser.find_element("css selector", "#detail h3")
        assert h3.text == tid
        assert f"failure kind {kinds[tid]}" in browser.find_element("css selector", "#detail p").text
    assert not [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]

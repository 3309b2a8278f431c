"""End to end on the real labelled data with the tiny-random model (slow: runs the model on a few traces)."""

import pandas as pd
import pytest
from typer.testing import CliRunner

from masprism_batch.cli import app

pytestmark = pytest.mark.slow


def _cli(*args: str) -> None:
    res = CliRunner().invoke(app, list(args))
    assert res.exit_code in (0, 3), res.output  # 3: some inputs rejected (reported in errors/), still usable


@pytest.mark.browser
def test_attribute_stats_report_open_in_chromium(shared_data, browser, tmp_path):
    out = tmp_path / "OUT"
    _cli("attribute", str(shared_data / "who_and_when"), "-o", str(out), "--model", "tiny-random", "--limit", "6")
    _cli("stats", str(out))
    assert (out / "stats" / "accuracy.parquet").is_file()
    _cli("report", str(out), "-o", str(tmp_path / "report.html"))
    browser.get_log("browser")
    browser.get((tmp_path / "report.html").as_uri())
    assert browser.execute_script("return document.body.getAttribute('data-ready')") == "1"
    assert browser.find_element("css selector", "#detail canvas").is_displayed()
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []


def test_trail_phoenix_export_loads_in_pandas(shared_data, tmp_path):
    out = tmp_path / "OUT"
    _cli("attribute", str(shared_data / "trail" / "GAIA"), "-o", str(out), "--model", "tiny-random", "--limit", "3")
    _cli("export", str(out), "--to", "phoenix", "-o", str(tmp_path / "ann.parquet"), "--top-k", "5")
    df = pd.read_parquet(tmp_path / "ann.spans.parquet")
    assert list(df.columns) == ["span_id", "trace_id", "name", "annotator_kind", "label", "score", "explanation",
                                "metadata"]
    assert len(df) >= 3 and df["span_id"].str.fullmatch(r"[0-9a-f]{16}").all()
    assert df["trace_id"].str.fullmatch(r"[0-9a-f]{32}").all()
    assert (df["label"] == "failure_source").sum() == 3 and df["score"].notna().all()

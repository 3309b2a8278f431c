import base64
import hashlib
import json
import re

import numpy as np
import pyarrow as pa
import pytest
from analytics_synth import random_specs, write_outdir
from hypothesis import given, settings
from hypothesis import strategies as st

from masprism_batch.analytics.report import build_report, json_for_script
from masprism_batch.analytics.report_data import DrillLimits, _quantise_attention, sample_ids


@given(st.recursive(st.none() | st.text() | st.integers() | st.floats(allow_nan=False, allow_infinity=False),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(), c, max_size=4), max_leaves=20))
@settings(max_examples=200, deadline=None)
def test_json_for_script_round_trips_and_cannot_close_script(obj):
    s = json_for_script(obj)
    assert not set(s) & {"<", ">", "&", "\u2028", "\u2029"}
    assert json.loads(s) == obj


def _data(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.S)
    return json.loads(m.group(1))


def test_report_structure_csp_and_sample(tmp_path, rng):
    specs = random_specs(rng, rng.randint(40, 80)) + random_specs(rng, rng.randint(3, 6), spans=True)
    for i, sp in enumerate(specs):
        sp["trace_id"] += f"-{i}"
        sp["source"] = "src/span" if sp["steps"][0]["span_id"] else sp["source"]
    write_outdir(tmp_path / "o", specs)
    lim = DrillLimits(max_traces=rng.randint(5, 20))
    keep = specs[-1]["trace_id"]
    s = build_report(tmp_path / "o", tmp_path / "r.html", lim, include=[keep, "no-such-trace"])
    html = (tmp_path / "r.html").read_text()
    assert s["traces"] == len(specs) and s["drilldown"] == lim.max_traces
    # CSP allows exactly the inline style and script blocks that are in the page, by hash
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html).group(1)
    blocks = re.findall(r"<script>(.*?)</script>", html, re.S) + re.findall(r"<style>(.*?)</style>", html, re.S)
    for b in blocks:
        h = base64.b64encode(hashlib.sha256(b.encode()).digest()).decode()
        assert f"'sha256-{h}'" in csp
    assert "default-src 'none'" in csp and "http" not in html.split("<body>")[1].replace("http-equiv", "")
    data = _data(html)
    ids = [t["id"] for t in data["traces"]]
    assert ids[0] == keep and len(set(ids)) == len(ids)
    assert {t["src"] for t in data["traces"]} == {sp["source"] for sp in specs} if lim.max_traces >= 3 else True
    by_id = {sp["trace_id"]: sp for sp in specs}
    for t in data["traces"]:
        sp = by_id[t["id"]]
        assert t["n"] == len(sp["steps"]) and [c[0] for c in t["cands"]] == sp["ranked"]
        assert [x["n1"] for x in t["steps"]] == pytest.approx(sp["nll"], abs=1e-4)  # float32, 4 decimals
        assert [x["t"] for x in t["steps"]] == [x["content"] for x in sp["steps"]]
    # same OUTDIR, same sample
    build_report(tmp_path / "o", tmp_path / "r2.html", lim, include=[keep])
    assert [t["id"] for t in _data((tmp_path / "r2.html").read_text())["traces"]] == ids


def test_limits_cut_text_and_respect_budget(tmp_path, rng):
    specs = random_specs(rng, 30)
    for sp in specs:
        for s in sp["steps"]:
            s["content"] = "x" * rng.randint(500, 3000)
    write_outdir(tmp_path / "o", specs)
    lim = DrillLimits(max_traces=30, step_chars=300, trace_chars=1000, budget_bytes=20_000)
    s = build_report(tmp_path / "o", tmp_path / "r.html", lim)
    data = _data((tmp_path / "r.html").read_text())
    assert 0 < s["drilldown"] < 30 and len(json.dumps(data["traces"])) <= 20_000
    for t in data["traces"]:
        cap = max(80, min(300, 1000 // t["n"]))
        assert all(len(x["t"]) <= cap and x["c"] for x in t["steps"])


def test_sample_round_robin_over_sources(rng):
    n = rng.randint(50, 200)
    srcs = [rng.choice(["a", "b", "c"]) for _ in range(n)] + ["rare"]
    t = pa.table({"trace_id": [f"t{i}" for i in range(n + 1)], "source": srcs})
    got = sample_ids(t, DrillLimits(max_traces=8))
    assert len(got) == 8 and "t" + str(n) in got  # the one-trace source is represented


def test_quantised_attention_rows(rng):
    n = rng.randint(2, 40)
    rows = [[rng.random() for _ in range(i + 1)] for i in range(n)]
    q = np.frombuffer(base64.b64decode(_quantise_attention(rows, n)), dtype=np.uint8)
    off = 0
    for i, r in enumerate(rows):
        seg = q[off: off + i + 1]
        assert seg.max() == 255 and seg[int(np.argmax(r))] == 255  # the row's top target is full scale
        np.testing.assert_allclose(seg / 255, np.array(r) / max(r), atol=1 / 255)
        off += i + 1
    assert _quantise_attention(rows[:-1], n) is None  # a missing row: no heatmap rather than a wrong one

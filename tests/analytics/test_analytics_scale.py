"""The report at 100,000 traces stays small and usable (slow: ~1 min CPU to build the synthetic OUTDIR)."""

import os
import time

import pytest
from analytics_synth import write_large_outdir

from masprism_batch.analytics import build_report, compute_stats

pytestmark = pytest.mark.slow
N = int(os.environ.get("MASPRISM_SCALE_TRACES", 100_000))


def test_report_at_scale(tmp_path, rng, request):
    out = write_large_outdir(tmp_path / "o", N, rng.randrange(2**32), parts=max(1, N // 5000))
    t0 = time.process_time()
    stats = compute_stats(out)
    t_stats = time.process_time() - t0
    assert sum(r["n_traces"] for r in stats["blamed_agents"].to_pylist()) == N
    t0 = time.process_time()
    s = build_report(out, tmp_path / "r.html")
    t_report = time.process_time() - t0
    assert s["traces"] == N and s["drilldown"] == min(N, 1000) and s["bytes"] < 20_000_000
    print(f"N={N}: stats {t_stats:.1f} s CPU, report {t_report:.1f} s CPU, {s['bytes'] / 1e6:.1f} MB")
    if os.environ.get("MASPRISM_SCALE_BROWSER"):  # also open it in Chromium (needs the browser fixture)
        drv = request.getfixturevalue("browser")
        t0 = time.perf_counter()
        drv.get((tmp_path / "r.html").as_uri())
        assert drv.execute_script("return document.body.getAttribute('data-ready')") == "1"
        assert [e for e in drv.get_log("browser") if e["level"] == "SEVERE"] == []
        print(f"page ready in {time.perf_counter() - t0:.2f} s")

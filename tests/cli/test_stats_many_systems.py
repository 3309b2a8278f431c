"""Red-team round on `stats` in the terminal: its tables had a row per (source, system) pair, and a log names its
own source and system. Logs each naming another printed a row per log in three tables (100,000 logs: minutes of
table rendering and about 15 MB of terminal text, the same data OUTDIR/stats/ holds). The terminal shows the 50
pairs (and 50 sources) with most traces and says how many more the files hold."""

from __future__ import annotations

from analytics_synth import write_outdir
from typer.testing import CliRunner

from masprism_batch.cli import EXIT_OK, app

runner = CliRunner(env={"COLUMNS": "200"})


def _spec(i: int, source: str, system: str) -> dict:
    steps = [{"agent": "A", "content": f"step {k}"} for k in range(3)]
    return {"trace_id": f"t{i}", "source": source, "system": system, "labels": None, "steps": steps,
            "ranked": [1, 0], "scores": [0.9, 0.1], "symptoms": [2], "nll": [1.0] * 3, "day_offset": 0,
            "verdict_by": "rule:faithful", "category": "kind", "category_confidence": 0.5}


def test_stats_prints_the_pairs_with_most_traces_and_counts_the_rest(tmp_path):
    specs = [_spec(i, "main", "big") for i in range(3)]
    specs += [_spec(100 + i, f"src{i:03d}", f"sys{i:03d}") for i in range(80)]
    out = write_outdir(tmp_path / "o", specs)
    res = runner.invoke(app, ["stats", str(out)])
    assert res.exit_code == EXIT_OK, res.output
    text = res.output
    assert text.count("sys0") <= 3 * 50 and "big" in text, text[:2000]  # the largest pair comes first
    assert "31 more (source, system) pairs" in text and "31 more sources" in text, text[-3000:]


def test_stats_of_a_few_systems_is_unchanged(tmp_path):
    out = write_outdir(tmp_path / "o", [_spec(i, "main", f"s{i % 3}") for i in range(9)])
    res = runner.invoke(app, ["stats", str(out)])
    assert res.exit_code == EXIT_OK and "more (source, system) pairs" not in res.output, res.output

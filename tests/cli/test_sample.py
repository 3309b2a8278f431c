"""`--sample N`: a deterministic sample of N traces with every source represented (not the first N)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.dataset as ds
from typer.testing import CliRunner

from masprism_batch.cli import EXIT_OK, EXIT_USAGE, app

FORMATS = Path(__file__).resolve().parents[1] / "data" / "formats"
runner = CliRunner()


def _ids(out: Path) -> list[tuple[str, str]]:
    t = ds.dataset(str(out / "attributions")).to_table(columns=["trace_id", "source"]).to_pylist()
    return sorted((r["source"], r["trace_id"]) for r in t)


def test_sample_is_deterministic_and_covers_every_source(tmp_path):
    args = ["attribute", str(FORMATS), "--model", "tiny-random", "--sample", "7"]
    res = runner.invoke(app, [*args, "-o", str(tmp_path / "A")])
    assert res.exit_code == EXIT_OK, res.output
    a = _ids(tmp_path / "A")
    assert len(a) == 7 and {s for s, _ in a} == {"ag2", "autogen", "langfuse", "langsmith", "openai", "otel",
                                                 "my-app"}  # 12 traces, 7 sources: one of each
    res = runner.invoke(app, [*args, "-o", str(tmp_path / "B")])
    assert res.exit_code == EXIT_OK and _ids(tmp_path / "B") == a
    res = runner.invoke(app, [*args, "--limit", "3", "-o", str(tmp_path / "C")])
    assert res.exit_code == EXIT_USAGE and not (tmp_path / "C").exists()

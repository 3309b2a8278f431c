"""`--sample N`: a deterministic sample of N traces with every source represented (not the first N)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.dataset as ds
from masprism_batch.pipelines.selection import Selection
from typer.testing import CliRunner

from masprism_batch.cli import EXIT_OK, EXIT_USAGE, app
from masprism_batch.ingest import read_inputs

FORMATS = Path(__file__).resolve().parents[1] / "data" / "formats"
SOURCES = {"ag2", "autogen", "langfuse", "langsmith", "openai", "otel", "my-app"}  # 12 traces, 7 sources
runner = CliRunner()


def _staged(tmp_path: Path, n: int, seed: int = 0) -> list[tuple[str, str]]:
    picked = Selection(sample=n, seed=seed).apply(read_inputs([str(FORMATS)], on_error=lambda e: None))
    return [(t.source, t.trace_id) for t in picked]


def test_sample_is_deterministic_and_covers_every_source(tmp_path):
    a = _staged(tmp_path, 7)
    assert len(a) == 7 and {s for s, _ in a} == SOURCES
    assert _staged(tmp_path / "again", 7) == a
    assert len(_staged(tmp_path, 3)) == 3 and len(_staged(tmp_path, 50)) == 12
    seeds = {tuple(sorted(_staged(tmp_path, 9, seed))) for seed in range(6)}
    assert len(seeds) > 1  # the seed changes which traces of the larger sources are taken


def test_attribute_sample_end_to_end_and_exclusive_with_limit(tmp_path):
    # --all-runs: the sample covers every source, the succeeded Langfuse run's too
    args = ["attribute", str(FORMATS), "--model", "tiny-random", "--sample", "7", "--all-runs"]
    res = runner.invoke(app, [*args, "-o", str(tmp_path / "A")])
    assert res.exit_code == EXIT_OK, res.output
    t = ds.dataset(str(tmp_path / "A" / "attributions")).to_table(columns=["source"]).to_pylist()
    assert len(t) == 7 and {r["source"] for r in t} == SOURCES
    res = runner.invoke(app, [*args, "--limit", "3", "-o", str(tmp_path / "C")])
    assert res.exit_code == EXIT_USAGE and not (tmp_path / "C").exists()


def test_eval_says_whether_its_scores_are_in_sample(tmp_path, monkeypatch):
    import hashlib

    from masprism_batch.analytics import insample
    from masprism_batch.cli.eval import _in_sample_note
    from masprism_batch.config import load_config

    monkeypatch.setattr(insample, "weights_dir", lambda: tmp_path)
    insample.fitted_prefixes.cache_clear()
    ranked, faithful = load_config(None), load_config(None, method__name="masprism")
    assert "no learned weights" in _in_sample_note(faithful, ["a"])
    assert _in_sample_note(ranked, ["a"]).startswith("unknown whether in-sample")
    (tmp_path / "ranker.json").write_text(json.dumps({"fitted_on": [hashlib.sha256(b"a").hexdigest()[:16]]}))
    insample.fitted_prefixes.cache_clear()
    assert _in_sample_note(ranked, ["a"]).startswith("in-sample: all 1")
    assert _in_sample_note(ranked, ["a", "b"]).startswith("partly in-sample: 1 of 2")
    assert _in_sample_note(ranked, ["b"]).startswith("held out")
    insample.fitted_prefixes.cache_clear()


def _outcome(out: Path) -> tuple[set[str], list[dict]]:
    ids = set(ds.dataset(str(out / "attributions")).to_table(columns=["trace_id"]).column("trace_id").to_pylist())
    return ids, ds.dataset(str(out / "errors")).to_table().to_pylist()


def test_rerun_with_another_sample_or_other_inputs_into_one_out_is_refused(tmp_path):
    """--sample 8, then --sample 12, then other inputs into the same OUT: the first is written (its ingest's
    rejections in OUT/errors), the others are refused with a clear message and leave OUT as it was; the first
    command again resumes (nothing to do) and reports the same outputs."""
    bad = tmp_path / "in"
    bad.mkdir()
    for f in FORMATS.iterdir():
        if f.is_file():
            (bad / f.name).write_bytes(f.read_bytes())
    (bad / "broken.jsonl").write_text("{not json\n")
    out = tmp_path / "OUT"
    first = ["attribute", str(bad), "--model", "tiny-random", "-o", str(out), "--no-progress", "--all-runs"]
    res = runner.invoke(app, [*first, "--sample", "8"])
    assert res.exit_code == 3, res.output  # done, with the broken file rejected
    ids, errors = _outcome(out)
    assert len(ids) == 8 and any(e["input_path"] and e["input_path"].endswith("broken.jsonl") for e in errors)
    for other in (["--sample", "12"], ["--sample", "8", "--seed", "1"]):
        res = runner.invoke(app, [*first, *other])
        assert res.exit_code == 1 and "another selection" in res.output, res.output
        said = " ".join(res.output.split())  # the console wraps long lines
        assert "started with" in said and "--sample 8" in said and f"{other[0]} {other[1]}" in said, said
        assert _outcome(out) == (ids, errors)
    res = runner.invoke(app, ["attribute", str(FORMATS), "--model", "tiny-random", "-o", str(out), "--sample", "8"])
    assert res.exit_code == 1 and "other inputs" in res.output, res.output
    assert _outcome(out) == (ids, errors)
    res = runner.invoke(app, [*first, "--sample", "8"])
    assert res.exit_code == 3 and "0 shards run" in res.output.replace("\n", " "), res.output
    assert _outcome(out) == (ids, errors)


def test_another_selection_is_refused_before_the_model_loads(tmp_path, monkeypatch):
    """The refusal needs no model: it is answered from OUT's staging marker before any weights are read."""
    import masprism_batch.cli.run as cli_run

    out = tmp_path / "OUT"
    first = ["attribute", str(FORMATS), "--model", "tiny-random", "-o", str(out), "--no-progress"]
    assert runner.invoke(app, [*first, "--sample", "3"]).exit_code in (0, 3)

    def no_model(cfg):
        raise AssertionError("the model was loaded for a run that is refused")

    monkeypatch.setattr(cli_run, "load_model_or_fail", no_model)
    res = runner.invoke(app, [*first, "--sample", "4"])
    said = " ".join(res.output.split())
    assert res.exit_code == 1 and "another selection" in said and "--sample 3" in said, said


def test_sample_into_a_locked_outdir_writes_nothing(tmp_path):
    """Selection is planning under the OUTDIR lock: a sampled run refused by a live lock leaves OUT untouched
    (no staged subset written before the lock, as `attribute --sample` once did)."""
    import threading

    from masprism_batch.outdir.parts import OutdirLock

    out = tmp_path / "OUT"
    held, release = threading.Event(), threading.Event()

    def hold():
        with OutdirLock(out, "test"):
            held.set()
            release.wait(60)

    th = threading.Thread(target=hold)
    th.start()
    try:
        assert held.wait(10)
        res = runner.invoke(app, ["attribute", str(FORMATS), "--model", "tiny-random", "-o", str(out),
                                  "--sample", "3", "--no-progress"])
        assert res.exit_code == 1 and "in use" in res.output.lower(), res.output
        assert sorted(p.name for p in out.iterdir()) == ["_LOCK"]
    finally:
        release.set()
        th.join()

"""Issue 17: nothing lost, nothing doubled, nothing unbounded (local engine, fake stages: seconds each).

Atomic staging, crash quarantine across resumes, shard identity on resume with another traces_per_shard, incomplete ingest outputs, warnings vs
rejections, caps on canonical Parquet read in place. The OUTDIR lock: test_outdir_lock.py."""

import json
import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from masprism_batch.pipelines import run_local
from pipeline_fakes import Fakes, assert_exactly_once, make_corpus, outcome

from masprism_batch import ingest, schema
from masprism_batch.config import BatchConfig, EngineConfig, IngestConfig, PipelineConfig
from masprism_batch.outdir.reads import read_dataset
from masprism_batch.render import pass1
from masprism_batch.trace import Step, Trace


class Killed(BaseException):
    """Stands for SIGKILL / a segfault: not an Exception, so nothing in the engine may catch it."""


def test_staging_is_atomic_and_checked(tmp_path, small_cfg, monkeypatch):
    ids = make_corpus(tmp_path / "in", 20, 2)
    out, cfg = tmp_path / "out", small_cfg(per_shard=3)
    real = ingest.read_inputs

    def dies_in_staging(*args, **kw):
        for i, t in enumerate(real(*args, **kw)):
            if i == 7:
                raise Killed()
            yield t

    with monkeypatch.context() as m:
        m.setattr(ingest, "read_inputs", dies_in_staging)
        with pytest.raises(Killed):
            run_local([str(tmp_path / "in")], out, cfg, **Fakes().kwargs(), progress=False)
    assert not (out / "_staging").exists() and (out / "_staging.partial").exists()
    run_local([str(tmp_path / "in")], out, cfg, **Fakes().kwargs(), progress=False)
    assert_exactly_once(out, ids)
    assert not (out / "_staging.partial").exists()
    marker = json.loads((out / "_staging" / "_COMPLETE.json").read_text())
    assert sum(v for k, v in marker["parts"].items() if k.startswith("traces/")) == len(ids)
    # a staging changed after the fact is refused, not planned as the whole input
    next((out / "_staging" / "traces").glob("part-*.parquet")).unlink()
    with pytest.raises(ValueError, match="completion marker"):
        run_local([str(tmp_path / "in")], out, cfg, **Fakes().kwargs(), progress=False)


class CrashesInModel(Fakes):
    """A trace whose processing kills the process (a segfault or OOM kill, in-process: a BaseException)."""

    def attribute(self, traces, model, cfg, rendered):
        if any(t.question == "CRASH" for t in traces):
            raise Killed()
        return super().attribute(traces, model, cfg, rendered)


@pytest.mark.parametrize("where", ["model", "render"])
def test_local_engine_quarantines_a_trace_that_crashes_the_process(tmp_path, small_cfg, where, monkeypatch):
    ids = make_corpus(tmp_path / "in", 18, 2, marks={5: "CRASH"})
    out, cfg = tmp_path / "out", small_cfg(per_shard=6, budget=100)
    fakes = CrashesInModel() if where == "model" else Fakes()
    if where == "render":  # the pass-1 render (CPU stage) dies on the marked trace
        real = pass1.render_traces

        def render_traces(traces, tokenizer, rcfg):
            if any(t.question == "CRASH" for t in traces):
                raise Killed()
            return real(traces, tokenizer, rcfg)

        monkeypatch.setattr(pass1, "render_traces", render_traces)
    attempts = 0
    while True:
        attempts += 1
        assert attempts <= 5, "a crashing trace must cost at most 5 attempts (2 whole, 2 alone, then rejected)"
        try:
            s = run_local([str(tmp_path / "in")], out, cfg, **fakes.kwargs(), progress=False)
            break
        except Killed:
            continue
    assert attempts == 5
    reasons = assert_exactly_once(out, ids)
    assert reasons == {ids[5]: "worker_crashed"}
    assert s.rejected == 1 and s.attributed == len(ids) - 1 and s.exit_code == 3
    assert json.loads((out / "_ledger.json").read_text()) == {}


def test_resume_with_other_traces_per_shard_is_exactly_once(tmp_path, caplog):
    """Canonical Parquet input (read in place): a resume with another --traces-per-shard keeps the planned
    shards (it would otherwise re-shard and write committed traces twice)."""
    rows = [Trace(trace_id=f"t{i}", source="s", steps=[Step(index=0, agent="a", content=f"x {i}")]).to_row()
            for i in range(30)]
    (tmp_path / "ds").mkdir()
    pq.write_table(pa.Table.from_pylist(rows, schema=schema.TRACES), tmp_path / "ds" / "part-0.parquet")
    out = tmp_path / "out"

    def cfg(n):
        return PipelineConfig(batch=BatchConfig(token_budget=100), engine=EngineConfig(traces_per_shard=n))

    class DiesAfter(Fakes):
        calls = 0

        def attribute(self, traces, model, c, rendered):
            DiesAfter.calls += 1
            if DiesAfter.calls > 3:
                raise Killed()
            return super().attribute(traces, model, c, rendered)

    with pytest.raises(Killed):
        run_local([str(tmp_path / "ds")], out, cfg(7), **DiesAfter().kwargs(), progress=False)
    s = run_local([str(tmp_path / "ds")], out, cfg(4), **Fakes().kwargs(), progress=False)
    assert "traces_per_shard=7" in caplog.text
    counts, _ = outcome(out)
    assert set(counts) == {f"t{i}" for i in range(30)} and set(counts.values()) == {1}
    run = json.loads((out / "run.json").read_text())
    assert run["counts"]["in"] == run["counts"]["attributed"] == s.attributed == 30


def test_incomplete_ingest_output_refused(tmp_path, small_cfg, caplog):
    from masprism_batch.ingest import ingest

    src = tmp_path / "raw"
    make_corpus(src, 6, 1)
    ingest([str(src)], tmp_path / "ing", progress=False)
    state = json.loads((tmp_path / "ing" / "_INGEST.json").read_text())
    assert state["complete"] is True and state["traces"] == 6
    s = run_local([str(tmp_path / "ing" / "traces")], tmp_path / "out1", small_cfg(), **Fakes().kwargs(),
                  progress=False)
    assert s.attributed == 6
    (tmp_path / "ing" / "_INGEST.json").write_text(json.dumps({"complete": False}))  # as after a kill -9
    with pytest.raises(ValueError, match="did not finish"):
        run_local([str(tmp_path / "ing" / "traces")], tmp_path / "out2", small_cfg(), **Fakes().kwargs(),
                  progress=False)
    with caplog.at_level("WARNING"):  # the library's readers warn
        assert read_dataset(tmp_path / "ing" / "traces").num_rows == 6
    assert "did not finish" in caplog.text


def test_caps_on_parquet_read_in_place_and_warnings_are_not_rejections(tmp_path):
    big = "word " * 100_000  # 500 kB step: cut, a warning; the trace is attributed
    rows = [Trace(trace_id="big", source="s", steps=[Step(index=0, agent="a", content=big)],
                  metadata={"score": float("nan")}).to_row(),
            Trace(trace_id="many", source="s", steps=[Step(index=i, agent="a", content="x") for i in range(50)]).to_row(),
            Trace(trace_id="ok", source="s", steps=[Step(index=0, agent="a", content="fine")]).to_row()]
    (tmp_path / "ds").mkdir()
    pq.write_table(pa.Table.from_pylist(rows, schema=schema.TRACES), tmp_path / "ds" / "p.parquet")
    cfg = PipelineConfig(engine=EngineConfig(traces_per_shard=8), ingest=IngestConfig(max_steps=40))
    s = run_local([str(tmp_path / "ds")], tmp_path / "out", cfg, **Fakes().kwargs(), progress=False)
    assert (s.attributed, s.rejected, s.rejected_by_reason) == (2, 1, {"too_many_steps": 1})
    assert s.warnings_by_reason == {"step_truncated": 1, "non_finite_metadata": 1} and s.exit_code == 3
    run = json.loads((tmp_path / "out" / "run.json").read_text())["counts"]
    assert (run["in"], run["rejected"], run["warnings"]) == (3, 1, 2)
    [t] = [r for r in read_dataset(tmp_path / "out" / "traces").to_pylist() if r["trace_id"] == "big"]
    assert len(t["steps"][0]["content"].encode()) <= IngestConfig().max_step_bytes
    assert json.loads(t["metadata"]) == {"score": None}


def test_run_input_walk_special_files_and_bomb(tmp_path, small_cfg):
    """`run` on a folder with a FIFO, a /dev/zero link and a JSON-lines gzip bomb: an error row each, within
    seconds, and the run finishes with the good traces (it used to block forever on the FIFO)."""
    import gzip

    ids = make_corpus(tmp_path / "in", 9, 1)
    os.mkfifo(tmp_path / "in" / "pipe.jsonl")
    os.symlink("/dev/zero", tmp_path / "in" / "zero.jsonl")
    member = gzip.compress(b"a" * 1024**2, mtime=0)
    (tmp_path / "in" / "bomb.jsonl.gz").write_bytes(gzip.compress(b'{"trace_id": "x", "steps": "', mtime=0)
                                                    + member * 20)
    cfg = PipelineConfig(batch=BatchConfig(token_budget=100), engine=EngineConfig(traces_per_shard=4),
                         ingest=IngestConfig(max_record_bytes=4 * 1024**2))
    t0 = time.perf_counter()
    s = run_local([str(tmp_path / "in")], tmp_path / "out", cfg, **Fakes().kwargs(), progress=False)
    assert time.perf_counter() - t0 < 30
    reasons = assert_exactly_once(tmp_path / "out", ids)
    by_file = {Path(e["input_path"]).name: e["reason"] for e in read_dataset(tmp_path / "out" / "errors").to_pylist()}
    assert by_file == {"pipe.jsonl": "not_a_regular_file", "zero.jsonl": "symlink_outside_input",
                       "bomb.jsonl.gz": "record_too_large"}
    assert s.attributed == 9 and s.rejected == 3 and not reasons.keys() & set(ids)

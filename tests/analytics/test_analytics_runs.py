"""The run history of `stats` (stats/runs.parquet): run.json in each shape it has had, one row per invocation,
killed invocations counted from their committed shards, older layouts converted."""

import json
from datetime import datetime

import pyarrow.parquet as pq
import pytest
from analytics_synth import hand_specs, write_outdir

from masprism_batch.analytics import compute_stats, write_stats


@pytest.mark.parametrize("shape", ["object", "list", "history"])
def test_run_json_shapes(tmp_path, shape):
    write_outdir(tmp_path, hand_specs()[:1])
    rec = {"engine": "local", "model": {"model_id": "m"}, "traces": 10, "wall_seconds": 4.0, "tokens": 1000}
    data = {"object": rec, "list": [rec, {**rec, "traces": 20}], "history": {"history": [rec]}}[shape]
    (tmp_path / "run.json").write_text(json.dumps(data))
    runs = compute_stats(tmp_path)["runs"].to_pylist()
    assert len(runs) == {"object": 1, "list": 2, "history": 1}[shape]
    assert runs[0]["traces_per_s"] == pytest.approx(2.5) and runs[0]["tokens_per_s"] == pytest.approx(250.0)
    assert runs[0]["model_id"] == "m" and json.loads(runs[0]["record_json"]) == rec


def test_engine_run_json_builds_a_history(tmp_path, rng):
    """run.json (pipelines/driver.py shape) holds only the latest invocation; stats keeps every one seen."""
    write_outdir(tmp_path, hand_specs()[:2])
    want = []
    for i in range(rng.randint(2, 4)):
        traces, wall = rng.randint(1, 500), rng.uniform(1, 100)
        rec = {"engine": "local", "model": "tiny-random", "config": {"model": {"name": "tiny-random"}},
               "counts": {"in": 999, "attributed": 999, "tokens": 10**6},
               "this_invocation": {"started_at": f"2026-11-22T0{i}:00:00+00:00", "wall_seconds": wall,
                                   "traces": traces, "tokens": traces * 100,
                                   "traces_per_second": round(traces / wall, 4), "tokens_per_second": 1.0}}
        (tmp_path / "run.json").write_text(json.dumps(rec))
        write_stats(tmp_path)
        write_stats(tmp_path)  # the same invocation twice: one row
        want.append((datetime.fromisoformat(rec["this_invocation"]["started_at"]), traces, pytest.approx(wall),
                     traces * 100))
    got = pq.read_table(tmp_path / "stats" / "runs.parquet").to_pylist()
    assert [(r["started_at"], r["traces"], r["seconds"], r["tokens"]) for r in got] == want
    assert [r["run_index"] for r in got] == list(range(len(want)))
    assert all(r["engine"] == "local" and r["model_id"] == "tiny-random" for r in got)


def _rec(start: str, end: str, traces: int, shards_run: int) -> dict:
    return {"engine": "local", "model": "tiny-random", "shards": {"total": 9, "run": shards_run, "skipped": 0},
            "this_invocation": {"started_at": start, "finished_at": end, "wall_seconds": 60.0, "traces": traces,
                                "tokens": traces * 10}}


def test_run_history_typed_no_op_resumes_and_killed_invocations(tmp_path, monkeypatch):
    """A no-op resume adds no row; shards committed by an invocation killed before run.json are one `killed` row;
    times are timestamps, and a runs.parquet of the older layout (text times) is converted, not dropped."""
    import pyarrow as pa

    import masprism_batch.analytics.load as load_mod
    from masprism_batch.analytics.run_history import RUNS_SCHEMA

    write_outdir(tmp_path, hand_specs()[:2])
    # invocation 1 finished 01:00-01:10; invocation 2 was killed after committing two shards at 02:00-02:05;
    # invocation 3 resumed 03:00-03:02 and did the rest; invocation 4 found nothing left (a no-op)
    manifest = {sid: {"label": "x", "attributed": n, "rejected": 0, "tokens": n * 10, "engine": "local",
                      "stage_seconds": {"seconds_model": 6.0 * n}, "committed_at": when}
                for sid, when, n in (("a1", "2026-11-22T01:05:00+00:00", 4), ("k1", "2026-11-22T02:00:00+00:00", 3),
                                     ("k2", "2026-11-22T02:05:00+00:00", 5), ("r1", "2026-11-22T03:01:00+00:00", 2),
                                     ("ingest", "2026-11-22T00:59:00+00:00", 0))}
    monkeypatch.setattr(load_mod, "committed_shards", lambda outdir: manifest)
    for rec in (_rec("2026-11-22T01:00:00+00:00", "2026-11-22T01:10:00+00:00", 4, 1),
                _rec("2026-11-22T03:00:00+00:00", "2026-11-22T03:02:00+00:00", 2, 1),
                _rec("2026-11-22T04:00:00+00:00", "2026-11-22T04:00:01+00:00", 0, 0)):
        (tmp_path / "run.json").write_text(json.dumps(rec))
        write_stats(tmp_path)
    t = pq.read_table(tmp_path / "stats" / "runs.parquet")
    assert t.schema.field("started_at").type == pa.timestamp("us", tz="UTC")
    got = [(r["started_at"].hour, r["status"], r["traces"]) for r in t.to_pylist()]
    assert got == [(1, "finished", 4), (2, "killed", 8), (3, "finished", 2)]
    killed = t.to_pylist()[1]
    assert killed["finished_at"].minute == 5 and killed["seconds"] == pytest.approx(48.0)
    # an older runs.parquet (text times, no status) is converted
    old = t.drop(["status"]).set_column(1, "started_at", pa.array([str(x) for x in t["started_at"].to_pylist()]))
    old = old.set_column(2, "finished_at", pa.array([str(x) for x in t["finished_at"].to_pylist()]))
    pq.write_table(old, tmp_path / "stats" / "runs.parquet")
    (tmp_path / "run.json").unlink()
    again = compute_stats(tmp_path)["runs"]
    assert again.schema.equals(RUNS_SCHEMA) and [r["traces"] for r in again.to_pylist()] == [4, 8, 2]

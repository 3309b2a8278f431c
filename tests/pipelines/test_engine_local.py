"""Local engine: exactly-once output, resume after a crash at any point, dataset inputs, run record."""

import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from masprism_batch.pipelines import run_local
from pipeline_fakes import Fakes, assert_exactly_once, make_corpus

import masprism_batch.outdir.shards as shards
from masprism_batch import schema
from masprism_batch.outdir.reads import read_dataset
from masprism_batch.trace import Step, Trace


class Killed(BaseException):
    """Stands for SIGKILL: not an Exception, so nothing in the engine may catch it."""


class DiesAfter(Fakes):
    def __init__(self, calls: int):
        super().__init__()
        self.calls = calls

    def attribute(self, traces, model, cfg, rendered):
        self.calls -= 1
        if self.calls < 0:
            raise Killed()
        return super().attribute(traces, model, cfg, rendered)


def test_exactly_once_rejections_and_noop_rerun(tmp_path, small_cfg, rng):
    n, bad = rng.randint(23, 41), rng.randint(1, 3)
    poisoned = rng.randrange(n)
    ids = make_corpus(tmp_path / "in", n, rng.randint(2, 4), bad_lines=bad, marks={poisoned: "RAISE"})
    cfg = small_cfg(per_shard=rng.randint(3, 7))
    out = tmp_path / "out"
    s = run_local([str(tmp_path / "in")], out, cfg, **Fakes().kwargs(), progress=False)
    reasons = assert_exactly_once(out, ids)
    assert reasons[ids[poisoned]] == "attribute_failed"
    assert sum(r == "invalid_json" for r in reasons.values()) == bad
    assert (s.attributed, s.rejected, s.exit_code) == (n - 1, bad + 1, 3)
    run = json.loads((out / "run.json").read_text())
    assert run["counts"]["in"] == n + bad and run["engine"] == "local"
    assert run["config_hash"] == cfg.config_hash() and run["stage_seconds_total"]["seconds_model"] > 0
    assert {"seconds_render_pass2", "seconds_render_pass2_wait"} <= run["stage_seconds_total"].keys()
    # traces/ holds exactly the traces that reached the model stage
    assert sorted(read_dataset(out / "traces").column("trace_id").to_pylist()) == sorted(ids)
    before = {p: p.stat().st_mtime_ns for p in out.rglob("shard-*")}
    again = run_local([str(tmp_path / "in")], out, cfg, **Fakes().kwargs(), progress=False)
    assert again.shards_run == 0 and again.shards_skipped == s.shards_run
    assert {p: p.stat().st_mtime_ns for p in out.rglob("shard-*")} == before


@pytest.mark.parametrize("calls", [0, 2, 5])
def test_resume_after_kill_mid_run(tmp_path, small_cfg, calls):
    ids = make_corpus(tmp_path / "in", random.randint(30, 45), 3)
    cfg = small_cfg(per_shard=6, budget=200)
    out = tmp_path / "out"
    with pytest.raises(Killed):
        run_local([str(tmp_path / "in")], out, cfg, **DiesAfter(calls).kwargs(), progress=False)
    # debris a SIGKILL can leave: a temporary file and the parts of a shard whose entry was never written
    (out / "attributions" / ".tmp-0123-shard-x.parquet").write_bytes(b"partial")
    stray = out / "errors" / "shard-0000deadbeef.parquet"
    pq.write_table(schema.ERRORS.empty_table(), stray)
    s = run_local([str(tmp_path / "in")], out, cfg, **Fakes().kwargs(), progress=False)
    assert_exactly_once(out, ids)
    assert not stray.exists() and not list(out.rglob(".tmp-*"))
    assert s.shards_run + s.shards_skipped == s.shards_total - 1  # minus the ingest shard


def test_crash_between_parts_and_manifest(tmp_path, small_cfg, monkeypatch):
    """The commit window: all parts renamed into place, manifest entry not yet written."""
    ids = make_corpus(tmp_path / "in", 29, 2)
    cfg = small_cfg(per_shard=5)
    real = shards.write_json_atomic
    entries = []

    def dying(obj, path, durable=True):
        if path.name.startswith("shard-") and path.name != "shard-ingest.json":
            entries.append(path.name)
            if len(entries) == 3:
                raise Killed()
        real(obj, path, durable)

    monkeypatch.setattr(shards, "write_json_atomic", dying)
    with pytest.raises(Killed):
        run_local([str(tmp_path / "in")], tmp_path / "out", cfg, **Fakes().kwargs(), progress=False)
    monkeypatch.setattr(shards, "write_json_atomic", real)
    # ingest + 2 committed + the parts of the shard whose entry was never written
    parts = sorted((tmp_path / "out" / "attributions").glob("shard-*"))
    assert len(parts) == 4
    # readers (analytics, eval) see the committed shards only: the resume rewrites the other one
    committed = shards.ShardStore(tmp_path / "out").committed()
    want = {t for p in parts if p.stem[len("shard-"):] in committed for t in pq.read_table(p)["trace_id"].to_pylist()}
    assert len(committed) == 3 and want
    assert set(read_dataset(tmp_path / "out" / "attributions")["trace_id"].to_pylist()) == want
    s = run_local([str(tmp_path / "in")], tmp_path / "out", cfg, **Fakes().kwargs(), progress=False)
    assert s.shards_skipped == 2
    assert_exactly_once(tmp_path / "out", ids)


def _write_dataset(root, rng):
    """Hive-partitioned canonical dataset (the partition key `source` is not a file column), small row
    groups, and one trace id repeated in a later file."""
    ids = []
    for k, src in enumerate(["alpha", "beta"]):
        rows = []
        for i in range(rng.randint(7, 13)):
            tid = f"{src}-{i}-{rng.randrange(10**6)}"
            steps = [Step(index=j, agent="a", content="x " * rng.randint(1, 30)) for j in range(rng.randint(1, 5))]
            rows.append(Trace(trace_id=tid, source=src, steps=steps).to_row())
            ids.append(tid)
        if k == 1:
            rows.append(dict(rows[0], trace_id=ids[0]))  # repeats the first trace of the first file
        table = pa.Table.from_pylist(rows, schema=schema.TRACES).drop_columns(["source"])
        (root / f"source={src}").mkdir(parents=True)
        pq.write_table(table, root / f"source={src}" / "part-0.parquet", row_group_size=3)
    return ids


def test_parquet_dataset_input(tmp_path, small_cfg, rng):
    ids = _write_dataset(tmp_path / "ds", rng)
    out = tmp_path / "out"
    s = run_local([str(tmp_path / "ds")], out, small_cfg(per_shard=4), **Fakes().kwargs(), progress=False)
    assert not (out / "_staging").exists()  # canonical Parquet is read in place, not staged
    counts = pa.Table.to_pylist(read_dataset(out / "errors"))
    assert [e["reason"] for e in counts] == ["duplicate_trace_id"] and counts[0]["record_id"] == ids[0]
    att = read_dataset(out / "attributions").to_pylist()
    assert sorted(a["trace_id"] for a in att) == sorted(ids)
    assert {a["source"] for a in att} == {"alpha", "beta"}  # restored from the hive partition
    assert s.shards_total == sum(-(-n // 4) for n in (len([i for i in ids if i.startswith(p)]) + (p == "beta")
                                                      for p in ("alpha", "beta")))


def test_other_config_refused(tmp_path, small_cfg):
    make_corpus(tmp_path / "in", 5, 1)
    run_local([str(tmp_path / "in")], tmp_path / "out", small_cfg(), **Fakes().kwargs(), progress=False)
    other = small_cfg().model_copy(update={"model": small_cfg().model.model_copy(update={"name": "tiny-random"})})
    with pytest.raises(ValueError, match="another configuration"):
        run_local([str(tmp_path / "in")], tmp_path / "out", other, **Fakes().kwargs(), progress=False)


def test_shard_store_rejects_path_like_ids(tmp_path):
    store = shards.ShardStore(tmp_path)
    for bad in ["../x", "a/b", "", "A" * 70, ".hidden"]:
        with pytest.raises(ValueError):
            store.part_path("errors", bad)


def test_outdir_of_another_command_refused(tmp_path, small_cfg):
    make_corpus(tmp_path / "in", 4, 1)
    (tmp_path / "out" / "attributions").mkdir(parents=True)
    pq.write_table(schema.ATTRIBUTIONS.empty_table(), tmp_path / "out" / "attributions" / "part-1.parquet")
    with pytest.raises(ValueError, match="not written by `run`"):
        run_local([str(tmp_path / "in")], tmp_path / "out", small_cfg(), **Fakes().kwargs(), progress=False)


def test_repeated_pack_result_is_not_written_twice(tmp_path, small_cfg, monkeypatch):
    """Belt and braces for at-least-once delivery: a pack result delivered twice is committed once."""
    from masprism_batch.pipelines import commit

    ids = make_corpus(tmp_path / "in", 17, 2)
    real_add = commit.Committer.add
    monkeypatch.setattr(commit.Committer, "add", lambda self, r: (real_add(self, r), real_add(self, r))[0])
    s = run_local([str(tmp_path / "in")], tmp_path / "out", small_cfg(per_shard=4), **Fakes().kwargs(),
                  progress=False)
    assert_exactly_once(tmp_path / "out", ids)
    assert s.attributed == 17

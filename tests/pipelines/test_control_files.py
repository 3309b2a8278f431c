"""Issue 37 items 6 and 7: outputs never dropped silently, control files that cannot hang a command, and crash
counting that holds with several poison traces in one pack and across restarts of Ray's ledger.

- a deleted committed part is damage: `stats` refuses naming it, a resume re-runs exactly that shard;
- `ingest` refuses an OUTDIR that holds a run (`--overwrite` or not) and deletes nothing of it;
- a FIFO in place of `_ledger.json`, a manifest entry, `_COMPLETE.json` or a staged part is refused at once;
- two traces that crash the process in one pack cost 2 + 2x2 crashes, then the run completes;
- the Ray ledger's counts live in OUTDIR/_ledger.json (a restarted ledger keeps them) and its calls are retried."""

from __future__ import annotations

import json
import os
import random
import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from masprism_batch.pipelines import run_local
from masprism_batch.pipelines.plan import INGEST_SHARD
from pipeline_fakes import Fakes, assert_exactly_once, make_corpus
from typer.testing import CliRunner

from masprism_batch.cli import app
from masprism_batch.outdir.parts import OutdirUnsafe


def _run(tmp_path: Path, cfg, n: int = 12):
    ids = make_corpus(tmp_path / "in", n, 2)
    out = tmp_path / "out"
    run_local([str(tmp_path / "in")], out, cfg, **Fakes().kwargs(), progress=False)
    return ids, out


def test_a_deleted_part_is_refused_by_stats_and_rerun_by_resume(tmp_path, small_cfg):
    ids, out = _run(tmp_path, small_cfg(per_shard=4, budget=60))
    # a part of a shard that ran traces (the ingest shard's parts hold only raw-input errors and are re-committed
    # by the resume without counting as a shard run)
    parts = [p for p in sorted((out / "attributions").glob("shard-*.parquet"))
             if p.stem != f"shard-{INGEST_SHARD}" and pq.read_metadata(p).num_rows]
    victim = random.choice(parts)
    victim.unlink()
    res = CliRunner().invoke(app, ["stats", str(out)])
    assert res.exit_code == 1, res.output
    assert "damaged output" in res.output and victim.name in " ".join(res.output.split())
    s = run_local([str(tmp_path / "in")], out, small_cfg(per_shard=4, budget=60), **Fakes().kwargs(),
                  progress=False)
    assert s.shards_run == 1 and s.attributed == len(ids)
    assert_exactly_once(out, ids)
    assert CliRunner().invoke(app, ["stats", str(out)]).exit_code == 0


@pytest.mark.parametrize("overwrite", [False, True])
def test_ingest_refuses_an_outdir_that_holds_a_run(tmp_path, small_cfg, overwrite):
    ids, out = _run(tmp_path, small_cfg(per_shard=4, budget=60))
    before = sorted(p.relative_to(out) for p in out.rglob("*.parquet"))
    args = ["ingest", str(tmp_path / "in"), "-o", str(out), "--no-progress"] + (["--overwrite"] if overwrite else [])
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 1 and "holds a run" in res.output, res.output
    assert sorted(p.relative_to(out) for p in out.rglob("*.parquet")) == before
    assert_exactly_once(out, ids)


def _finishes(fn, fifo: Path, seconds: float = 60.0):
    """fn() in a thread; if it is still blocked after `seconds`, a writer opens the FIFO to free it (then fail)."""
    box: dict = {}

    def go():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001
            box["error"] = e

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        t.join(10)
        pytest.fail(f"blocked on the FIFO {fifo}")
    return box


@pytest.mark.parametrize("where", ["_ledger.json", "manifest", "_staging/_COMPLETE.json", "staged part"])
def test_a_fifo_in_place_of_a_control_file_is_refused_never_waited_on(tmp_path, small_cfg, where):
    cfg = small_cfg(per_shard=4, budget=60)
    if where == "_ledger.json":  # read when there is work to do: planted before the first run
        make_corpus(tmp_path / "in", 6, 1)
        (tmp_path / "out").mkdir()
        out = tmp_path / "out"
    else:
        _, out = _run(tmp_path, cfg)
    if where == "manifest":
        target = random.choice(sorted((out / "_manifest").glob("shard-*.json")))
    elif where == "staged part":
        target = random.choice(sorted((out / "_staging" / "traces").glob("part-*.parquet")))
    else:
        target = out / where
    target.unlink(missing_ok=True)
    os.mkfifo(target)
    box = _finishes(lambda: run_local([str(tmp_path / "in")], out, cfg, **Fakes().kwargs(), progress=False), target)
    assert isinstance(box.get("error"), (OutdirUnsafe, ValueError)), box
    assert "regular file" in str(box["error"]) or "completion marker" in str(box["error"])
    if where in ("manifest", "_staging/_COMPLETE.json"):
        box = _finishes(lambda: CliRunner().invoke(app, ["stats", str(out)]), target)
        if where == "manifest":
            assert box["value"].exit_code == 1 and "regular file" in box["value"].output


class CrashesInModel(Fakes):
    """A pack holding a marked trace dies as a segfault would (in-process: a BaseException the run cannot catch)."""

    def attribute(self, traces, model, cfg, rendered):
        if any(t.question == "CRASH" for t in traces):
            raise Crashed()
        return super().attribute(traces, model, cfg, rendered)


class Crashed(BaseException):
    pass


def test_several_poison_traces_in_one_pack_cost_the_documented_crashes(tmp_path, small_cfg):
    n = 8  # packs are cut from the first 8 renders first (packs.PACK_WINDOWS)
    poison = sorted(random.sample(range(n), 2))
    ids = make_corpus(tmp_path / "in", n, 1, marks={i: "CRASH" for i in poison})
    out, cfg = tmp_path / "out", small_cfg(per_shard=n, budget=100_000)  # one shard, one pack
    crashes = 0
    while True:
        assert crashes <= 2 + 2 * len(poison), f"{crashes} crashes for {len(poison)} poison traces in one pack"
        try:
            s = run_local([str(tmp_path / "in")], out, cfg, **CrashesInModel().kwargs(), progress=False)
            break
        except Crashed:
            crashes += 1
    assert crashes == 2 + 2 * len(poison)
    reasons = assert_exactly_once(out, ids)
    assert reasons == {ids[i]: "worker_crashed" for i in poison}
    assert s.attributed == n - len(poison)
    assert json.loads((out / "_ledger.json").read_text()) == {}


def test_ray_ledger_keeps_counts_across_restarts_and_its_calls_are_retried(tmp_path):
    from masprism_batch.pipelines.ray_ledger import Ledger, retry

    path = tmp_path / "_ledger.json"
    key = f"{random.randrange(16**8):08x}/{random.randrange(16**8):08x}"
    first = Ledger(str(path))
    assert first.begin(key) == 0 and first.begin(key + "/t1") == 0
    restarted = Ledger(str(path))  # what Ray's max_restarts gives after the actor's process was killed
    assert restarted.begin(key) == 1 and restarted.begin(key + "/t1") == 1
    restarted.done(key)  # the unit's finish drops its traces' keys too
    assert json.loads(path.read_text()) == {}
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    memory_only = Ledger(str(blocked / "_ledger.json"))  # OUTDIR not writable from the actor's node
    assert memory_only.begin(key) == 0 and memory_only.begin(key) == 1

    class Gone(Exception):
        pass

    failures = random.randint(1, 4)
    calls, waits = [], []

    def flaky():
        calls.append(1)
        if len(calls) <= failures:
            raise Gone("actor restarting")
        return 7

    assert retry(flaky, (Gone,), attempts=6, wait=0.5, sleep=waits.append) == 7
    assert len(calls) == failures + 1 and waits == [0.5 * 2**i for i in range(failures)]
    with pytest.raises(Gone):
        retry(lambda: (_ for _ in ()).throw(Gone("dead")), (Gone,), attempts=3, sleep=waits.append)

"""Issue 17: one live command per OUTDIR (local engine, fake stages). A second run refuses with exit 1 and
touches nothing of the live one; two processes started together write every trace once; a dead run's lock is
taken over (also where the filesystem has no flock); the lock is re-entrant in its own thread only."""

import errno
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from masprism_batch.pipelines import run_local
from pipeline_fakes import Fakes, assert_exactly_once, make_corpus
from typer.testing import CliRunner

from masprism_batch.cli import EXIT_FATAL, app
from masprism_batch.outdir import lock as outdir_lock
from masprism_batch.outdir.lock import LOCK_NAME, LOCK_STALE_SECONDS
from masprism_batch.outdir.parts import OutdirLock, OutdirLocked

HERE = Path(__file__).resolve().parents[1] / "pipelines"  # pipeline_fakes, for the child processes


class Held(Fakes):
    """Signals `started` at its first pack, then waits for `release`: the run is live meanwhile."""

    def __init__(self, started: threading.Event, release: threading.Event):
        super().__init__()
        self.started, self.release = started, release

    def attribute(self, traces, model, cfg, rendered):
        self.started.set()
        assert self.release.wait(60)
        return super().attribute(traces, model, cfg, rendered)


def test_second_run_refused_while_first_runs_then_exactly_once(tmp_path, small_cfg):
    ids = make_corpus(tmp_path / "in", 24, 2)
    out, cfg = tmp_path / "out", small_cfg(per_shard=4, budget=60)
    started, release, result = threading.Event(), threading.Event(), {}

    def first():
        try:
            result["s"] = run_local([str(tmp_path / "in")], out, cfg, **Held(started, release).kwargs(), progress=False)
        except BaseException as e:  # noqa: BLE001
            result["e"] = e

    t = threading.Thread(target=first)
    t.start()
    assert started.wait(30)
    (out / "attributions").mkdir(exist_ok=True)
    (out / "attributions" / ".tmp-live-part.parquet").write_bytes(b"being written by the live run")
    # the live run's own lock and crash ledger (its CPU stage of the next shard runs meanwhile) may change
    live = (LOCK_NAME, "_ledger.json")
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if not p.name.endswith(live)}
    with pytest.raises(OutdirLocked, match=f"pid {os.getpid()}"):
        run_local([str(tmp_path / "in")], out, cfg, **Fakes().kwargs(), progress=False)
    # the refused run's CLI path: exit 1 with the owner in the message
    res = CliRunner().invoke(app, ["run", str(tmp_path / "in"), "-o", str(out), "--model", "tiny-random",
                                   "--no-progress"])
    assert res.exit_code == EXIT_FATAL and "in use by another run" in res.output
    # start-up cleanup of the refused runs touched nothing of the live run (its temporary file included)
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if not p.name.endswith(live)} == before
    release.set()
    t.join(60)
    assert "e" not in result, result.get("e")
    assert_exactly_once(out, ids)
    assert result["s"].attributed == len(ids)
    assert (out / LOCK_NAME).read_text() == ""  # released


def test_two_processes_on_one_outdir(tmp_path):
    """Two `run`s started together on one OUTDIR: one refuses (exit 1), the other writes every trace once."""
    ids = make_corpus(tmp_path / "in", 40, 3)
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(HERE)!r})
        from pipeline_fakes import Fakes
        from masprism_batch.config import BatchConfig, EngineConfig, PipelineConfig
        from masprism_batch.outdir.parts import OutdirLocked
        from masprism_batch.pipelines import run_local
        cfg = PipelineConfig(batch=BatchConfig(token_budget=80), engine=EngineConfig(traces_per_shard=5))
        try:
            run_local([{str(tmp_path / 'in')!r}], {str(tmp_path / 'out')!r}, cfg, **Fakes(delay=0.03).kwargs(),
                      progress=False)
        except OutdirLocked as e:
            print("LOCKED", e)
            sys.exit(1)
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 1], outs
    assert sum("LOCKED" in o for o, _ in outs) == 1
    assert_exactly_once(tmp_path / "out", ids)
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["counts"]["in"] == run["counts"]["attributed"] == len(ids)


def test_stale_lock_taken_over_and_no_flock_fallback(tmp_path, monkeypatch, caplog):
    out = tmp_path / "out"
    out.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    owner = {"pid": dead.pid, "host": os.uname().nodename, "command": "run", "started_at": "2020-01-01T00:00:00Z"}
    (out / LOCK_NAME).write_text(json.dumps(owner))
    with OutdirLock(out):  # the kernel flock of the dead run is gone: taken over, with a warning
        assert json.loads((out / LOCK_NAME).read_text())["pid"] == os.getpid()
    assert "stale lock" in caplog.text
    # a filesystem without flock: the owner record is the lock (live pid on this host -> refused)

    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, "no locks available")

    monkeypatch.setattr(outdir_lock.fcntl, "flock", no_flock)
    (out / LOCK_NAME).write_text(json.dumps({**owner, "pid": os.getpid()}))
    with pytest.raises(OutdirLocked):
        OutdirLock(out).acquire()
    (out / LOCK_NAME).write_text(json.dumps(owner))  # dead pid: stale
    OutdirLock(out).acquire().release()
    (out / LOCK_NAME).write_text(json.dumps({**owner, "host": "elsewhere", "pid": 1}))
    with pytest.raises(OutdirLocked):  # another host, recently touched: not stale
        OutdirLock(out).acquire()
    old = time.time() - LOCK_STALE_SECONDS - 60
    os.utime(out / LOCK_NAME, (old, old))
    OutdirLock(out).acquire().release()


def test_lock_is_reentrant_in_one_thread_only(tmp_path, small_cfg):
    """A command may hold OUTDIR (e.g. while it writes a subset file) and then call the engine, which locks
    it again in the same thread; another thread is refused, and the lock is free once the outer one ends."""
    ids = make_corpus(tmp_path / "in", 5, 1)
    out = tmp_path / "out"
    with OutdirLock(out, "attribute"):
        s = run_local([str(tmp_path / "in")], out, small_cfg(), **Fakes().kwargs(), progress=False)
        assert s.attributed == 5 and (out / LOCK_NAME).read_text()  # still held by the outer lock
        seen = []

        def other_thread():
            try:
                OutdirLock(out).acquire().release()
                seen.append("acquired")
            except OutdirLocked:
                seen.append("refused")

        th = threading.Thread(target=other_thread)
        th.start()
        th.join()
        assert seen == ["refused"]
    assert (out / LOCK_NAME).read_text() == ""
    OutdirLock(out).acquire().release()
    assert_exactly_once(out, ids)

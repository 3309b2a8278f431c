"""Issue 27 item 3: an interruption of the process is no failure of the trace that was running.

A real process runs the local engine (fake model stage, slow enough to be caught inside a pack) and is stopped
three times in a row while its first pending pack runs; the fourth invocation must attribute every trace.
SIGTERM/SIGHUP unwind cleanly (exit 128 + signal, the ledger takes its starts back); SIGKILL cannot be caught
and counts as a crash, so a trace is rejected only after it crashed the process alone twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from masprism_batch.pipelines import run_local
from pipeline_fakes import Fakes, assert_exactly_once, make_corpus
from typer.testing import CliRunner

from masprism_batch.cli import app

HERE = Path(__file__).resolve().parent
DRIVER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    from pipeline_fakes import Fakes
    from masprism_batch.config import PipelineConfig
    from masprism_batch.pipelines import run_local
    try:
        from masprism_batch.pipelines.interrupts import exit_status
    except ImportError:  # a tree without clean interruption: the assertions below say so
        exit_status = lambda e: 1
    cfg = PipelineConfig.model_validate_json({cfg!r})
    try:
        run_local([{inp!r}], {out!r}, cfg, **Fakes(delay=2.0, piddir={piddir!r}).kwargs(), progress=False)
    except KeyboardInterrupt as e:
        sys.exit(exit_status(e))
""")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_three_interruptions_then_resume_attributes_every_trace(tmp_path, small_cfg, sig):
    ids = make_corpus(tmp_path / "in", 12, 1, seed=11)
    cfg = small_cfg(per_shard=4, budget=10_000)  # 3 shards of one pack each
    out, piddir = tmp_path / "out", tmp_path / "pids"
    piddir.mkdir()
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(tests=str(HERE), cfg=cfg.model_dump_json(), inp=str(tmp_path / "in"),
                                    out=str(out), piddir=str(piddir)))
    for _ in range(3):
        proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        calls = piddir / f"calls-{proc.pid}"
        deadline = time.time() + 120
        while not calls.exists() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, f"ended before it was interrupted: {proc.communicate()[0][-2000:]!r}"
        proc.send_signal(sig)
        rc = proc.wait(60)
        assert rc == (128 + sig if sig != signal.SIGKILL else -sig), proc.communicate()[0][-2000:]
    assert not (out / "run.json").exists()
    s = run_local([str(tmp_path / "in")], out, cfg, **Fakes().kwargs(), progress=False)
    assert not assert_exactly_once(out, ids), "an interruption was blamed on a trace"
    assert s.attributed == 12 and s.exit_code == 0
    assert json.loads((out / "_ledger.json").read_text()) == {}


class Stops(Fakes):
    """Raises what the engine's SIGTERM handler raises, from inside the first pack."""

    def attribute(self, traces, model, cfg, rendered):
        # without the run's handler, SIGTERM would end the test process itself: fail instead
        assert callable(signal.getsignal(signal.SIGTERM)), "the run installs no SIGTERM handler"
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler interrupts the sleep
        raise AssertionError("SIGTERM did not interrupt the pack")


def test_cli_reports_an_interruption_with_its_exit_status(tmp_path, small_cfg, monkeypatch):
    """`run`/`attribute` under SIGTERM: exit 143 and one line that says how to resume (never a traceback)."""
    from masprism_batch.pipelines import local

    make_corpus(tmp_path / "in", 4, 1, seed=12)
    real = local.run_local

    def run_local_stopping(*a, **kw):
        return real(*a, **{**kw, **Stops().kwargs()})

    monkeypatch.setattr("masprism_batch.pipelines.run_local", run_local_stopping)
    before = signal.getsignal(signal.SIGTERM)  # not SIG_DFL once an earlier Ray test ran ray.init in this process
    res = CliRunner().invoke(app, ["attribute", str(tmp_path / "in"), "-o", str(tmp_path / "out"),
                                   "--model", "tiny-random", "--no-progress"])
    assert res.exit_code == 128 + signal.SIGTERM, res.output
    assert "interrupted (SIGTERM)" in res.output and "re-run the same command" in res.output
    assert signal.getsignal(signal.SIGTERM) is before  # the run's handler is removed, the caller's restored

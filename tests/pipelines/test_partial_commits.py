"""Issue 37 item 3 / issue 35 item 4: an interruption keeps the work that finished, and says so.

Finished packs of an unfinished shard are committed as pieces of it (on an interruption, and every
`engine.commit_seconds`), so a run interrupted after N finished traces keeps at least N minus one pack, by a
signal or by kill -9; the resume runs only the rest, exactly once. The interruption's message names the signal
and what was kept and what will be redone, the re-run says "resuming: N of M done", and `stats/runs.parquet`
has a row for the interrupted invocation."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from masprism_batch.pipelines import run_local
from pipeline_fakes import Fakes, assert_exactly_once, make_corpus
from typer.testing import CliRunner

from masprism_batch.cli import app
from masprism_batch.config import BatchConfig, EngineConfig, ModelConfig, PipelineConfig
from masprism_batch.outdir.reads import read_dataset

HERE = Path(__file__).resolve().parent


def _cfg(per_shard: int, budget: int, commit_seconds: float = 60.0) -> PipelineConfig:
    return PipelineConfig(model=ModelConfig(name="tiny-random"), batch=BatchConfig(token_budget=budget),
                          engine=EngineConfig(traces_per_shard=per_shard, commit_seconds=commit_seconds))


class StopsLater(Fakes):
    """Attributes `after` packs, then stops the run from inside the next one with `sig` (SIGINT: Python's own
    KeyboardInterrupt, as a Ctrl-C gives); records how many traces each finished pack held."""

    def __init__(self, after: int, sig: int, finished: list[int]):
        super().__init__()
        self.after, self.sig, self.finished = after, sig, finished

    def attribute(self, traces, model, cfg, rendered):
        if len(self.finished) == self.after:
            if self.sig == signal.SIGINT:
                raise KeyboardInterrupt
            os.kill(os.getpid(), self.sig)
            time.sleep(5)
            raise AssertionError("the signal did not interrupt the pack")
        out = super().attribute(traces, model, cfg, rendered)
        self.finished.append(len(traces))
        return out


def _committed(out: Path) -> list[str]:
    return read_dataset(out / "attributions").column("trace_id").to_pylist()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_interrupted_run_keeps_finished_packs_and_says_so(tmp_path, sig, caplog):
    ids = make_corpus(tmp_path / "in", 23, 2, seed=None)
    cfg = _cfg(per_shard=64, budget=90)  # one shard of many small packs: per-shard commits would keep nothing
    finished: list[int] = []
    after = 3 + int.from_bytes(os.urandom(1), "big") % 3
    out = tmp_path / "out"
    fake = StopsLater(after, sig, finished)

    def stopping(*a, **kw):
        from masprism_batch.pipelines import local

        return local.run_local(*a, **{**kw, **fake.kwargs()})

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("masprism_batch.pipelines.run_local", stopping)
        res = CliRunner().invoke(app, ["attribute", str(tmp_path / "in"), "-o", str(out), "--model", "tiny-random",
                                       "--no-progress", "--config", _config_file(tmp_path, cfg)])
    assert res.exit_code == 128 + sig, res.output
    name = signal.Signals(sig).name
    assert f"interrupted ({name})" in res.output and "interrupted ()" not in res.output
    kept = _committed(out)
    assert len(kept) >= sum(finished) - max(finished), (len(kept), finished)
    assert len(kept) == sum(finished)  # a signal lets every finished pack be committed
    assert f"{len(kept)} of 23 traces are committed" in " ".join(res.output.split())
    assert f"{23 - len(kept)} will be run on resume" in " ".join(res.output.split())
    assert not (out / "run.json").exists()

    # the stats of the interrupted OUTDIR: a row for that invocation
    res = CliRunner().invoke(app, ["stats", str(out)])
    assert res.exit_code == 0, res.output
    runs = pq.read_table(out / "stats" / "runs.parquet").to_pylist()
    assert [r["status"] for r in runs] == ["interrupted"] and runs[0]["traces"] == len(kept)

    calls = tmp_path / "calls"
    calls.mkdir()
    with caplog.at_level(logging.INFO, logger="masprism_batch.pipelines.commit"):
        s = run_local([str(tmp_path / "in")], out, cfg, **Fakes(piddir=str(calls)).kwargs(), progress=False)
    assert f"resuming: {len(kept)} of 23 done" in caplog.text
    assert s.attributed == 23 and s.exit_code == 0 and s.traces_resumed == len(kept)
    redone = sum(int(x) for f in calls.glob("calls-*") for x in f.read_text().split())
    assert redone == 23 - len(kept), "the resume ran traces that were already committed"
    assert_exactly_once(out, ids)


def _config_file(tmp_path: Path, cfg: PipelineConfig) -> str:
    p = tmp_path / "cfg.json"
    p.write_text(cfg.model_dump_json(include={"model", "batch", "engine"}))
    return str(p)


DRIVER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    from pipeline_fakes import Fakes
    from masprism_batch.config import PipelineConfig
    from masprism_batch.pipelines import run_local
    cfg = PipelineConfig.model_validate_json({cfg!r})
    run_local([{inp!r}], {out!r}, cfg, **Fakes(delay=0.4, piddir={piddir!r}).kwargs(), progress=False)
""")


def test_kill_9_loses_at_most_one_pack_then_resume_is_exactly_once(tmp_path):
    """commit_seconds 0: every finished pack is committed at once, so a kill -9 loses only what was running."""
    ids = make_corpus(tmp_path / "in", 20, 1, seed=None)
    cfg = _cfg(per_shard=64, budget=90, commit_seconds=0)
    out, piddir = tmp_path / "out", tmp_path / "pids"
    piddir.mkdir()
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(tests=str(HERE), cfg=cfg.model_dump_json(), inp=str(tmp_path / "in"),
                                    out=str(out), piddir=str(piddir)))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    calls = piddir / f"calls-{proc.pid}"
    deadline = time.time() + 180
    while (not calls.exists() or len(calls.read_text().split()) < 5) and proc.poll() is None \
            and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()[0][-2000:]
    proc.send_signal(signal.SIGKILL)
    proc.wait(60)
    started = [int(x) for x in calls.read_text().split()]
    finished = started[:-1]  # the last call was running when the process died
    kept = _committed(out)
    assert len(kept) >= sum(finished) - max(finished), (len(kept), started)
    s = run_local([str(tmp_path / "in")], out, cfg, **Fakes(piddir=str(piddir)).kwargs(), progress=False)
    assert s.attributed == 20
    assert not assert_exactly_once(out, ids)
    mine = piddir / f"calls-{os.getpid()}"
    assert sum(int(x) for x in mine.read_text().split()) == 20 - len(kept)


def test_a_changed_ranker_file_refuses_the_resume(tmp_path):
    """The ranker's content is bound to OUTDIR, not only its path: re-fitting the file between a crash and the
    resume would mix two rankers' verdicts in one OUTDIR."""
    from masprism_batch.verdict.rankfile import RankerFile

    make_corpus(tmp_path / "in", 10, 1, seed=None)
    ranker = tmp_path / "ranker.json"
    RankerFile("fake-model", {}, {"date": "2026-11-26", "nonce": os.urandom(4).hex()}).write(ranker)
    base = _cfg(per_shard=4, budget=90)
    cfg = base.model_copy(update={"method": base.method.model_copy(update={"ranker": str(ranker)})})
    out = tmp_path / "out"
    finished: list[int] = []
    with pytest.raises(KeyboardInterrupt):
        run_local([str(tmp_path / "in")], out, cfg, **StopsLater(2, signal.SIGINT, finished).kwargs(), progress=False)
    RankerFile("fake-model", {}, {"date": "2026-11-27", "nonce": os.urandom(4).hex()}).write(ranker)  # re-fitted
    with pytest.raises(ValueError, match=r"ranker file .*ranker.json changed since this OUTDIR's run began"):
        run_local([str(tmp_path / "in")], out, cfg, **Fakes().kwargs(), progress=False)


def test_fit_refuses_an_unfinished_run_unless_told(tmp_path):
    make_corpus(tmp_path / "in", 8, 1, seed=None)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        run_local([str(tmp_path / "in")], out, _cfg(per_shard=4, budget=90),
                  **StopsLater(2, signal.SIGINT, []).kwargs(), progress=False)
    res = CliRunner().invoke(app, ["fit", str(out), "-o", str(tmp_path / "r.json")])
    assert res.exit_code == 1 and "did not finish" in res.output and "--allow-partial" in res.output, res.output
    res = CliRunner().invoke(app, ["fit", str(out), "-o", str(tmp_path / "r.json"), "--allow-partial"])
    assert "did not finish" in res.output and "warning" in res.output  # told: it goes on to the labels
    assert "resume it" not in res.output

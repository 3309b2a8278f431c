"""Ray engine on a local 2-CPU cluster: same outputs as local, a killed actor, a poisoned trace that kills
its worker, and a killed driver followed by a re-run. Fake stages keep each test to seconds."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from masprism_batch.pipelines import run_local, run_ray
from pipeline_fakes import Fakes, assert_exactly_once, make_corpus

from masprism_batch.outdir.reads import read_dataset

ray = pytest.importorskip("ray", reason="the Ray engine tests need ray[data] (dev extra)")
pytestmark = pytest.mark.ray

TIME_COLUMNS = ["attributed_at", "seconds_pass1", "seconds_pass2"]
# how long a test waits for a run to reach the point it acts at (a commit, a model loaded): only a bound against
# a hang, never a pace, since the loops below stop as soon as the point is reached; a 2-core CI machine under
# load took 6.7 minutes for a run that takes seconds alone, and a killer that gave up after 60 s failed the test
PATIENCE_S = 600


def committed(out: Path) -> int:
    return len(list((out / "_manifest").glob("shard-[0-9a-f]*.json")))


class WhileTheRunIsOn:
    """`with WhileTheRunIsOn(act) as done: run...`: calls `act(done)` every 50 ms on a thread until it returns
    True, the run (the `with` body) ends or PATIENCE_S pass; `done` is the dict `act` records what it did in."""

    def __init__(self, act):
        self.act, self.done, self.over = act, {}, threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        deadline = time.time() + PATIENCE_S
        while not self.over.is_set() and time.time() < deadline and not self.act(self.done):
            time.sleep(0.05)

    def __enter__(self) -> dict:
        self.thread.start()
        return self.done

    def __exit__(self, *exc) -> None:
        self.over.set()
        self.thread.join()


def kill_first_actor(out: Path, piddir: Path):
    """SIGKILL the first model actor (by the pid file its model load writes) once a shard is committed; records
    done["pid"] and done["committed"] (the shards committed before the kill)."""
    def act(done: dict) -> bool:
        pids, n = sorted(piddir.glob("pid-*")), committed(out)
        if not (pids and n):
            return False
        done["pid"], done["committed"] = int(pids[0].name[4:]), n
        os.kill(done["pid"], signal.SIGKILL)
        return True

    return WhileTheRunIsOn(act)


def wait_for_commits(out: Path, proc: subprocess.Popen, n: int) -> None:
    """Until `n` shards of the driver `proc` are committed or it ended (bounded by PATIENCE_S)."""
    deadline = time.time() + PATIENCE_S
    while time.time() < deadline and proc.poll() is None and committed(out) < n:
        time.sleep(0.05)


@pytest.fixture(scope="module")
def cluster():
    import pipeline_fakes
    import ray.cloudpickle

    # Ray workers do not have tests/ on sys.path: ship the fakes by value.
    ray.cloudpickle.register_pickle_by_value(pipeline_fakes)
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


def _table(outdir: Path, name: str):
    t = read_dataset(outdir / name)
    t = t.drop_columns([c for c in TIME_COLUMNS + ["time"] if c in t.column_names])
    key = "record_id" if name == "errors" else "trace_id"
    return sorted(t.to_pylist(), key=lambda r: (str(r[key]), r.get("step", 0), str(r.get("input_path"))))


def test_ray_matches_local(tmp_path, small_cfg, cluster):
    """One shard of many packs: both actors must get packs, and the outputs equal the local engine's."""
    ids = make_corpus(tmp_path / "in", 31, 3, bad_lines=2, marks={7: "RAISE"})
    # no time-bound piece commits (engine.commit_seconds, 60 s): on a loaded machine the Ray run passed a minute
    # and committed a piece the local run did not, so the part files differed though every row was the same
    cfg = small_cfg(per_shard=64, budget=120, commit_seconds=3600.0)
    run_local([str(tmp_path / "in")], tmp_path / "local", cfg, **Fakes().kwargs(), progress=False)
    piddir = tmp_path / "pids"
    piddir.mkdir()
    s = run_ray([str(tmp_path / "in")], tmp_path / "ray", cfg, workers=2,
                **Fakes(delay=0.02, piddir=str(piddir)).kwargs(ray=True), progress=False)
    assert s.engine == "ray" and s.workers == 2 and s.shards_run == 1
    assert len(list(piddir.glob("calls-*"))) == 2, "the packs of one shard did not spread over both actors"
    assert_exactly_once(tmp_path / "ray", ids)
    for name in ("traces", "attributions", "step_scores", "errors"):
        assert _table(tmp_path / "ray", name) == _table(tmp_path / "local", name), name
    assert sorted(p.name for p in (tmp_path / "ray" / "attributions").iterdir()) == \
        sorted(p.name for p in (tmp_path / "local" / "attributions").iterdir())


def test_killed_actor_mid_run(tmp_path, small_cfg, cluster):
    ids = make_corpus(tmp_path / "in", 60, 4)
    piddir = tmp_path / "pids"
    piddir.mkdir()
    out = tmp_path / "out"
    with kill_first_actor(out, piddir) as killed:
        s = run_ray([str(tmp_path / "in")], out, small_cfg(per_shard=6, budget=150), workers=2,
                    **Fakes(delay=0.08, piddir=str(piddir)).kwargs(ray=True), progress=False)
    assert "pid" in killed, "the actor was never killed"
    assert killed["committed"] < s.shards_run, "the kill came after the run was over"
    assert len(list(piddir.glob("pid-*"))) >= 3  # the killed actor was restarted (its model loaded again)
    reasons = assert_exactly_once(out, ids)
    assert not reasons and s.attributed == len(ids)


def test_trace_that_kills_its_worker_goes_to_errors(tmp_path, small_cfg, cluster):
    ids = make_corpus(tmp_path / "in", 9, 1, marks={4: "CRASH"})
    s = run_ray([str(tmp_path / "in")], tmp_path / "out", small_cfg(per_shard=9, budget=10_000), workers=1,
                **Fakes(crash=True).kwargs(ray=True), progress=False)
    reasons = assert_exactly_once(tmp_path / "out", ids)
    assert reasons == {ids[4]: "worker_crashed"} and s.attributed == 8


def test_trace_that_kills_its_cpu_stage_worker_goes_to_errors(tmp_path, small_cfg, cluster):
    """Issue 17: Ray retries a CPU-stage task whose worker died without limit; the ledger bounds it by the same
    rule as the model stage (twice whole, then trace by trace, a trace that crashed alone -> errors)."""
    ids = make_corpus(tmp_path / "in", 8, 1, marks={3: "CRASH_RENDER"})
    s = run_ray([str(tmp_path / "in")], tmp_path / "out", small_cfg(per_shard=8, budget=10_000), workers=1,
                **Fakes(crash=True).kwargs(ray=True), progress=False)
    reasons = assert_exactly_once(tmp_path / "out", ids)
    assert reasons == {ids[3]: "worker_crashed"} and s.attributed == 7


DRIVER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    import ray, ray.cloudpickle, pipeline_fakes
    from masprism_batch.config import PipelineConfig
    from masprism_batch.pipelines import run_ray
    ray.cloudpickle.register_pickle_by_value(pipeline_fakes)
    cfg = PipelineConfig.model_validate_json({cfg!r})
    run_ray([{inp!r}], {out!r}, cfg, workers=2, address={address!r},
            **pipeline_fakes.Fakes(delay=0.08).kwargs(ray=True), progress=False)
""")


def test_killed_driver_then_rerun(tmp_path, small_cfg, cluster):
    ids = make_corpus(tmp_path / "in", 60, 3)
    cfg = small_cfg(per_shard=5, budget=150)
    out = tmp_path / "out"
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(tests=str(Path(__file__).parent), cfg=cfg.model_dump_json(),
                                    inp=str(tmp_path / "in"), out=str(out), address=cluster))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_commits(out, proc, 2)
    assert proc.poll() is None, f"driver ended before it could be killed (rc={proc.returncode})"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = committed(out)
    assert not (out / "run.json").exists() and before < 12
    s = run_ray([str(tmp_path / "in")], out, cfg, workers=2, **Fakes().kwargs(ray=True), progress=False)
    assert s.shards_skipped == before and s.shards_run == 12 - before
    reasons = assert_exactly_once(out, ids)
    assert not reasons


def test_tiny_model_ray_matches_local_with_killed_actor(tmp_path, cluster):
    """The real stages and the tiny random model: one actor killed mid-run, every trace exactly once, and
    the same content as the local engine (one torch thread on both sides, so float sums agree)."""
    from pipeline_fakes import RealModel

    from masprism_batch.config import BatchConfig, EngineConfig, ModelConfig, PipelineConfig

    ids = make_corpus(tmp_path / "in", 10, 2)
    cfg = PipelineConfig(model=ModelConfig(name="tiny-random", threads=1),
                         batch=BatchConfig(token_budget=600), engine=EngineConfig(traces_per_shard=2))
    run_local([str(tmp_path / "in")], tmp_path / "local", cfg, progress=False)
    piddir = tmp_path / "pids"
    piddir.mkdir()
    out = tmp_path / "ray"
    with kill_first_actor(out, piddir) as killed:
        s = run_ray([str(tmp_path / "in")], out, cfg, workers=2, **RealModel(piddir=str(piddir)).kwargs(ray=True),
                    progress=False)
    assert "pid" in killed and killed["committed"] < s.shards_run
    assert_exactly_once(out, ids)
    for name in ("traces", "attributions", "step_scores", "errors"):
        assert _table(out, name) == _table(tmp_path / "local", name), name


STOPPABLE = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {tests!r})
    import ray, ray.cloudpickle, pipeline_fakes
    from masprism_batch.config import PipelineConfig
    from masprism_batch.pipelines import run_ray
    from masprism_batch.pipelines.interrupts import exit_status
    ray.cloudpickle.register_pickle_by_value(pipeline_fakes)
    cfg = PipelineConfig.model_validate_json({cfg!r})
    try:
        s = run_ray([{inp!r}], {out!r}, cfg, workers=1, address={address!r},
                    **pipeline_fakes.Fakes(delay={delay!r}).kwargs(ray=True), progress=False)
    except KeyboardInterrupt as e:
        print("INTERRUPTED", e)
        sys.exit(exit_status(e))
    print("SUMMARY", json.dumps(s.facts.ray_address))
""")


def test_sigterm_to_the_driver_is_a_clean_stop_then_resume(tmp_path, small_cfg, cluster):
    """Issue 27 item 8: ray.init puts Ray's C++ fatal-signal handler on SIGTERM (stack dump, abort, exit 134);
    the run's own handler must win: the run unwinds, exits 143, and the re-run finishes exactly once."""
    ids = make_corpus(tmp_path / "in", 40, 2)
    cfg = small_cfg(per_shard=4, budget=150)
    out = tmp_path / "out"
    script = tmp_path / "driver.py"
    script.write_text(STOPPABLE.format(tests=str(Path(__file__).parent), cfg=cfg.model_dump_json(), delay=0.1,
                                       inp=str(tmp_path / "in"), out=str(out), address=cluster))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wait_for_commits(out, proc, 1)
    assert proc.poll() is None, f"driver ended before SIGTERM (rc={proc.returncode})"
    proc.send_signal(signal.SIGTERM)
    text = proc.communicate(timeout=PATIENCE_S)[0]
    assert proc.returncode == 128 + signal.SIGTERM, text[-3000:]
    assert "INTERRUPTED SIGTERM" in text and "SIGTERM received" not in text, text[-3000:]
    assert not (out / "run.json").exists()
    s = run_ray([str(tmp_path / "in")], out, cfg, workers=2, **Fakes().kwargs(ray=True), progress=False)
    assert not assert_exactly_once(out, ids) and s.attributed == 40


def test_ray_address_in_the_environment_joins_that_cluster(tmp_path, small_cfg, cluster):
    """Issue 27 item 8: RAY_ADDRESS set and no --address: join it (Ray's own convention), instead of failing
    with "num_cpus and num_gpus must not be provided" while trying to start a private cluster."""
    ids = make_corpus(tmp_path / "in", 6, 1)
    script = tmp_path / "driver.py"
    script.write_text(STOPPABLE.format(tests=str(Path(__file__).parent), cfg=small_cfg().model_dump_json(), delay=0.0,
                                       inp=str(tmp_path / "in"), out=str(tmp_path / "out"), address=None))
    env = {**os.environ, "RAY_ADDRESS": cluster}
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=PATIENCE_S)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    assert f'SUMMARY "{cluster}"' in res.stdout
    assert not assert_exactly_once(tmp_path / "out", ids)


def test_killed_ledger_mid_run_then_the_run_completes_exactly_once(tmp_path, small_cfg, cluster):
    """Issue 37: the ledger actor's calls are retried and its counts kept (OUTDIR/_ledger.json) across its restart."""
    import json

    import ray
    from masprism_batch.pipelines.ray_engine import LEDGER_ACTOR

    ids = make_corpus(tmp_path / "in", 24, 2)
    out = tmp_path / "out"

    def kill_the_ledger(done: dict) -> bool:
        try:
            if not committed(out):
                return False
            run_id = json.loads((out / "_manifest" / "HEADER.json").read_text())["run_id"]
            ray.kill(ray.get_actor(f"{LEDGER_ACTOR}-{run_id}"), no_restart=False)
        except (ValueError, OSError):
            return False  # not created yet
        done["at"] = committed(out)
        return True

    with WhileTheRunIsOn(kill_the_ledger) as killed:
        s = run_ray([str(tmp_path / "in")], out, small_cfg(per_shard=4, budget=150), workers=1,
                    **Fakes(delay=0.1).kwargs(ray=True), progress=False)
    assert "at" in killed, "the ledger was never killed"
    assert killed["at"] < s.shards_run, "the kill came after the run was over"
    assert not assert_exactly_once(out, ids) and s.attributed == 24

"""The Ray engine: the same shards and stage functions as the local engine, on Ray Data.

    shards (driver) -> flat_map(prepare_shard)  CPU tasks: read, render pass 1, token-budget packs
                    -> map_batches(ModelActor)  stateful actors: model loaded once, both passes per pack
                    -> iter_rows (driver)       Committer: per-shard atomic commit + manifest

Fault tolerance: CPU tasks are retried on a worker crash (Ray Data's default `max_retries=-1`); actors
restart without limit and their tasks are retried (Ray Data's defaults for actor pools). A ledger actor counts
how often each shard's CPU stage, each pack and each trace was started and finished, so a unit whose worker
died twice is re-run one trace at a time and a trace that killed a worker on its own is written to errors/
(`worker_crashed`, stage `render` or `prefill`) instead of killing workers forever: the same rule in both
stages, and in the local engine (across resumes, `local.FileLedger`).

A cluster started here (no `--address`) is private: every Ray process binds 127.0.0.1 only, with Ray's token
authentication where the installed Ray has it, and it is shut down when the run ends (also on SIGTERM/SIGINT).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from masprism_batch.config import PipelineConfig
from masprism_batch.io import OutdirLock

from .driver import Committer, RunSummary, resume_config
from .plan import Shard, plan_inputs
from .select import Selection
from .stages import PACK_CRASHES_BEFORE_ONE_BY_ONE, CrashGuard, attribute_traces, load_model, load_tokenizer
from .work import attribute_pack, prepare_shard

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"

_CTX = {  # Ray Data settings of a run (restored afterwards: the context is process-wide)
    "enable_progress_bars": False,  # the driver's own bar counts traces and tokens
    "max_errored_blocks": 0,
    "actor_task_retry_on_errors": False,  # Python errors are handled per trace inside the actor
    "target_max_block_size": 1,  # one pack per block, so the packs of one shard spread over all actors
}
_TOKENIZERS: dict[Any, Any] = {}  # per worker process: the tokenizer is loaded once, not once per shard


def _ledger_guard(ledger, key: str) -> CrashGuard | None:
    """begin(key) on the ledger actor; past the crash rule, a guard that pins crashes to single traces."""
    import ray

    crashes = ray.get(ledger.begin.remote(key))
    if crashes < PACK_CRASHES_BEFORE_ONE_BY_ONE:
        return None
    log.warning("%s crashed a worker %d times: running its traces one by one", key, crashes)
    return CrashGuard(lambda k: ray.get(ledger.begin.remote(k)), lambda k: ray.get(ledger.done.remote(k)), key + "/")


def _prepare(row: dict[str, Any], cfg_json: str, load_tokenizer, ledger=None) -> list[dict[str, Any]]:
    import ray

    cfg = PipelineConfig.model_validate_json(cfg_json)
    key = (cfg.model.model_dump_json(), load_tokenizer)  # the loader too: another run may pass another one
    if key not in _TOKENIZERS:
        _TOKENIZERS[key] = load_tokenizer(cfg)
    shard = Shard.from_json(row["shard"])
    if ledger is None:
        return prepare_shard(shard, *_TOKENIZERS[key], cfg)
    lkey = f"{shard.shard_id}/prepare"  # Ray retries a task whose worker died: the ledger bounds it
    out = prepare_shard(shard, *_TOKENIZERS[key], cfg, guard=_ledger_guard(ledger, lkey))
    ray.get(ledger.done.remote(lkey))
    return out


class Ledger:
    """Start/finish counts per key, held by one actor; a crash leaves a start without a finish."""

    def __init__(self):
        self.started: Counter = Counter()
        self.finished: Counter = Counter()

    def begin(self, key: str) -> int:
        crashes = self.started[key] - self.finished[key]
        self.started[key] += 1
        return crashes

    def done(self, key: str) -> None:
        self.finished[key] += 1


class ModelActor:
    """Loads the model once per actor (re-loaded after a restart) and runs both passes per pack."""

    def __init__(self, cfg_json: str, ledger, threads: int | None, load_model, attribute):
        self.cfg = PipelineConfig.model_validate_json(cfg_json)
        self.ledger, self.attribute = ledger, attribute
        self.model = load_model(self.cfg)
        if threads and "torch" in sys.modules:  # a model without torch (test fakes) needs no thread setting
            sys.modules["torch"].set_num_threads(threads)
        log.info("actor pid %d loaded %s", os.getpid(), getattr(self.model, "model_id", "?"))

    def __call__(self, batch):
        import pyarrow as pa
        import ray

        out = []
        for task in batch.to_pylist():
            key = f"{task['shard_id']}/{task['pack_index']}"
            guard = _ledger_guard(self.ledger, key)
            out.append(attribute_pack(task, self.model, self.cfg, guard=guard, attribute=self.attribute))
            ray.get(self.ledger.done.remote(key))
        return pa.Table.from_pylist(out)


def private_cluster_env() -> dict[str, str]:
    """Environment of a private local cluster: Ray's token authentication with a fresh random token held only
    in this process's environment (inherited by the Ray processes it starts; nothing is written to
    ~/.ray), where the installed Ray supports it (2.52+). An explicit RAY_AUTH_MODE of the user is kept."""
    import secrets

    try:
        import ray._private.authentication.authentication_token_setup  # noqa: F401 - present since Ray 2.52
    except ImportError:
        return {}
    if "RAY_AUTH_MODE" in os.environ:
        return {}
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}


def _init_ray(address: str | None, num_cpus: int | None) -> dict[str, str | None] | None:
    """Join `address` or start a private local cluster bound to 127.0.0.1. Returns None when Ray was already
    initialised or `address` was joined (nothing to stop), else the environment variables this call set
    (with their previous values, restored by `_stop_ray`)."""
    import ray

    if ray.is_initialized():
        return None
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True, "configure_logging": False}
    if address:
        ray.init(address=address, **kwargs)
        return None
    from ray._private import ray_constants

    # Loopback only: Ray maps a node address of 127.0.0.1 to the host's external IP unless its single-machine
    # mode is on (the default on macOS/Windows, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0): then the node address
    # is 127.0.0.1 and GCS, raylet, object manager, agents and workers bind to it (tests/pipelines).
    env = {**private_cluster_env(), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    _refresh_ray_config("RAY_AUTH_MODE" in env)
    cluster_mode = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False  # read at import time; this process imported Ray already
    try:
        ray.init(num_cpus=num_cpus or os.cpu_count(), _node_ip_address=LOOPBACK, **kwargs)
    except BaseException:
        ray_constants.ENABLE_RAY_CLUSTER = cluster_mode
        _restore_env(saved)
        raise
    saved["__cluster_mode__"] = cluster_mode
    return saved


def _refresh_ray_config(changed: bool) -> None:
    """Ray caches its config (auth mode) per process: re-read it after the environment changed."""
    if not changed:
        return
    with contextlib.suppress(Exception):
        from ray._private.authentication.authentication_token_setup import Config

        Config.initialize("")
    with contextlib.suppress(Exception):
        from ray._private.authentication.authentication_token_setup import AuthenticationTokenLoader

        loader = AuthenticationTokenLoader.instance()
        for name in ("reset_cache", "ResetCache", "reset"):
            if hasattr(loader, name):
                getattr(loader, name)()
                break


def _restore_env(saved: dict[str, Any]) -> None:
    if "__cluster_mode__" in saved:
        from ray._private import ray_constants

        saved = dict(saved)
        ray_constants.ENABLE_RAY_CLUSTER = saved.pop("__cluster_mode__")
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    _refresh_ray_config("RAY_AUTH_MODE" in saved)


_REAPER = r"""
import json, os, select, sys, psutil
known = {}  # pid -> Process: the recorded roots and every descendant seen so far (children can be reparented
            # when their parent dies first, so the tree is remembered while the driver lives)
for pid, created in json.loads(sys.argv[1]):
    try:
        p = psutil.Process(pid)
        if abs(p.create_time() - created) < 0.5:  # the very process recorded, not a reused pid
            known[pid] = p
    except psutil.Error:
        pass
def refresh():
    for p in list(known.values()):
        try:
            for c in p.children(recursive=True):
                known.setdefault(c.pid, c)
        except psutil.Error:
            pass
while True:  # EOF on stdin: the driver closed the pipe (normal end) or died (kill -9)
    refresh()
    if select.select([0], [], [], 1.0)[0] and not os.read(0, 4096):
        break
refresh()
procs = [p for p in known.values() if p.is_running()]
for p in procs:
    try:
        p.terminate()
    except psutil.Error:
        pass
_, alive = psutil.wait_procs(procs, timeout=5)
for p in alive:
    try:
        p.kill()
    except psutil.Error:
        pass
"""


def _child_pids() -> set[tuple[int, float]]:
    try:
        import psutil

        return {(c.pid, c.create_time()) for c in psutil.Process().children()}
    except Exception:  # noqa: BLE001 - no psutil: no reaper
        return set()


def _start_reaper(roots: set[tuple[int, float]]):
    """A watchdog for the private cluster's processes (the driver's children that `ray.init` started, and their
    descendants): it waits for EOF on a pipe from the driver, then stops them. A driver killed with SIGKILL
    closes the pipe too, so its Ray processes go at once instead of lingering until they notice."""
    import json
    import subprocess

    if not roots:
        return None
    try:
        return subprocess.Popen([sys.executable, "-c", _REAPER, json.dumps(sorted(roots))], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError as e:
        log.warning("no watchdog for the local Ray cluster (%s)", e)
        return None


def _stop_reaper(reaper) -> None:
    if reaper is None:
        return
    with contextlib.suppress(OSError):
        reaper.stdin.close()  # after ray.shutdown(): it stops whatever is left, then exits
    with contextlib.suppress(Exception):
        reaper.wait(timeout=15)


@contextlib.contextmanager
def _stop_on_signals():
    """SIGTERM/SIGHUP end the run through the normal path (finally: ray.shutdown()), so a terminated driver
    does not leave its private cluster behind. (SIGKILL cannot be caught: the watchdog `_start_reaper` then
    stops the cluster's processes.)"""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    old = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def actor_resources(workers: int | None, cfg: PipelineConfig) -> tuple[int, dict[str, float], int | None]:
    """(actor count, per-actor resources, torch threads): one GPU per actor where the cluster has GPUs
    and the config does not pin the CPU, otherwise an equal share of the cluster's CPUs."""
    import ray

    res = ray.cluster_resources()
    gpus, cpus = int(res.get("GPU", 0)), float(res.get("CPU", 1))
    if gpus and cfg.model.device != "cpu":
        n = workers or gpus
        return n, {"num_gpus": 1, "num_cpus": 1}, cfg.model.threads
    n = workers or 1
    share = max(0.1, (cpus - cfg.engine.cpu_stage_cpus) / n)
    threads = cfg.model.threads or max(1, math.floor(cpus / n))
    return n, {"num_cpus": share}, threads


def run_ray(inputs: list[str], outdir: str | Path, cfg: PipelineConfig, *, workers: int | None = None,
            address: str | None = None, num_cpus: int | None = None, fmt: str = "auto",
            progress: bool = True, select: Selection | None = None, load_model=load_model,
            load_tokenizer=load_tokenizer, attribute=attribute_traces) -> RunSummary:
    """Attribute `inputs` into OUTDIR on Ray Data (resumable; same outputs as `run_local`).

    The model stage's functions (`load_model(cfg)` in each actor, `load_tokenizer(cfg)` in each CPU worker,
    `attribute(traces, model, cfg, renders)` per pack) are shipped to the workers by Ray; defaults: the
    project's (`pipelines.stages`)."""
    import ray

    outdir = Path(outdir)
    with OutdirLock(outdir, "run --engine ray") as lock, _stop_on_signals():
        cfg = resume_config(outdir, cfg)
        plan = plan_inputs(list(inputs), outdir, fmt, cfg.engine.traces_per_shard, cfg.ingest, select)
        committer = Committer(outdir, cfg, plan, "ray", workers or 1, progress=progress, lock=lock)
        extra: dict[str, Any] = {"ray_address": address or "local"}
        if not committer.pending:  # a re-run of a finished run: no cluster needed
            return committer.finish(extra)
        before = _child_pids()
        started = _init_ray(address, num_cpus)
        reaper = _start_reaper(_child_pids() - before) if started is not None else None
        if started is not None:
            extra["ray_private_cluster"] = {"bind": LOOPBACK,
                                            "token_auth": os.environ.get("RAY_AUTH_MODE", "").lower() == "token"}
        try:
            n, resources, threads = actor_resources(workers, cfg)
            committer.workers = n
            extra.update(actor_resources=resources, actor_threads=threads)
            fns = {"load_model": load_model, "load_tokenizer": load_tokenizer, "attribute": attribute}
            _execute(committer, committer.pending, cfg, fns, n, resources, threads)
            return committer.finish(extra)
        finally:
            if started is not None:
                ray.shutdown()
                _restore_env(started)
                _stop_reaper(reaper)


def _execute(committer: Committer, pending: list[Shard], cfg: PipelineConfig, fns: dict[str, Any], n: int,
             resources: dict[str, float], threads: int | None) -> None:
    import ray
    import ray.data

    ctx = ray.data.DataContext.get_current()
    saved = {k: getattr(ctx, k) for k in _CTX}
    for k, v in _CTX.items():
        setattr(ctx, k, v)
    ctx.execution_options.preserve_order = False
    ledger = ray.remote(num_cpus=0, max_restarts=-1)(Ledger).remote()
    cfg_json = cfg.model_dump_json()
    t0 = time.perf_counter()
    try:
        ds = ray.data.from_items([{"shard": s.to_json()} for s in pending], override_num_blocks=len(pending))
        ds = ds.flat_map(_prepare, fn_kwargs={"cfg_json": cfg_json, "load_tokenizer": fns["load_tokenizer"],
                                              "ledger": ledger},
                         num_cpus=cfg.engine.cpu_stage_cpus)
        # Ray Data's actor defaults are the fault tolerance wanted here: max_restarts=-1 and
        # max_task_retries=-1 (a killed actor comes back and its pack is retried; the ledger bounds loops).
        ds = ds.map_batches(ModelActor, batch_size=1, batch_format="pyarrow",
                            compute=ray.data.ActorPoolStrategy(size=n),
                            fn_constructor_kwargs={"cfg_json": cfg_json, "ledger": ledger, "threads": threads,
                                                   "load_model": fns["load_model"],
                                                   "attribute": fns["attribute"]}, **resources)
        for row in ds.iter_rows():
            committer.add(row)
    finally:
        ray.kill(ledger)
        for k, v in saved.items():
            setattr(ctx, k, v)
    log.info("ray execution of %d shards took %.1f s", len(pending), time.perf_counter() - t0)

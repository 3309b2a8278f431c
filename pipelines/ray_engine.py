"""The Ray engine: the same shards and stage functions as the local engine, on Ray Data.

    shards (driver) -> flat_map(_prepare)       CPU tasks: read, render pass 1, bounded packs as they are cut
                    -> map_batches(ModelActor)  stateful actors: model loaded once, both passes per pack,
                                                two packs in flight (one on the device, one in its host tail)
                    -> iter_rows (driver)       Committer: per-shard atomic commit + manifest

Fault tolerance: CPU tasks are retried on a worker crash (Ray Data's default `max_retries=-1`); actors
restart without limit and their tasks are retried (Ray Data's defaults for actor pools). A ledger actor counts
how often each shard's CPU stage, each pack and each trace was started and finished, so a unit whose worker
died twice is re-run one trace at a time and a trace that killed a worker on its own twice is written to errors/
(`worker_crashed`, stage `render` or `prefill`) instead of killing workers forever: the same rule in both
stages, and in the local engine (across resumes, `crash_guard.FileLedger`). The ledger keeps its counts in
OUTDIR/_ledger.json (a `FileLedger`, on the driver's node), so a ledger actor that is killed restarts with them
(`max_restarts=-1`), and every call to it is retried (`ledger_call`) instead of failing the run.

A cluster started here (no `--address`) is private and stopped when the run ends (`ray_cluster.py`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from masprism_batch.pipelines.commit import Committer, open_run
from masprism_batch.pipelines.contracts import PackResult, PackTask
from masprism_batch.pipelines.interrupts import interruptible, keeping_finished
from masprism_batch.pipelines.model_stage import ModelStage, load_model, load_tokenizer
from masprism_batch.pipelines.pack_work import finish_pack, shard_packs, start_pack
from masprism_batch.pipelines.packs import PackRunner, with_pack_bound
from masprism_batch.pipelines.plan import Shard
from masprism_batch.pipelines.progress import Progress
from masprism_batch.pipelines.ray_budget import cluster_token_budget, wants_gpu_sizing
from masprism_batch.pipelines.ray_cluster import ray_cluster
from masprism_batch.pipelines.ray_ledger import LEDGER_ACTOR, Ledger, ledger_call, ledger_guard
from masprism_batch.pipelines.resume import resume_config
from masprism_batch.pipelines.run_summary import RunFacts, RunSummary
from masprism_batch.pipelines.selection import Selection

from masprism_batch.config import PipelineConfig
from masprism_batch.outdir.parts import OutdirLock
from masprism_batch.stage.budget import resolve_budget
from masprism_batch.verdict.rankfile import RankerSetting

log = logging.getLogger(__name__)

_CTX = {  # Ray Data settings of a run (restored afterwards: the context is process-wide)
    "enable_progress_bars": False,  # the driver's own bar counts traces and tokens
    "max_errored_blocks": 0,
    "actor_task_retry_on_errors": False,  # Python errors are handled per trace inside the actor
    "target_max_block_size": 1,  # one pack per block, so the packs of one shard spread over all actors
}
_TOKENIZERS: dict[Any, Any] = {}  # per worker process: the tokenizer is loaded once, not once per shard
_POOLS: dict[Any, Any] = {}  # per worker process: its render pool, started once


def _prepare(row: dict[str, Any], cfg_json: str, load_tokenizer, ledger=None) -> Iterator[dict[str, Any]]:
    """A shard's packs as they are cut (`pack_work.shard_packs`, window by window): a generator, so Ray Data hands
    each pack to the model actors while the rest of the shard renders (one block per pack, `_CTX`); a run of
    one shard overlaps its render with the model too. Rendered on the process pool the local engine uses
    (`render.pool.RenderPool`) where the task has CPUs for one (`engine.cpu_stage_cpus` >= 2)."""
    cfg = PipelineConfig.model_validate_json(cfg_json)
    key = (cfg.model.model_dump_json(), load_tokenizer)  # the loader too: another run may pass another one
    if key not in _TOKENIZERS:
        _TOKENIZERS[key] = load_tokenizer(cfg)
    tokenizer, context = _TOKENIZERS[key]
    shard = Shard.from_json(row["shard"])
    pool = _render_pool(tokenizer, int(cfg.engine.cpu_stage_cpus))
    if ledger is None:
        for t in shard_packs(shard, tokenizer, context, cfg, render=pool):
            yield t.to_row()  # Ray Data rows are dicts: `PackTask.from_row` on the other side
        return
    lkey = f"{shard.shard_id}/prepare"  # Ray retries a task whose worker died: the ledger bounds it
    for t in shard_packs(shard, tokenizer, context, cfg, guard=ledger_guard(ledger, lkey), render=pool):
        yield t.to_row()
    ledger_call(ledger, "done", lkey)


def _render_pool(tokenizer, cpus: int):
    """This worker process's render pool (kept, like its tokenizer), or None with fewer than 2 CPUs."""
    if cpus < 2:
        return None
    from masprism_batch.render.pool import RenderPool

    key = (id(tokenizer), cpus)
    if key not in _POOLS:
        _POOLS[key] = RenderPool(tokenizer, cpus)
    return _POOLS[key]


IN_FLIGHT = 2  # packs per model actor: one holds the device while the other's host tail runs


class ModelActor:
    """Loads the model once per actor (re-loaded after a restart) and runs both passes per pack, `IN_FLIGHT`
    packs at once (Ray Data calls it from that many threads): the device half of each under one lock
    (`packs.PackRunner`), the host tail outside it, so pack n's tail runs while pack n+1 is on the device.

    The ledger stays off the device's path: a pack's start is recorded (a blocking call: its answer decides
    the crash rule) while the other pack holds the device, its finish is sent without waiting. A pack with a
    crash history runs alone (`_Gate`), so a crash is pinned to it and to nothing beside it."""

    def __init__(self, cfg_json: str, ledger, threads: int | None, load_model, attribute):
        self.cfg = PipelineConfig.model_validate_json(cfg_json)
        self.ledger, self.attribute = ledger, attribute
        self.model = load_model(self.cfg)
        self.runner = PackRunner(self.model, self.cfg, attribute)
        self.gate = _Gate()
        if threads and "torch" in sys.modules:  # a model without torch (test fakes) needs no thread setting
            sys.modules["torch"].set_num_threads(threads)
        log.info("actor pid %d loaded %s", os.getpid(), getattr(self.model, "model_id", "?"))

    def __call__(self, batch):
        import pyarrow as pa

        out = []
        for row in batch.to_pylist():
            task = PackTask.from_row(row)
            key = f"{task.shard_id}/{task.pack_key}"  # by content: the same after a partial commit
            guard = ledger_guard(self.ledger, key)
            with self.gate.enter(alone=guard is not None):
                started = start_pack(task, self.runner, guard)
                out.append(finish_pack(started, self.runner).to_row())
            self.ledger.done.remote(key)  # not waited for: a lost finish only counts one crash too many
        return pa.Table.from_pylist(out)


class _Gate:
    """Packs of one actor run `IN_FLIGHT` at a time; one with a crash history (`alone`) waits for the others
    to finish and runs with nothing beside it."""

    def __init__(self):
        self._cond = threading.Condition()
        self._running, self._alone = 0, False

    @contextlib.contextmanager
    def enter(self, alone: bool):
        with self._cond:
            while self._alone or (alone and self._running):
                self._cond.wait()
            self._running += 1
            self._alone = alone
        try:
            yield
        finally:
            with self._cond:
                self._running -= 1
                if alone:
                    self._alone = False
                self._cond.notify_all()


def actor_resources(workers: int | None, cfg: PipelineConfig) -> tuple[int, dict[str, float], int | None]:
    """(actor count, per-actor resources, torch threads): one GPU per actor where the cluster has GPUs
    and the config does not pin the CPU, otherwise an equal share of the cluster's CPUs."""
    import ray

    res = ray.cluster_resources()
    gpus, cpus = int(res.get("GPU", 0)), float(res.get("CPU", 1))
    if gpus and cfg.model.device != "cpu":
        n = _capped(workers or gpus, gpus, "GPU(s)")
        return n, {"num_gpus": 1, "num_cpus": 1}, cfg.model.threads
    # at most one model actor per CPU: each holds a copy of the model, so 50 actors on 2 CPUs was 20 models in
    # memory (6.1 GB) that only contended for the same cores
    n = _capped(workers or 1, max(1, math.floor(cpus)), "CPU(s)")
    share = max(0.1, (cpus - cfg.engine.cpu_stage_cpus) / n)
    threads = cfg.model.threads or max(1, math.floor(cpus / n))
    return n, {"num_cpus": share}, threads


def _capped(asked: int, room: int, what: str) -> int:
    if asked > room:
        log.warning("--workers %d: the cluster has %d %s; %d model actor(s) started", asked, room, what, room)
        return room
    return asked


def run_ray(inputs: list[str], outdir: str | Path, cfg: PipelineConfig, *, workers: int | None = None,
            address: str | None = None, num_cpus: int | None = None, fmt: str = "auto",
            progress: bool | Progress = True, select: Selection | None = None, load_model=load_model,
            load_tokenizer=load_tokenizer, attribute=None, ranker: RankerSetting | None = None,
            refresh: bool = False) -> RunSummary:
    """Attribute `inputs` into OUTDIR on Ray Data (resumable; same outputs as `run_local`).

    The model stage's functions (`load_model(cfg)` in each actor, `load_tokenizer(cfg)` in each CPU worker,
    `attribute(traces, model, cfg, renders)` per pack) are shipped to the workers by Ray; defaults: the
    project's (`pipelines.model_stage`). `ranker`: the run's ranker setting as the caller read it, else read here
    (once, on the driver: the default model stage ships it to the actors). `refresh`: --refresh, as
    `run_local` (pipelines/refresh.py)."""

    outdir = Path(outdir)
    ranker = ranker if ranker is not None else RankerSetting.read(cfg.method.ranker)
    attribute = attribute if attribute is not None else ModelStage(ranker)
    if not address and os.environ.get("RAY_ADDRESS", "local") != "local":
        address = os.environ["RAY_ADDRESS"]  # Ray's own variable names a cluster to join, as `--address` does
    with OutdirLock(outdir, "run --engine ray") as lock, interruptible(), contextlib.ExitStack() as stack:
        cfg, header = resume_config(outdir, cfg)
        facts = RunFacts(ray_address=address or "local", model_loaded=False)  # as the local engine: none yet

        started: list[bool] = []

        def cluster() -> None:
            """Join or start the cluster, once. ray.init installs Ray's C++ fatal-signal handler, SIGTERM
            included (a stack dump, then abort: exit 134): our handlers go back on top of it, so SIGTERM/SIGHUP
            unwind the run and stop the cluster cleanly."""
            if started:
                return
            started.append(True)
            private = stack.enter_context(ray_cluster(address, num_cpus))
            stack.enter_context(interruptible())
            if private is not None:
                facts.ray_private_cluster = private

        resumed = (header or {}).get("token_budget") is not None
        if not resumed and wants_gpu_sizing(cfg, address):  # before the OUTDIR is bound: the budget is in its hash
            cluster()
            cfg, budget = cluster_token_budget(cfg, load_model, header)
        else:
            cfg, budget = resolve_budget(cfg, None, header)
        committer = open_run(inputs, outdir, cfg, "ray", workers or 1, budget, facts, fmt=fmt,
                             select=select, progress=progress, lock=lock, ranker_sha256=ranker.sha256,
                             refresh=refresh)
        if not committer.pending:  # a re-run of a finished run: no cluster needed
            return committer.finish(facts)
        cluster()
        n, resources, threads = actor_resources(workers, cfg)
        cfg = with_pack_bound(cfg, "num_gpus" in resources)
        committer.workers = n
        facts.actor_resources, facts.actor_threads = resources, threads
        facts.model_loaded = True  # by each actor (its load time is in the actors' logs, not timed here)
        with keeping_finished(committer, facts):  # the ledger takes its starts back itself (`_execute`)
            _execute(committer, committer.pending, cfg, n, resources, threads,
                     load_model=load_model, load_tokenizer=load_tokenizer, attribute=attribute)
        return committer.finish(facts)


def _execute(committer: Committer, pending: list[Shard], cfg: PipelineConfig, n: int, resources: dict[str, float],
             threads: int | None, *, load_model, load_tokenizer, attribute) -> None:
    import ray
    import ray.data

    ctx = ray.data.DataContext.get_current()
    saved = {k: getattr(ctx, k) for k in _CTX}
    for k, v in _CTX.items():
        setattr(ctx, k, v)
    ctx.execution_options.preserve_order = False
    from masprism_batch.pipelines.local import LEDGER_NAME
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    # on the driver's node, where OUTDIR is: its counts file survives the actor (and the run)
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    ledger = ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1, scheduling_strategy=here)(Ledger).options(
        name=f"{LEDGER_ACTOR}-{committer.run_id}").remote(str(committer.outdir / LEDGER_NAME))
    cfg_json = cfg.model_dump_json()
    t0 = time.perf_counter()
    try:
        ds = ray.data.from_items([{"shard": s.to_json()} for s in pending], override_num_blocks=len(pending))
        ds = ds.flat_map(_prepare, fn_kwargs={"cfg_json": cfg_json, "load_tokenizer": load_tokenizer, "ledger": ledger},
                         num_cpus=cfg.engine.cpu_stage_cpus)
        # Ray Data's actor defaults are the fault tolerance wanted here: max_restarts=-1 and
        # max_task_retries=-1 (a killed actor comes back and its pack is retried; the ledger bounds loops).
        ds = ds.map_batches(ModelActor, batch_size=1, batch_format="pyarrow",
                            compute=ray.data.ActorPoolStrategy(size=n, max_concurrent_calls_per_actor=IN_FLIGHT,
                                                               enable_true_multi_threading=True),
                            fn_constructor_kwargs={"cfg_json": cfg_json, "ledger": ledger, "threads": threads,
                                                   "load_model": load_model, "attribute": attribute}, **resources)
        for row in ds.iter_rows():
            committer.add(PackResult.from_row(row))
        ledger_call(ledger, "settle")  # every unit is done; a finish still on its way is no crash
    except KeyboardInterrupt:  # not a crash of what was running: its starts are taken back, as locally
        try:
            ray.get(ledger.interrupted.remote(), timeout=10)
        except Exception as e:  # noqa: BLE001 - unwinding: the interruption is what gets reported
            log.warning("the ledger could not take back the interrupted starts (%s)", e)
        raise
    finally:
        ray.kill(ledger)
        for k, v in saved.items():
            setattr(ctx, k, v)
    log.info("ray execution of %d shards took %.1f s", len(pending), time.perf_counter() - t0)

"""The Ray engine: the same shards and stage functions as the local engine, on Ray Data.

    shards (driver) -> flat_map(prepare_shard)  CPU tasks: read, render pass 1, token-budget packs
                    -> map_batches(ModelActor)  stateful actors: model loaded once, both passes per pack
                    -> iter_rows (driver)       Committer: per-shard atomic commit + manifest

Fault tolerance: CPU tasks are retried on a worker crash (Ray Data's default `max_retries=-1`); actors
restart without limit and their tasks are retried (Ray Data's defaults for actor pools). A ledger actor counts how often each pack and trace was started and finished,
so a pack whose worker died twice is re-run one trace at a time and a trace that killed a worker on its own
is written to errors/ (`worker_crashed`) instead of killing workers forever.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from masprism_batch.config import PipelineConfig

from .driver import Committer, RunSummary
from .plan import Shard, plan_inputs
from .stages import Stages
from .work import attribute_pack, prepare_shard

log = logging.getLogger(__name__)

CPU_STAGE_CPUS = 0.25  # render/tokenize tasks are light; a fraction keeps them schedulable beside the actors
PACK_CRASHES_BEFORE_ONE_BY_ONE = 2  # one crash may be a killed worker; two point at a trace in the pack

_CTX = {  # Ray Data settings of a run (restored afterwards: the context is process-wide)
    "enable_progress_bars": False,  # the driver's own bar counts traces and tokens
    "max_errored_blocks": 0,
    "actor_task_retry_on_errors": False,  # Python errors are handled per trace inside the actor
    "target_max_block_size": 1,  # one pack per block, so the packs of one shard spread over all actors
}
_TOKENIZERS: dict[str, Any] = {}  # per worker process: the tokenizer is loaded once, not once per shard


def _prepare(row: dict[str, Any], cfg_json: str, stages: Stages) -> list[dict[str, Any]]:
    cfg = PipelineConfig.model_validate_json(cfg_json)
    key = cfg.model.model_dump_json()
    if key not in _TOKENIZERS:
        _TOKENIZERS[key] = stages.load_tokenizer(cfg)
    return prepare_shard(Shard.from_json(row["shard"]), _TOKENIZERS[key], cfg, stages)


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


class _TraceGuard:
    def __init__(self, ledger, prefix: str):
        self.ledger, self.prefix = ledger, prefix

    def begin(self, trace_id: str) -> str | None:
        import ray

        crashes = ray.get(self.ledger.begin.remote(self.prefix + trace_id))
        return "worker_crashed" if crashes >= 1 else None

    def done(self, trace_id: str) -> None:
        import ray

        ray.get(self.ledger.done.remote(self.prefix + trace_id))


class ModelActor:
    """Loads the model once per actor (re-loaded after a restart) and runs both passes per pack."""

    def __init__(self, cfg_json: str, stages: Stages, ledger, threads: int | None):
        self.cfg = PipelineConfig.model_validate_json(cfg_json)
        self.stages, self.ledger = stages, ledger
        self.model = stages.load_model(self.cfg)
        if threads and "torch" in sys.modules:  # a model without torch (test fakes) needs no thread setting
            sys.modules["torch"].set_num_threads(threads)
        log.info("actor pid %d loaded %s", os.getpid(), getattr(self.model, "model_id", "?"))

    def __call__(self, batch):
        import pyarrow as pa
        import ray

        out = []
        for task in batch.to_pylist():
            key = f"{task['shard_id']}/{task['pack_index']}"
            crashes = ray.get(self.ledger.begin.remote(key))
            guard = _TraceGuard(self.ledger, key + "/") if crashes >= PACK_CRASHES_BEFORE_ONE_BY_ONE else None
            if guard is not None:
                log.warning("pack %s crashed a worker %d times: running its traces one by one", key, crashes)
            out.append(attribute_pack(task, self.model, self.cfg, self.stages, guard=guard))
            ray.get(self.ledger.done.remote(key))
        return pa.Table.from_pylist(out)


def _init_ray(address: str | None, num_cpus: int | None) -> bool:
    """Join `address` or start a local cluster; returns True when this call started Ray."""
    import ray

    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True, "configure_logging": False}
    if address:
        ray.init(address=address, **kwargs)
    else:
        ray.init(num_cpus=num_cpus or os.cpu_count(), **kwargs)
    return True


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
    share = max(0.1, (cpus - CPU_STAGE_CPUS) / n)
    threads = cfg.model.threads or max(1, math.floor(cpus / n))
    return n, {"num_cpus": share}, threads


def run_ray(inputs: list[str], outdir: str | Path, cfg: PipelineConfig, *, workers: int | None = None,
            address: str | None = None, num_cpus: int | None = None, fmt: str = "auto",
            stages: Stages | None = None, progress: bool = True) -> RunSummary:
    """Attribute `inputs` into OUTDIR on Ray Data (resumable; same outputs as `run_local`)."""
    import ray

    stages = stages or Stages()
    outdir = Path(outdir)
    plan = plan_inputs(list(inputs), outdir, fmt, cfg.batch.traces_per_shard, stages)
    committer = Committer(outdir, cfg, plan, "ray", workers or 1, progress=progress)
    extra: dict[str, Any] = {"ray_address": address or "local"}
    if not committer.pending:  # a re-run of a finished run: no cluster needed
        return committer.finish(extra)
    started = _init_ray(address, num_cpus)
    try:
        n, resources, threads = actor_resources(workers, cfg)
        committer.workers = n
        extra.update(actor_resources=resources, actor_threads=threads)
        _execute(committer, committer.pending, cfg, stages, n, resources, threads)
        return committer.finish(extra)
    finally:
        if started:
            ray.shutdown()


def _execute(committer: Committer, pending: list[Shard], cfg: PipelineConfig, stages: Stages, n: int,
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
        ds = ds.flat_map(_prepare, fn_kwargs={"cfg_json": cfg_json, "stages": stages}, num_cpus=CPU_STAGE_CPUS)
        # Ray Data's actor defaults are the fault tolerance wanted here: max_restarts=-1 and
        # max_task_retries=-1 (a killed actor comes back and its pack is retried; the ledger bounds loops).
        ds = ds.map_batches(ModelActor, batch_size=1, batch_format="pyarrow",
                            compute=ray.data.ActorPoolStrategy(size=n),
                            fn_constructor_kwargs={"cfg_json": cfg_json, "stages": stages, "ledger": ledger,
                                                   "threads": threads}, **resources)
        for row in ds.iter_rows():
            committer.add(row)
    finally:
        ray.kill(ledger)
        for k, v in saved.items():
            setattr(ctx, k, v)
    log.info("ray execution of %d shards took %.1f s", len(pending), time.perf_counter() - t0)

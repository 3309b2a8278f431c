"""The local engine: the whole run in this process, one model, no Ray.

It runs the same stage functions as the Ray engine (`pack_work.shard_packs`, `pack_work.start_pack`/`finish_pack`) in the
same order, so both engines write the same shards with the same content.

The OUTDIR lock is held for the whole run. A crash of the process itself (segfault, OOM kill) cannot be caught
here, so the rule of the Ray engine is applied across resumes through `OUTDIR/_ledger.json` (`FileLedger`):
a shard's CPU stage or a pack that crashed the process twice is re-run one trace at a time, and a trace that
crashed it on its own twice is written to errors/ (`worker_crashed`) instead of crashing every resume. SIGTERM,
SIGHUP and Ctrl-C are no crash: the run unwinds, commits the packs that finished (`interrupts.record_interruption`)
and the ledger takes back the starts they interrupted.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import time
from pathlib import Path

from masprism_batch.pipelines.commit import Committer, open_run
from masprism_batch.pipelines.crash_guard import PACK_CRASHES_BEFORE_ONE_BY_ONE, CrashGuard, FileLedger
from masprism_batch.pipelines.interrupts import interruptible, keeping_finished
from masprism_batch.pipelines.prefetch import Prefetcher
from masprism_batch.pipelines.progress import Progress
from masprism_batch.pipelines.resume import resume_config
from masprism_batch.pipelines.run_summary import RunFacts, RunSummary
from masprism_batch.pipelines.selection import Selection
from masprism_batch.pipelines.tails import Tails

from masprism_batch.config import PipelineConfig
from masprism_batch.devices import auto_device_type
from masprism_batch.outdir.parts import OutdirLock
from masprism_batch.render.pool import RenderPool
from masprism_batch.stage.budget import left_to_the_device, resolve_budget
from masprism_batch.verdict.rankfile import RankerSetting

log = logging.getLogger(__name__)
LEDGER_NAME = "_ledger.json"


def _guard(ledger: FileLedger, key: str) -> CrashGuard | None:
    crashes = ledger.begin(key)
    if crashes < PACK_CRASHES_BEFORE_ONE_BY_ONE:
        return None
    log.warning("%s crashed this process %d times before: running its traces one by one", key, crashes)
    return CrashGuard(ledger.begin, ledger.done, key + "/")


def run_local(inputs: list[str], outdir: str | Path, cfg: PipelineConfig, *, fmt: str = "auto", model=None,
              progress: bool | Progress = True, select: Selection | None = None, load_model=None,
              attribute=None, prefetch: int = 1, render_workers: int | None = None,
              ranker: RankerSetting | None = None, refresh: bool = False,
              seconds_model_load: float | None = None) -> RunSummary:
    """Attribute every trace of `inputs` into OUTDIR (resumable; see docs/scale-out.md).

    `model` lets a caller that already holds a loaded PrefillModel reuse it; else `load_model(cfg)` (None:
    `model_stage.load_model`) loads it (only when a shard is pending, or first when the token budget is to be
    sized for a CUDA device). The model stage (torch) is imported only then: a rerun with nothing new starts
    and ends without it (issue 60).
    `attribute(traces, model, cfg, renders)`: the model stage on one pack (None: `model_stage.ModelStage`). `prefetch`: shards whose CPU stage
    may run ahead of the model stage (0: one after the other). `render_workers`: processes rendering pass 1
    beside the model (`render.pool.RenderPool`); None: on a CUDA model up to 8, leaving 2 CPUs, else none.
    `progress`: the display the run reports to (`progress.Progress`), or True/False for the default bar.
    `ranker`: the run's ranker setting as the caller read it (`RankerSetting.read(cfg.method.ranker)`, the one
    read of the file this run makes), else read here. `refresh`: --refresh (pipelines/refresh.py).
    `seconds_model_load`: how long the caller took to load `model` for this run (run.json), if it did.
    Raises `parts.OutdirLocked` (a ValueError) when another live run holds OUTDIR.
    """
    outdir = Path(outdir)
    ranker = ranker if ranker is not None else RankerSetting.read(cfg.method.ranker)
    with OutdirLock(outdir, "run --engine local") as lock, interruptible(), contextlib.ExitStack() as stack:
        cfg, header = resume_config(outdir, cfg)
        facts = RunFacts(model_loaded=False) if model is None else RunFacts(model_loaded=None) \
            if seconds_model_load is None else RunFacts(model_loaded=True, seconds_model_load=seconds_model_load)
        if model is None and left_to_the_device(cfg) and not (header or {}).get("token_budget") \
                and auto_device_type(cfg.model.device) == "cuda":
            model = _load(load_model, cfg, facts)  # the budget enters the config hash the committer checks
        cfg, budget = resolve_budget(cfg, model, header)
        workers = _render_workers(render_workers, model) if prefetch > 0 else 0
        pool = None
        if workers > 0 and model is not None:  # its processes start (imports, tokenizer) while staging runs
            pool = stack.enter_context(RenderPool(model.tokenizer, workers)).warm()
        committer = open_run(inputs, outdir, cfg, "local", 1, budget, facts, fmt=fmt, select=select,
                             progress=progress, lock=lock, ranker_sha256=ranker.sha256, refresh=refresh)
        if committer.pending:
            from masprism_batch.pipelines.packs import with_pack_bound

            if attribute is None:
                from masprism_batch.pipelines.model_stage import ModelStage

                attribute = ModelStage(ranker)
            if model is None:
                model = _load(load_model, cfg, facts)
            facts.model_id = getattr(model, "model_id", None)
            cfg = with_pack_bound(cfg, _on_gpu(model))
            ledger = FileLedger(outdir / LEDGER_NAME)
            with keeping_finished(committer, facts, on_interrupt=ledger.interrupted):
                _work(committer, model, cfg, ledger, attribute, prefetch, workers, pool)
        return committer.finish(facts)


def _load(load_model, cfg: PipelineConfig, facts: RunFacts):
    if load_model is None:
        from masprism_batch.pipelines.model_stage import load_model
    t0 = time.perf_counter()
    model = load_model(cfg)
    facts.seconds_model_load = round(time.perf_counter() - t0, 3)
    facts.model_loaded = True
    return model


def _on_gpu(model) -> bool:
    return getattr(getattr(model, "device", None), "type", "cpu") == "cuda"


def _render_workers(asked: int | None, model) -> int:
    if asked is not None:
        return asked
    return min(8, (os.cpu_count() or 1) - 2) if _on_gpu(model) else 0  # on CPU the model wants every core


def _work(committer: Committer, model, cfg: PipelineConfig, ledger: FileLedger, attribute, prefetch: int,
          workers: int, pool: RenderPool | None) -> None:
    """Three things at once: the prefetch thread cuts the next packs, this thread holds the device for one
    pack, the tail thread finishes the pack before it (method, verdicts, rows, commit) and then its ledger key."""
    from masprism_batch.pipelines.pack_work import finish_pack, shard_packs, start_pack
    from masprism_batch.pipelines.packs import PackRunner

    ledger = _OneAtATime(ledger)

    def packs_of(shard):
        key = f"{shard.shard_id}/prepare"
        guard = _guard(ledger, key)
        yield from shard_packs(shard, model.tokenizer, model.max_context, cfg, guard=guard, render=pool)
        ledger.done(key)

    def serial():
        for shard in committer.pending:
            packs, t0 = packs_of(shard), time.perf_counter()
            for task in packs:
                yield shard, task, time.perf_counter() - t0
                t0 = time.perf_counter()

    def tail(started, pkey: str) -> None:
        committer.add(finish_pack(started, runner))
        ledger.done(pkey)

    # a crash history: nothing runs beside anything else, so the next crash is pinned to what ran alone (with
    # a render beside a pack, a crash would count against both)
    ahead = max(prefetch, 0) if not ledger.started else 0
    if not ahead:
        pool = None  # one thing at a time: the render runs in this process
    runner = PackRunner(model, cfg, attribute)
    with contextlib.ExitStack() as stack:
        if ahead and workers > 0 and pool is None:
            pool = stack.enter_context(RenderPool(model.tokenizer, workers))
        source = stack.enter_context(Prefetcher(packs_of, committer.pending, ahead, flat=True)) if ahead else serial()
        tails = stack.enter_context(Tails(1 if ahead else 0))  # closed first: no tail runs once we unwind
        for _shard, task, waited in source:
            task.seconds_input_wait = waited  # the model stage's wait for this pack's input
            pkey = f"{task.shard_id}/{task.pack_key}"  # by content: the same after a partial commit
            started = start_pack(task, runner, guard=_guard(ledger, pkey))
            tails.submit(functools.partial(tail, started, pkey))


class _OneAtATime:
    """The ledger as the main thread and the prefetch thread share it: one call at a time (each rewrites the
    whole file from one dict)."""

    def __init__(self, ledger: FileLedger):
        self._ledger, self._lock, self.started = ledger, threading.Lock(), ledger.started

    def begin(self, key: str) -> int:
        with self._lock:
            return self._ledger.begin(key)

    def done(self, key: str) -> None:
        with self._lock:
            self._ledger.done(key)

"""The local engine: the whole run in this process, one model, no Ray.

It runs the same stage functions as the Ray engine (`work.prepare_shard`, `work.attribute_pack`) in the
same order, so both engines write the same shards with the same content.

The OUTDIR lock is held for the whole run. A crash of the process itself (segfault, OOM kill) cannot be caught
here, so the rule of the Ray engine is applied across resumes through `OUTDIR/_ledger.json` (`FileLedger`):
a shard's CPU stage or a pack that crashed the process twice is re-run one trace at a time, and a trace that
crashed it on its own twice is written to errors/ (`worker_crashed`) instead of crashing every resume. SIGTERM,
SIGHUP and Ctrl-C are no crash: the run unwinds, commits the packs that finished (`interrupts.record_interruption`)
and the ledger takes back the starts they interrupted.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from masprism_batch.config import PipelineConfig
from masprism_batch.io import OutdirLock

from .driver import Committer, RunSummary, interruptible, resume_config
from .interrupts import record_interruption
from .packs import PACK_CRASHES_BEFORE_ONE_BY_ONE, CrashGuard, FileLedger, attribute_traces, load_model
from .plan import plan_inputs
from .select import Selection
from .work import attribute_pack, prepare_shard

log = logging.getLogger(__name__)
LEDGER_NAME = "_ledger.json"


def _guard(ledger: FileLedger, key: str) -> CrashGuard | None:
    crashes = ledger.begin(key)
    if crashes < PACK_CRASHES_BEFORE_ONE_BY_ONE:
        return None
    log.warning("%s crashed this process %d times before: running its traces one by one", key, crashes)
    return CrashGuard(ledger.begin, ledger.done, key + "/")


def run_local(inputs: list[str], outdir: str | Path, cfg: PipelineConfig, *, fmt: str = "auto", model=None,
              progress: bool = True, select: Selection | None = None, load_model=load_model,
              attribute=attribute_traces) -> RunSummary:
    """Attribute every trace of `inputs` into OUTDIR (resumable; see docs/scale-out.md).

    `model` lets a caller that already holds a loaded PrefillModel reuse it; else `load_model(cfg)` loads it
    (only when a shard is pending). `attribute(traces, model, cfg, renders)`: the model stage on one pack.
    Raises `io.OutdirLocked` (a ValueError) when another live run holds OUTDIR.
    """
    outdir = Path(outdir)
    with OutdirLock(outdir, "run --engine local") as lock, interruptible():
        cfg = resume_config(outdir, cfg)
        plan = plan_inputs(list(inputs), outdir, fmt, cfg.engine.traces_per_shard, cfg.ingest, select)
        committer = Committer(outdir, cfg, plan, "local", 1, progress=progress, lock=lock)
        extra: dict = {"seconds_model_load": 0.0}
        if committer.pending:
            if model is None:
                t0 = time.perf_counter()
                model = load_model(cfg)
                extra["seconds_model_load"] = round(time.perf_counter() - t0, 3)
            extra["model_id"] = getattr(model, "model_id", None)
            ledger = FileLedger(outdir / LEDGER_NAME)
            try:
                _work(committer, model, cfg, ledger, attribute)
            except KeyboardInterrupt as exc:  # SIGTERM/SIGHUP/SIGINT: not a crash of what was running
                ledger.interrupted()
                record_interruption(committer, exc, extra)
                raise
            except Exception:
                flush_quietly(committer)  # whatever stopped the run, the packs that finished are kept
                raise
        return committer.finish(extra)


def flush_quietly(committer: Committer) -> None:
    try:
        committer.flush()
    except Exception as e:  # noqa: BLE001 - the run's own error is the one to report
        log.warning("could not commit the finished packs (%s): they will be redone", e)


def _work(committer: Committer, model, cfg: PipelineConfig, ledger: FileLedger, attribute) -> None:
    for shard in committer.pending:
        key = f"{shard.shard_id}/prepare"
        tasks = prepare_shard(shard, model.tokenizer, model.max_context, cfg, guard=_guard(ledger, key))
        ledger.done(key)
        for task in tasks:
            pkey = f"{task['shard_id']}/{task['pack_key']}"  # by content: the same after a partial commit
            committer.add(attribute_pack(task, model, cfg, guard=_guard(ledger, pkey), attribute=attribute))
            ledger.done(pkey)

"""The local engine: the whole run in this process, one model, no Ray.

It runs the same stage functions as the Ray engine (`work.prepare_shard`, `work.attribute_pack`) in the
same order, so both engines write the same shards with the same content.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from masprism_batch.config import PipelineConfig

from .driver import Committer, RunSummary
from .plan import plan_inputs
from .stages import Stages
from .work import attribute_pack, prepare_shard

log = logging.getLogger(__name__)


def run_local(inputs: list[str], outdir: str | Path, cfg: PipelineConfig, *, fmt: str = "auto",
              stages: Stages | None = None, model=None, progress: bool = True) -> RunSummary:
    """Attribute every trace of `inputs` into OUTDIR (resumable; see docs/scale-out.md).

    `model` lets a caller that already holds a loaded PrefillModel reuse it.
    """
    stages = stages or Stages()
    outdir = Path(outdir)
    plan = plan_inputs(list(inputs), outdir, fmt, cfg.batch.traces_per_shard, stages)
    committer = Committer(outdir, cfg, plan, "local", 1, progress=progress)
    extra: dict = {"seconds_model_load": 0.0}
    if committer.pending:
        if model is None:
            t0 = time.perf_counter()
            model = stages.load_model(cfg)
            extra["seconds_model_load"] = round(time.perf_counter() - t0, 3)
        extra["model_id"] = getattr(model, "model_id", None)
        for shard in committer.pending:
            for task in prepare_shard(shard, model.tokenizer, cfg, stages):
                committer.add(attribute_pack(task, model, cfg, stages))
    return committer.finish(extra)

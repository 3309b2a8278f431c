"""The token budget of a Ray run, sized on one of the cluster's GPUs as the local engine sizes it on its own.

The packs are cut on the CPU workers (`work.shard_packs`) before any model actor holds a GPU, and the budget
is in the config hash the OUTDIR is bound to, so it is settled on the driver before the run starts: one task
on one GPU loads the model as an actor would and reports `buckets.auto_token_budget` (free memory after the
weights). The task's worker exits with it (`max_calls=1`), so its CUDA context does not stay on the card beside
the actor that comes next. A budget the user set, or one a resumed OUTDIR began with, is never re-sized.
"""

from __future__ import annotations

import logging

from masprism_batch.config import PipelineConfig
from masprism_batch.render import buckets

log = logging.getLogger(__name__)


def _left_to_the_device(cfg: PipelineConfig) -> bool:
    return "token_budget" not in cfg.batch.model_fields_set and cfg.model.device != "cpu"


def wants_gpu_sizing(cfg: PipelineConfig, address: str | None) -> bool:
    """Whether the budget is left to the device and the cluster may have a GPU: a joined cluster (`address`)
    may, whatever this machine has; a private one only where this machine sees CUDA."""
    if not _left_to_the_device(cfg):
        return False
    if address:
        return True
    import torch

    return torch.cuda.is_available()


def _probe(cfg_json: str, load_model) -> tuple[int, str]:
    """On a GPU worker: the budget the loaded model leaves room for, and why."""
    cfg = PipelineConfig.model_validate_json(cfg_json)
    return buckets.auto_token_budget(load_model(cfg))


def cluster_token_budget(cfg: PipelineConfig, load_model, timeout_s: float = 900.0
                         ) -> tuple[PipelineConfig, int, str]:
    """(cfg, budget, why) for a run on the initialised Ray cluster (`buckets.with_token_budget`): sized on one
    GPU when the cluster has one and the budget is unset, else the user's or the CPU default."""
    import ray

    if not _left_to_the_device(cfg) or not int(ray.cluster_resources().get("GPU", 0)):
        return buckets.with_token_budget(cfg, None)
    task = ray.remote(num_gpus=1, num_cpus=1, max_calls=1)(_probe)
    n, why = ray.get(task.remote(cfg.model_dump_json(), load_model), timeout=timeout_s)
    log.info("token budget sized on a GPU of the cluster: %s", why)
    return buckets.with_token_budget(cfg, None, sized=(int(n), why))

"""The token budget of a Ray run, sized on one of the cluster's GPUs as the local engine sizes it on its own.

The packs are cut on the CPU workers (`pack_work.shard_packs`) before any model actor holds a GPU, and the budget
is in the config hash the OUTDIR is bound to, so it is settled on the driver before the run starts: one task
on one GPU loads the model as an actor would and reports `budget.device_budget` (free memory after the
weights). The task's worker exits with it (`max_calls=1`), so its CUDA context does not stay on the card beside
the actor that comes next. A budget the user set, or one a resumed OUTDIR began with, is never re-sized.
"""

from __future__ import annotations

import logging

from masprism_batch.config import PipelineConfig
from masprism_batch.stage import budget

log = logging.getLogger(__name__)


def wants_gpu_sizing(cfg: PipelineConfig, address: str | None) -> bool:
    """Whether the budget is left to the device and the cluster may have a GPU: a joined cluster (`address`)
    may, whatever this machine has; a private one only where this machine sees CUDA."""
    if not budget.left_to_the_device(cfg):
        return False
    if address:
        return True
    import torch

    return torch.cuda.is_available()


def _probe(cfg_json: str, load_model) -> tuple[int, str]:
    """On a GPU worker: the budget the loaded model leaves room for, and why."""
    cfg = PipelineConfig.model_validate_json(cfg_json)
    return budget.device_budget(load_model(cfg))


def cluster_token_budget(cfg: PipelineConfig, load_model, header: dict | None = None, timeout_s: float = 900.0):
    """(cfg, Budget) for a run on the initialised Ray cluster (`budget.resolve_budget`): sized on one GPU when the
    cluster has one and the budget is left to the device, else the user's, the resumed one or the CPU default."""
    import ray

    if not budget.left_to_the_device(cfg) or not int(ray.cluster_resources().get("GPU", 0)):
        return budget.resolve_budget(cfg, None, header)
    task = ray.remote(num_gpus=1, num_cpus=1, max_calls=1)(_probe)
    n, why = ray.get(task.remote(cfg.model_dump_json(), load_model), timeout=timeout_s)
    log.info("token budget sized on a GPU of the cluster: %s", why)
    return budget.resolve_budget(cfg, None, header, sized=(int(n), why))

"""The Ray engine sizes the token budget on one of the cluster's GPUs, as the local engine does on its own
(test_device_budget.py), before the OUTDIR is bound: a local cluster that declares one GPU, and a fake model
that says it is on CUDA and reports the free memory it was given (no GPU is touched)."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from masprism_batch.pipelines import run_ray
from masprism_batch.pipelines.ray_budget import cluster_token_budget, wants_gpu_sizing
from pipeline_fakes import Fakes, assert_exactly_once, free_for_tokens, make_corpus

from masprism_batch.config import EngineConfig, SignalsConfig, load_config
from masprism_batch.model.arch import ArchSpec
from masprism_batch.stage import budget

ray = pytest.importorskip("ray", reason="the Ray engine tests need ray[data] (dev extra)")
pytestmark = pytest.mark.ray
GiB = 2**30


def _pair(resolved):
    """(cfg, (n, source)) of what `cluster_token_budget` resolved."""
    cfg, b = resolved
    return cfg, (b.n, b.source)


@pytest.fixture(scope="module")
def gpu_cluster():
    import pipeline_fakes
    import ray.cloudpickle

    # Ray workers have neither tests/ nor this module on sys.path: ship them by value
    ray.cloudpickle.register_pickle_by_value(pipeline_fakes)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, configure_logging=False)  # a declared, not a real GPU
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


class OnGpu(Fakes):
    """The fake model stage on a device that says it is a GPU with `free` bytes free; it runs in Ray's worker
    processes, so it fakes CUDA's memory queries there itself (a test's monkeypatch stays in the driver)."""

    def __init__(self, free: int, vocab: int, layers: int):
        super().__init__()
        self.free, self.vocab, self.layers = free, vocab, layers

    def load_model(self, cfg):
        free = self.free
        torch.cuda.mem_get_info = lambda device=None: (free, 2 * free)
        torch.cuda.memory_reserved = lambda device=None: 0
        torch.cuda.memory_allocated = lambda device=None: 0
        fake = super().load_model(cfg)
        fake.device, fake.dtype, fake.signals_cfg = torch.device("cuda:0"), torch.bfloat16, SignalsConfig()
        fake.arch = self.arch()
        return fake

    def arch(self) -> ArchSpec:
        return ArchSpec("qwen3", self.vocab, 1024, 3072, self.layers, 16, 8, 128, 1e-6, 32768, False, False, False,
                        True, True)


def _run(tmp_path, name: str, fakes: Fakes, address: str, **cfg) -> dict:
    config = load_config(None, **cfg).model_copy(update={"engine": EngineConfig(traces_per_shard=4)})
    run_ray([str(tmp_path / "in")], tmp_path / name, config, workers=1, address=address, progress=False,
            **fakes.kwargs(ray=True))
    return json.loads((tmp_path / name / "run.json").read_text())


def test_budget_sized_on_a_gpu_of_the_cluster(tmp_path, gpu_cluster, rng):
    ids = make_corpus(tmp_path / "in", 9, 2)
    vocab, layers = rng.randint(1000, 200_000), rng.randint(2, 30)
    run = _run(tmp_path, "out", OnGpu(200 * GiB, vocab, layers), gpu_cluster, model__device="cuda")
    assert run["config"]["batch"]["token_budget"] == run["this_invocation"]["token_budget"] \
        == budget.CUDA_MAX_TOKEN_BUDGET
    assert "200.0 GiB free on cuda:0" in run["this_invocation"]["token_budget_source"]
    assert run["this_invocation"]["actor_resources"]["num_gpus"] == 1
    assert_exactly_once(tmp_path / "out", ids)


def test_budget_what_fits_set_by_the_user_or_on_cpu(gpu_cluster, rng):
    """The sizing alone (`cluster_token_budget`, what run_ray calls first): a card with room for half the cap
    gets what fits, below the cap, as the local engine's sizing; a budget the user set and a CPU run are not
    sized."""
    vocab, layers = rng.randint(1000, 200_000), rng.randint(2, 30)
    arch = OnGpu(0, vocab, layers).arch()  # not load_model: in this process it would fake CUDA for the tests after
    free = free_for_tokens(arch, budget.CUDA_MAX_TOKEN_BUDGET // 2)
    fakes = OnGpu(free, vocab, layers)
    fits = budget.device_token_budget(free, budget.activation_bytes_per_token(arch, 2),
                                       budget.fixed_activation_bytes(arch, SignalsConfig().nll_chunk))
    cfg, (n, why) = _pair(cluster_token_budget(load_config(None, model__device="cuda"), fakes.load_model))
    assert fits < budget.CUDA_MAX_TOKEN_BUDGET and n == cfg.batch.token_budget == fits
    assert f"{free / GiB:.1f} GiB free" in why
    user = load_config(None, model__device="cuda", batch__token_budget=5000)
    assert _pair(cluster_token_budget(user, fakes.load_model))[1] == (5000, "set by the user")
    cpu = load_config(None, model__device="cpu")
    assert _pair(cluster_token_budget(cpu, fakes.load_model))[1] == (budget.CPU_TOKEN_BUDGET, "CPU default")
    assert not wants_gpu_sizing(cpu, "some-address") and not wants_gpu_sizing(user, "some-address")
    assert wants_gpu_sizing(load_config(None), "some-address")  # a joined cluster may have GPUs

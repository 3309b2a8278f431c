"""Issue 33 item 1 through the local engine: on a (fake) GPU with the budget left unset, run.json's config and
invocation and the time line name the budget sized for the device (tests/stage/test_token_budget.py: the sizing)."""

from __future__ import annotations

import json

import pytest
import torch
from masprism_batch.pipelines import run_local
from pipeline_fakes import Fakes, free_for_tokens, make_corpus

from masprism_batch.config import SignalsConfig, load_config
from masprism_batch.model.arch import ArchSpec
from masprism_batch.stage import budget

GiB = 2**30


def _fake_gpu(monkeypatch, free: int) -> None:
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, 2 * free))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 0)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 0)


class OnGpu(Fakes):
    """The fake model stage on a device that says it is a GPU, with the shapes `arch` the budget is sized for."""

    def __init__(self, arch: ArchSpec):
        super().__init__()
        self.arch = arch

    def load_model(self, cfg):
        fake = super().load_model(cfg)
        fake.device, fake.dtype, fake.arch, fake.signals_cfg = torch.device("cuda:0"), torch.bfloat16, self.arch, \
            SignalsConfig()
        return fake


def test_run_json_and_time_line_name_the_budget_sized_for_a_fake_gpu(tmp_path, monkeypatch, rng):
    arch = ArchSpec("qwen3", rng.randint(1000, 200_000), 1024, rng.randint(1000, 4000), rng.randint(2, 30), 16, 8, 128,
                    1e-6, 32768, False, False, False, True, True)
    _fake_gpu(monkeypatch, 200 * GiB)
    make_corpus(tmp_path / "in", 5, 1)
    cfg = load_config(None, model__device="cuda")
    s = run_local([str(tmp_path / "in")], tmp_path / "out", cfg, **OnGpu(arch).kwargs(), progress=False,
                  render_workers=0)  # a fake GPU: no render processes (test_prefetch.py tests the pool)
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    n = budget.CUDA_MAX_TOKEN_BUDGET
    assert run["config"]["batch"]["token_budget"] == run["this_invocation"]["token_budget"] == n
    assert "GiB free" in run["this_invocation"]["token_budget_source"]
    assert f"budget {n:,} tok/pack" in s.breakdown and s.attributed == 5


def test_a_resume_keeps_the_budget_its_outdir_began_with(tmp_path, monkeypatch, rng):
    """The budget is in the config hash OUTDIR is bound to: a re-run (any resume checks OUTDIR's header) on a card with less free memory (which
    would size a smaller budget) keeps the one the run began with instead of being refused as another
    configuration; a budget the user names is theirs (here: refused, it is another configuration)."""
    arch = ArchSpec("qwen3", rng.randint(1000, 200_000), 1024, 3072, rng.randint(2, 30), 16, 8, 128, 1e-6, 32768,
                    False, False, False, True, True)

    make_corpus(tmp_path / "in", 6, 2)
    cfg = load_config(None, model__device="cuda", engine__traces_per_shard=3)
    _fake_gpu(monkeypatch, 200 * GiB)
    run_local([str(tmp_path / "in")], tmp_path / "out", cfg, **OnGpu(arch).kwargs(), progress=False, render_workers=0)
    _fake_gpu(monkeypatch, free_for_tokens(arch, budget.CUDA_MAX_TOKEN_BUDGET // 2))  # room for half the cap
    assert budget.device_budget(OnGpu(arch).load_model(cfg))[0] < budget.CUDA_MAX_TOKEN_BUDGET
    s = run_local([str(tmp_path / "in")], tmp_path / "out", cfg, **OnGpu(arch).kwargs(), progress=False,
                  render_workers=0)
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["this_invocation"]["token_budget"] == budget.CUDA_MAX_TOKEN_BUDGET
    assert run["this_invocation"]["token_budget_source"] == "OUTDIR's run began with it (resumed)"
    assert s.attributed == 6
    named = load_config(None, model__device="cuda", engine__traces_per_shard=3, batch__token_budget=4096)
    with pytest.raises(ValueError, match="another configuration"):
        run_local([str(tmp_path / "in")], tmp_path / "out", named, **OnGpu(arch).kwargs(), progress=False,
                  render_workers=0)

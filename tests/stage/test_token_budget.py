"""Issue 33 item 1: the token budget fits the device. On CUDA it is sized from free memory (at least 32k where
that fits, never more than fits with the activations the model config implies), on CPU it stays 8,192; a budget
the user set is kept; run.json and the time line name the budget in use. Fake memory figures, on CPU."""

from __future__ import annotations

import random
from types import SimpleNamespace

import torch

from masprism_batch.config import PipelineConfig, SignalsConfig, load_config
from masprism_batch.model.arch import ArchSpec
from masprism_batch.stage import budget

GiB = 2**30


def _resolved(cfg, model):
    """(cfg, (n, source)) of `budget.resolve_budget` for a new run (no OUTDIR header)."""
    cfg, b = budget.resolve_budget(cfg, model)
    return cfg, (b.n, b.source)


def _arch(rng: random.Random) -> ArchSpec:
    heads = rng.choice([8, 16, 32])
    kv = rng.choice([h for h in (1, 2, 4, 8, heads) if heads % h == 0])
    return ArchSpec("qwen3", rng.randint(1000, 200_000), rng.choice([576, 1024, 2048]), rng.randint(1000, 9000),
                    rng.randint(2, 40), heads, kv, rng.choice([64, 128]), 1e-6, 32768, False, False, False, True, True)


def test_sizing_never_exceeds_what_fits_and_reaches_32k_where_it_fits(rng):
    for _ in range(200):
        arch, dtype_bytes = _arch(rng), rng.choice([2, 4])
        per_token = budget.activation_bytes_per_token(arch, dtype_bytes)
        fixed = budget.fixed_activation_bytes(arch, rng.choice([256, 1024]))
        free = rng.randint(0, 160 * GiB)
        n = budget.device_token_budget(free, per_token, fixed)
        assert budget.BUDGET_STEP <= n <= budget.CUDA_MAX_TOKEN_BUDGET
        if n > budget.BUDGET_STEP:  # the floor aside: what it picked fits in the headroom of the free memory
            assert n * per_token + fixed <= free * budget.HEADROOM
        if budget.CUDA_MIN_TOKEN_BUDGET * per_token + fixed <= free * budget.HEADROOM:
            assert n >= budget.CUDA_MIN_TOKEN_BUDGET
        more = budget.device_token_budget(free + rng.randint(0, 8 * GiB), per_token, fixed)
        assert more >= n  # more memory never gives a smaller budget


def test_per_token_bytes_grow_with_the_model(rng):
    arch = _arch(rng)
    base = budget.activation_bytes_per_token(arch, 2)
    wider = ArchSpec(**{**vars(arch), "intermediate_size": arch.intermediate_size + 1024})
    deeper = ArchSpec(**{**vars(arch), "num_layers": arch.num_layers + 4})  # more layers keep more K/V
    assert budget.activation_bytes_per_token(wider, 2) > base and budget.activation_bytes_per_token(deeper, 2) > base
    assert budget.activation_bytes_per_token(arch, 4) > base


def _fake_cuda(monkeypatch, free: int, cached: int = 0):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, 2 * free))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: cached)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 0)


def _model(arch, device="cuda:0"):
    return SimpleNamespace(device=torch.device(device), dtype=torch.bfloat16, arch=arch, signals_cfg=SignalsConfig(),
                           model_id="fake", tokenizer=None, max_context=8192)


def test_auto_budget_on_cuda_cpu_and_a_budget_the_user_set(monkeypatch, rng):
    arch = _arch(rng)
    per_token = budget.activation_bytes_per_token(arch, 2)
    fixed = budget.fixed_activation_bytes(arch, SignalsConfig().nll_chunk)
    big = int((budget.CUDA_MAX_TOKEN_BUDGET * per_token + fixed) / budget.HEADROOM) + GiB
    _fake_cuda(monkeypatch, big // 2, cached=big - big // 2)  # torch's own free cache counts as free
    cfg, (n, why) = _resolved(PipelineConfig(), _model(arch))
    assert n == cfg.batch.token_budget == budget.CUDA_MAX_TOKEN_BUDGET and "GiB free" in why
    assert cfg.config_hash() == load_config(None, batch__token_budget=n).config_hash()  # the hash names it

    small = int((12_000 * per_token + fixed) / budget.HEADROOM)
    _fake_cuda(monkeypatch, small)
    cfg, (n, why) = _resolved(PipelineConfig(), _model(arch))
    assert n == 8192 and "most that fits" in why  # 12,000 fit: rounded down to a step, never more

    user = load_config(None, batch__token_budget=77)  # an option or a config file wins on any device
    assert _resolved(user, _model(arch)) == (user, (77, "set by the user"))
    default = PipelineConfig()
    cpu_cfg, (n, _) = _resolved(default, _model(arch, "cpu"))
    assert cpu_cfg is default and n == budget.CPU_TOKEN_BUDGET == default.batch.token_budget  # hash unchanged


def test_cli_option_says_how_the_default_is_sized():
    import typer

    from masprism_batch.cli import app

    group = typer.main.get_command(app)
    for cmd in ("attribute", "run"):
        (opt,) = [p for p in group.commands[cmd].params if p.name == "token_budget"]
        assert "--token-budget" in opt.opts and "sized for the device" in opt.help


def test_whether_the_user_set_the_budget_is_asked_in_one_place():
    """Issue 50: `stage/budget.user_set` is the one place that asks pydantic whether the budget was set; every
    engine, the resume and the Ray sizing go through `resolve_budget` / `left_to_the_device`."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    assert (root / "masprism_batch" / "stage" / "budget.py").is_file(), root  # the tree searched is the repo's
    asked = sorted(str(p.relative_to(root)) for d in ("masprism_batch", "pipelines", "kernels")
                   for p in (root / d).rglob("*.py")
                   if "model_fields_set" in (text := p.read_text(encoding="utf-8")) and "token_budget" in text)
    assert asked == ["masprism_batch/stage/budget.py"], asked

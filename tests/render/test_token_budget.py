"""Issue 33 item 1: the token budget fits the device. On CUDA it is sized from free memory (at least 32k where
that fits, never more than fits with the activations the model config implies), on CPU it stays 8,192; a budget
the user set is kept; run.json and the time line name the budget in use. Fake memory figures, on CPU."""

from __future__ import annotations

import random
from types import SimpleNamespace

import torch

from masprism_batch.config import PipelineConfig, SignalsConfig, load_config
from masprism_batch.model.arch import ArchSpec
from masprism_batch.render import buckets

GiB = 2**30


def _arch(rng: random.Random) -> ArchSpec:
    heads = rng.choice([8, 16, 32])
    kv = rng.choice([h for h in (1, 2, 4, 8, heads) if heads % h == 0])
    return ArchSpec("qwen3", rng.randint(1000, 200_000), rng.choice([576, 1024, 2048]), rng.randint(1000, 9000),
                    rng.randint(2, 40), heads, kv, rng.choice([64, 128]), 1e-6, 32768, False, False, False, True, True)


def test_sizing_never_exceeds_what_fits_and_reaches_32k_where_it_fits(rng):
    for _ in range(200):
        arch, dtype_bytes = _arch(rng), rng.choice([2, 4])
        per_token = buckets.activation_bytes_per_token(arch, dtype_bytes)
        fixed = buckets.fixed_activation_bytes(arch, rng.choice([256, 1024]))
        free = rng.randint(0, 160 * GiB)
        n = buckets.device_token_budget(free, per_token, fixed)
        assert buckets.BUDGET_STEP <= n <= buckets.CUDA_MAX_TOKEN_BUDGET
        if n > buckets.BUDGET_STEP:  # the floor aside: what it picked fits in the headroom of the free memory
            assert n * per_token + fixed <= free * buckets.HEADROOM
        if buckets.CUDA_MIN_TOKEN_BUDGET * per_token + fixed <= free * buckets.HEADROOM:
            assert n >= buckets.CUDA_MIN_TOKEN_BUDGET
        more = buckets.device_token_budget(free + rng.randint(0, 8 * GiB), per_token, fixed)
        assert more >= n  # more memory never gives a smaller budget


def test_per_token_bytes_grow_with_the_model(rng):
    arch = _arch(rng)
    base = buckets.activation_bytes_per_token(arch, 2)
    wider = ArchSpec(**{**vars(arch), "intermediate_size": arch.intermediate_size + 1024})
    deeper = ArchSpec(**{**vars(arch), "num_layers": arch.num_layers + 4})  # more layers keep more K/V
    assert buckets.activation_bytes_per_token(wider, 2) > base and buckets.activation_bytes_per_token(deeper, 2) > base
    assert buckets.activation_bytes_per_token(arch, 4) > base


def _fake_cuda(monkeypatch, free: int, cached: int = 0):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, 2 * free))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: cached)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 0)


def _model(arch, device="cuda:0"):
    return SimpleNamespace(device=torch.device(device), dtype=torch.bfloat16, arch=arch, signals_cfg=SignalsConfig(),
                           model_id="fake", tokenizer=None, max_context=8192)


def test_auto_budget_on_cuda_cpu_and_a_budget_the_user_set(monkeypatch, rng):
    arch = _arch(rng)
    per_token = buckets.activation_bytes_per_token(arch, 2)
    fixed = buckets.fixed_activation_bytes(arch, SignalsConfig().nll_chunk)
    big = int((buckets.CUDA_MAX_TOKEN_BUDGET * per_token + fixed) / buckets.HEADROOM) + GiB
    _fake_cuda(monkeypatch, big // 2, cached=big - big // 2)  # torch's own free cache counts as free
    cfg, n, why = buckets.with_token_budget(PipelineConfig(), _model(arch))
    assert n == cfg.batch.token_budget == buckets.CUDA_MAX_TOKEN_BUDGET and "GiB free" in why
    assert cfg.config_hash() == load_config(None, batch__token_budget=n).config_hash()  # the hash names it

    small = int((12_000 * per_token + fixed) / buckets.HEADROOM)
    _fake_cuda(monkeypatch, small)
    cfg, n, why = buckets.with_token_budget(PipelineConfig(), _model(arch))
    assert n == 8192 and "most that fits" in why  # 12,000 fit: rounded down to a step, never more

    user = load_config(None, batch__token_budget=77)  # an option or a config file wins on any device
    assert buckets.with_token_budget(user, _model(arch)) == (user, 77, "set by the user")
    default = PipelineConfig()
    cpu_cfg, n, _ = buckets.with_token_budget(default, _model(arch, "cpu"))
    assert cpu_cfg is default and n == buckets.CPU_TOKEN_BUDGET == default.batch.token_budget  # hash unchanged


def test_cli_option_says_how_the_default_is_sized():
    import typer

    from masprism_batch.cli import app

    group = typer.main.get_command(app)
    for cmd in ("attribute", "run"):
        (opt,) = [p for p in group.commands[cmd].params if p.name == "token_budget"]
        assert "--token-budget" in opt.opts and "sized for the device" in opt.help

"""Shared builders for the model tests: random-weight transformers models and our PrefillModel on the same
weights. Tests hand their `seed` fixture (tests/conftest.py) to the builders, so a test can fail on inputs nobody
chose and MASPRISM_TEST_SEED replays them."""

from __future__ import annotations

import torch

from masprism_batch.config import SignalsConfig
from masprism_batch.model.loader import build_model
from masprism_batch.model.tiny import tiny_tokenizer


def hf_config(family: str, *, tied: bool, rope: dict | None = None, layers: int = 3):
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config

    cls = {"llama": LlamaConfig, "qwen2": Qwen2Config, "qwen3": Qwen3Config}[family]
    rope_parameters = {"rope_type": "default", "rope_theta": 10000.0, **(rope or {})}
    # odd vocab and intermediate sizes on purpose; GQA 4 -> 2 heads; head_dim != hidden / heads for qwen3
    kw = dict(vocab_size=97, hidden_size=48, intermediate_size=72, num_hidden_layers=layers,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-6,
              rope_parameters=rope_parameters, tie_word_embeddings=tied)
    kw["head_dim"] = 16 if family == "qwen3" else 12
    if family == "llama":
        kw.update(attention_bias=True, mlp_bias=False)
    cfg = cls(**kw)
    cfg._attn_implementation = "eager"
    return cfg


def random_hf_model(config, seed: int):
    """transformers model with every parameter random (HF init leaves biases at 0 and norms at 1, which
    would hide a missing bias or norm)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="eager").eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / max(p.shape[-1], 1) ** 0.5)
    return model


def ours_from_hf(model, signals_cfg: SignalsConfig | None = None, device: str = "cpu"):
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return build_model(model.config, state, tiny_tokenizer(), signals_cfg or SignalsConfig(backend="torch"),
                       model_id="test", device=device)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-12))

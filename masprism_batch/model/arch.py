"""What the forward needs to know about an architecture, read once from a transformers config.

Three families share one decoder: Llama (SmolLM2), Qwen2 (q/k/v biases) and Qwen3 (per-head q/k RMSNorm).
Anything the forward does not implement (sliding windows, length-dependent RoPE) is refused here with a
clear message rather than silently computed wrong.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

SUPPORTED_FAMILIES = ("llama", "qwen2", "qwen3")
# RoPE variants whose frequencies do not depend on the sequence length (prefill computes them once).
SUPPORTED_ROPE = ("default", "linear", "llama3", "yarn")


@dataclass(frozen=True)
class ArchSpec:
    family: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    max_position_embeddings: int
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    qk_norm: bool
    tie_word_embeddings: bool

    @property
    def scale(self) -> float:
        return self.head_dim**-0.5


def _rope_parameters(config) -> dict:
    # transformers >= 5 folds rope_theta and rope_scaling into rope_parameters; older ones keep them apart.
    params = getattr(config, "rope_parameters", None)
    if params is None:
        params = dict(getattr(config, "rope_scaling", None) or {})
        params.setdefault("rope_theta", getattr(config, "rope_theta", 10000.0))
    params = dict(params)
    params.setdefault("rope_type", params.get("type", "default"))
    return params


def arch_from_config(config) -> ArchSpec:
    family = getattr(config, "model_type", None)
    if family not in SUPPORTED_FAMILIES:
        raise ValueError(f"model_type {family!r} is not supported (supported: {', '.join(SUPPORTED_FAMILIES)})")
    layer_types = getattr(config, "layer_types", None) or []
    if getattr(config, "use_sliding_window", False) or "sliding_attention" in layer_types:
        raise ValueError("sliding-window attention is not implemented by the prefill runtime")
    rope_type = _rope_parameters(config)["rope_type"]
    if rope_type not in SUPPORTED_ROPE:
        raise ValueError(f"rope_type {rope_type!r} is not supported (supported: {', '.join(SUPPORTED_ROPE)})")
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    if family == "qwen2":
        qkv_bias, o_bias, mlp_bias = True, False, False
    else:
        bias = bool(getattr(config, "attention_bias", False))
        qkv_bias, o_bias, mlp_bias = bias, bias, bool(getattr(config, "mlp_bias", False))
    return ArchSpec(
        family=family,
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_layers=config.num_hidden_layers,
        num_heads=config.num_attention_heads,
        num_kv_heads=getattr(config, "num_key_value_heads", None) or config.num_attention_heads,
        head_dim=head_dim,
        rms_norm_eps=config.rms_norm_eps,
        max_position_embeddings=config.max_position_embeddings,
        qkv_bias=qkv_bias,
        o_bias=o_bias,
        mlp_bias=mlp_bias,
        qk_norm=family == "qwen3",
        tie_word_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
    )


def rope_inv_freq(config, arch: ArchSpec) -> tuple[torch.Tensor, float]:
    """Inverse frequencies [head_dim/2] (fp32) and the cos/sin post-scale, with the config's scaling applied.

    Scaled variants reuse transformers' own init functions so llama3/yarn/linear match it exactly.
    """
    params = _rope_parameters(config)
    if params["rope_type"] == "default":
        dim = arch.head_dim
        inv = 1.0 / (params["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        return inv, 1.0
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    inv, attention_scaling = ROPE_INIT_FUNCTIONS[params["rope_type"]](config, "cpu")
    return inv.float(), float(attention_scaling)


def instrument_layers(num_layers: int, layer_fraction: float) -> list[int]:
    """Layers floor((1 - f) L) .. L-1 (paper: the last 20%), at least the last layer."""
    if not 0.0 < layer_fraction <= 1.0:
        raise ValueError(f"layer_fraction must be in (0, 1], got {layer_fraction}")
    # the epsilon keeps a product that float rounding left at k - 1e-15 from flooring to k - 1
    start = math.floor((1.0 - layer_fraction) * num_layers + 1e-9)
    return list(range(min(start, num_layers - 1), num_layers))

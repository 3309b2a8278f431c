"""What the forward needs to know about an architecture, read once from a transformers config.

Four families share one decoder: Llama (SmolLM2), Qwen2 (q/k/v biases), Qwen3 (per-head q/k RMSNorm) and
Gemma 3 (gemma3_text: q/k norm, RMSNorm weights applied as 1 + w, norms after attention and MLP too, GeGLU,
an embedding scaled by sqrt(hidden), query_pre_attn_scalar, and sliding-window layers with their own RoPE
base). Anything the forward does not implement (sliding windows outside Gemma 3's per-layer types,
length-dependent RoPE, logit soft-capping) is refused here with a clear message rather than silently
computed wrong.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

SUPPORTED_FAMILIES = ("llama", "qwen2", "qwen3", "gemma3_text")
FULL, SLIDING = "full_attention", "sliding_attention"
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
    # Gemma 3 (defaults: the Llama/Qwen decoder)
    sandwich_norm: bool = False  # a norm on the attention output and on the MLP output before each residual add
    norm_plus_one: bool = False  # RMSNorm multiplies by (1 + w): folded into the weights at load time
    mlp_act: str = "silu"  # "silu" | "gelu_tanh" (gelu_pytorch_tanh)
    embed_scale: float = 1.0  # the embedding is multiplied by this (Gemma: sqrt(hidden))
    attn_scale: float | None = None  # softmax scale; None: head_dim ** -0.5 (Gemma: query_pre_attn_scalar ** -0.5)
    # per layer: the sliding window W (query t sees keys t-W+1 .. t) or None (full causal attention)
    windows: tuple[int | None, ...] = ()

    @property
    def scale(self) -> float:
        return self.head_dim**-0.5 if self.attn_scale is None else self.attn_scale

    def window(self, layer: int) -> int | None:
        return self.windows[layer] if self.windows else None


def _rope_parameters(config, layer_type: str | None = None) -> dict:
    # transformers >= 5 folds rope_theta and rope_scaling into rope_parameters; older ones keep them apart.
    # Gemma 3 keys them by layer type (full: rope_theta and any scaling; sliding: rope_local_base_freq).
    params = getattr(config, "rope_parameters", None)
    if layer_type is not None:
        params = (params or {}).get(layer_type)
        if params is None:
            raise ValueError(f"config has no rope_parameters for {layer_type!r} layers")
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
    gemma = family == "gemma3_text"
    layer_types = list(getattr(config, "layer_types", None) or [])
    if not gemma and (getattr(config, "use_sliding_window", False) or SLIDING in layer_types):
        raise ValueError("sliding-window attention is implemented for Gemma 3 only, not for this family")
    for kind in (sorted(set(layer_types)) if gemma else [None]):
        rope_type = _rope_parameters(config, kind)["rope_type"]
        if rope_type not in SUPPORTED_ROPE:
            raise ValueError(f"rope_type {rope_type!r} is not supported (supported: {', '.join(SUPPORTED_ROPE)})")
    if gemma:
        _check_gemma(config, layer_types)
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
        qk_norm=family in ("qwen3", "gemma3_text"),
        tie_word_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
        **(_gemma_fields(config, layer_types) if gemma else {}),
    )


def _check_gemma(config, layer_types: list[str]) -> None:
    for cap in ("attn_logit_softcapping", "final_logit_softcapping"):
        if getattr(config, cap, None) is not None:
            raise ValueError(f"{cap}={getattr(config, cap)} is not implemented by the prefill runtime "
                             f"(Gemma 3 checkpoints leave it unset)")
    if getattr(config, "use_bidirectional_attention", False):
        raise ValueError("use_bidirectional_attention is not a causal LM: refused")
    if len(layer_types) != config.num_hidden_layers or set(layer_types) - {FULL, SLIDING}:
        raise ValueError(f"layer_types must name {config.num_hidden_layers} layers, each {FULL!r} or {SLIDING!r}")
    if FULL not in layer_types:
        # the step signals are read from full-attention layers only (docs/models.md "Gemma 3 in the packed forward")
        raise ValueError("a model whose every layer is sliding-window has no layer to read the step signals from")
    if getattr(config, "hidden_activation", "gelu_pytorch_tanh") != "gelu_pytorch_tanh":
        raise ValueError(f"hidden_activation {config.hidden_activation!r} is not supported (gelu_pytorch_tanh)")


def _gemma_fields(config, layer_types: list[str]) -> dict:
    return dict(sandwich_norm=True, norm_plus_one=True, mlp_act="gelu_tanh", embed_scale=config.hidden_size**0.5,
                attn_scale=float(config.query_pre_attn_scalar) ** -0.5,
                windows=tuple(config.sliding_window if t == SLIDING else None for t in layer_types))


def rope_inv_freq(config, arch: ArchSpec, layer_type: str | None = None) -> tuple[torch.Tensor, float]:
    """Inverse frequencies [head_dim/2] (fp32) and the cos/sin post-scale, with the config's scaling applied.
    layer_type: Gemma 3's FULL or SLIDING (each has its own base and scaling); None for the other families.

    Scaled variants reuse transformers' own init functions so llama3/yarn/linear match it exactly.
    """
    params = _rope_parameters(config, layer_type)
    if params["rope_type"] == "default":
        dim = arch.head_dim
        inv = 1.0 / (params["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        return inv, 1.0
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    kw = {} if layer_type is None else {"layer_type": layer_type}
    inv, attention_scaling = ROPE_INIT_FUNCTIONS[params["rope_type"]](config, "cpu", **kw)
    return inv.float(), float(attention_scaling)


def instrument_layers(num_layers: int, layer_fraction: float, windows: tuple = ()) -> list[int]:
    """Layers floor((1 - f) L) .. L-1 (paper: the last 20%), at least the last layer.

    windows (ArchSpec.windows): a sliding-window layer is never instrumented: only the full-attention layers of
    that range are, or the last full-attention layer where the range holds none (Gemma 3 270M: layer 17 of
    14..17). Why (docs/models.md "Gemma 3 in the packed forward"): a query of a sliding layer sees only the last W
    tokens, so its step mass between two steps more than W tokens apart is zero by construction, not a reading
    of the model; averaging it in would dilute every long-range entry of A by the share of sliding layers."""
    if not 0.0 < layer_fraction <= 1.0:
        raise ValueError(f"layer_fraction must be in (0, 1], got {layer_fraction}")
    # the epsilon keeps a product that float rounding left at k - 1e-15 from flooring to k - 1
    start = math.floor((1.0 - layer_fraction) * num_layers + 1e-9)
    layers = list(range(min(start, num_layers - 1), num_layers))
    if not windows:
        return layers
    full = [i for i in range(num_layers) if windows[i] is None]
    return [i for i in layers if windows[i] is None] or full[-1:]

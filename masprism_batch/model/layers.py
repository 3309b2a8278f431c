"""Weights of one decoder stack and the per-token ops of a layer (everything except attention itself).

All ops work on packed token-major tensors [T, ...] so that several sequences share each GEMM.
q/k/v and gate/up are fused into one matrix each at load time: one GEMM instead of three (two) per layer,
which is where a CPU prefill spends its time.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .arch import ArchSpec


@dataclass
class LayerWeights:
    input_norm: torch.Tensor  # [H]
    post_norm: torch.Tensor  # [H]
    qkv_w: torch.Tensor  # [(Hq + 2 Hk) D, H]
    qkv_b: torch.Tensor | None
    o_w: torch.Tensor  # [H, Hq D]
    o_b: torch.Tensor | None
    q_norm: torch.Tensor | None  # [D] (Qwen3)
    k_norm: torch.Tensor | None
    gate_up_w: torch.Tensor  # [2 I, H]
    gate_up_b: torch.Tensor | None
    down_w: torch.Tensor  # [H, I]
    down_b: torch.Tensor | None


@dataclass
class Weights:
    embed: torch.Tensor  # [V, H]
    lm_head: torch.Tensor  # [V, H]; the same tensor as embed when tied
    final_norm: torch.Tensor  # [H]
    layers: list[LayerWeights]


def _take(state: dict, name: str, required: bool = True) -> torch.Tensor | None:
    for key in (name, f"model.{name}"):
        if key in state:
            return state.pop(key)
    if required:
        raise KeyError(f"weight {name!r} missing from the checkpoint")
    return None


def _cat(parts: list[torch.Tensor | None]) -> torch.Tensor | None:
    return None if parts[0] is None else torch.cat(parts, dim=0)


def weights_from_state_dict(state: dict, arch: ArchSpec, dtype: torch.dtype, device) -> Weights:
    """Map a transformers-style state dict (model.layers.N.self_attn.q_proj.weight, ...) onto Weights."""
    state = dict(state)
    cast = lambda t: None if t is None else t.to(device=device, dtype=dtype).contiguous()  # noqa: E731
    layers = []
    for i in range(arch.num_layers):
        p = f"layers.{i}."
        a, m = p + "self_attn.", p + "mlp."
        q, k, v = (_take(state, f"{a}{n}_proj.weight") for n in "qkv")
        qb, kb, vb = (_take(state, f"{a}{n}_proj.bias", arch.qkv_bias) for n in "qkv")
        layers.append(LayerWeights(
            input_norm=cast(_take(state, p + "input_layernorm.weight")),
            post_norm=cast(_take(state, p + "post_attention_layernorm.weight")),
            qkv_w=cast(torch.cat([q, k, v], dim=0)),
            qkv_b=cast(_cat([qb, kb, vb])) if arch.qkv_bias else None,
            o_w=cast(_take(state, a + "o_proj.weight")),
            o_b=cast(_take(state, a + "o_proj.bias", arch.o_bias)) if arch.o_bias else None,
            q_norm=cast(_take(state, a + "q_norm.weight")) if arch.qk_norm else None,
            k_norm=cast(_take(state, a + "k_norm.weight")) if arch.qk_norm else None,
            gate_up_w=cast(torch.cat([_take(state, m + "gate_proj.weight"), _take(state, m + "up_proj.weight")])),
            gate_up_b=cast(_cat([_take(state, m + "gate_proj.bias", arch.mlp_bias),
                                 _take(state, m + "up_proj.bias", arch.mlp_bias)])) if arch.mlp_bias else None,
            down_w=cast(_take(state, m + "down_proj.weight")),
            down_b=cast(_take(state, m + "down_proj.bias", arch.mlp_bias)) if arch.mlp_bias else None,
        ))
    embed = cast(_take(state, "embed_tokens.weight"))
    lm_head = None if arch.tie_word_embeddings else _take(state, "lm_head.weight", required=False)
    if lm_head is None and not arch.tie_word_embeddings:
        raise KeyError("untied model without lm_head.weight in the checkpoint")
    if embed.shape[0] != arch.vocab_size:
        raise ValueError(f"embed_tokens has {embed.shape[0]} rows, config vocab_size is {arch.vocab_size}")
    return Weights(embed=embed, lm_head=embed if lm_head is None else cast(lm_head),
                   final_norm=cast(_take(state, "norm.weight")), layers=layers)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # in fp32 like transformers, then back to the activation dtype before the weight multiply
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def rope_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor, scaling: float, dtype: torch.dtype):
    """cos/sin [T, D] for each token's position inside its own sequence."""
    freqs = positions[:, None].float() * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * scaling).to(dtype), (emb.sin() * scaling).to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, H, D]; the rotate-half convention of the HF checkpoints."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


def qkv_proj(x: torch.Tensor, lw: LayerWeights, arch: ArchSpec, cos, sin):
    """Normed hidden [T, H] -> roped q [T, Hq, D], k/v [T, Hk, D]."""
    T, D = x.shape[0], arch.head_dim
    qkv = F.linear(x, lw.qkv_w, lw.qkv_b)
    nq, nk = arch.num_heads * D, arch.num_kv_heads * D
    q = qkv[:, :nq].view(T, arch.num_heads, D)
    k = qkv[:, nq : nq + nk].view(T, arch.num_kv_heads, D)
    v = qkv[:, nq + nk :].reshape(T, arch.num_kv_heads, D)
    if lw.q_norm is not None:
        q, k = rms_norm(q, lw.q_norm, arch.rms_norm_eps), rms_norm(k, lw.k_norm, arch.rms_norm_eps)
    return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v


def mlp(x: torch.Tensor, lw: LayerWeights) -> torch.Tensor:
    gate, up = F.linear(x, lw.gate_up_w, lw.gate_up_b).chunk(2, dim=-1)
    return F.linear(F.silu(gate) * up, lw.down_w, lw.down_b)

"""Weights of one decoder stack and the per-token ops of a layer (everything except attention itself).

All ops work on packed token-major tensors [T, ...] so that several sequences share each GEMM.
q/k/v and gate/up are fused into one matrix each at load time: one GEMM instead of three (two) per layer,
which is where a CPU prefill spends its time. q and k stay side by side ([T, Hq + Hk, D]) so that Qwen3's
q/k norms and RoPE each run as one op over both. Elementwise ops work in place where the operand is ours:
at T = thousands every fresh [T, I] tensor is a round of page faults on CPU.
On CUDA (Triton importable, MASPRISM_NO_FUSED unset) RMSNorm, Qwen3's q/k norm + RoPE and the MLP's
silu(gate) * up run as fused Triton kernels (kernels/elementwise.py): one pass each instead of a chain of
torch elementwise ops.
Gemma 3's RMSNorm multiplies by (1 + w): the 1 is added to every norm weight at load time (in fp32, before
the cast), so every norm here is the one op; its extra norms on the attention and MLP outputs are
`attn_out_norm` / `mlp_out_norm` (None for the other families), its GeGLU is `mlp(..., "gelu_tanh")`.
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from masprism_batch.model.arch import ArchSpec

log = logging.getLogger(__name__)


@dataclass
class LayerWeights:
    input_norm: torch.Tensor  # [H]
    post_norm: torch.Tensor  # [H]: the norm before the MLP (Gemma 3: pre_feedforward_layernorm)
    qkv_w: torch.Tensor  # [(Hq + 2 Hk) D, H]
    qkv_b: torch.Tensor | None
    o_w: torch.Tensor  # [H, Hq D]
    o_b: torch.Tensor | None
    qk_norm: torch.Tensor | None  # [Hq + Hk, D]: Qwen3's q_norm repeated over q heads, then k_norm over k heads
    gate_up_w: torch.Tensor  # [2 I, H]
    gate_up_b: torch.Tensor | None
    down_w: torch.Tensor  # [H, I]
    down_b: torch.Tensor | None
    attn_out_norm: torch.Tensor | None = None  # Gemma 3's post_attention_layernorm (on the attention output)
    mlp_out_norm: torch.Tensor | None = None  # Gemma 3's post_feedforward_layernorm (on the MLP output)


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
    # Gemma's (1 + w), added in fp32 before the cast (transformers adds it in fp32 too)
    norm = (lambda t: cast(t.float() + 1.0)) if arch.norm_plus_one else cast  # noqa: E731
    # Llama/Qwen name the pre-MLP norm post_attention_layernorm; Gemma 3 uses that name for the norm on the
    # attention output and calls the pre-MLP one pre_feedforward_layernorm
    pre_mlp = "pre_feedforward_layernorm" if arch.sandwich_norm else "post_attention_layernorm"
    layers = []
    for i in range(arch.num_layers):
        p = f"layers.{i}."
        a, m = p + "self_attn.", p + "mlp."
        q, k, v = (_take(state, f"{a}{n}_proj.weight") for n in "qkv")
        qb, kb, vb = (_take(state, f"{a}{n}_proj.bias", arch.qkv_bias) for n in "qkv")
        layers.append(LayerWeights(
            input_norm=norm(_take(state, p + "input_layernorm.weight")),
            post_norm=norm(_take(state, p + pre_mlp + ".weight")),
            qkv_w=cast(torch.cat([q, k, v], dim=0)),
            qkv_b=cast(_cat([qb, kb, vb])) if arch.qkv_bias else None,
            o_w=cast(_take(state, a + "o_proj.weight")),
            o_b=cast(_take(state, a + "o_proj.bias", arch.o_bias)) if arch.o_bias else None,
            qk_norm=norm(torch.cat([_take(state, a + "q_norm.weight").expand(arch.num_heads, -1),
                                    _take(state, a + "k_norm.weight").expand(arch.num_kv_heads, -1)]))
            if arch.qk_norm else None,
            gate_up_w=cast(torch.cat([_take(state, m + "gate_proj.weight"), _take(state, m + "up_proj.weight")])),
            gate_up_b=cast(_cat([_take(state, m + "gate_proj.bias", arch.mlp_bias),
                                 _take(state, m + "up_proj.bias", arch.mlp_bias)])) if arch.mlp_bias else None,
            down_w=cast(_take(state, m + "down_proj.weight")),
            down_b=cast(_take(state, m + "down_proj.bias", arch.mlp_bias)) if arch.mlp_bias else None,
            attn_out_norm=norm(_take(state, p + "post_attention_layernorm.weight")) if arch.sandwich_norm else None,
            mlp_out_norm=norm(_take(state, p + "post_feedforward_layernorm.weight")) if arch.sandwich_norm else None,
        ))
    embed = cast(_take(state, "embed_tokens.weight"))
    final_norm = norm(_take(state, "norm.weight"))
    lm_head = _take(state, "lm_head.weight", required=False)  # a tied checkpoint may still carry a copy
    if arch.tie_word_embeddings:
        lm_head = None
    elif lm_head is None:
        raise KeyError("untied model without lm_head.weight in the checkpoint")
    unused = sorted(k for k in state if "rotary_emb" not in k)  # leftovers mean a naming mismatch
    if unused:
        log.warning("%d checkpoint tensors unused by the %s forward, e.g. %s", len(unused), arch.family, unused[:3])
    if embed.shape[0] != arch.vocab_size:
        raise ValueError(f"embed_tokens has {embed.shape[0]} rows, config vocab_size is {arch.vocab_size}")
    return Weights(embed=embed, lm_head=embed if lm_head is None else cast(lm_head), final_norm=final_norm,
                   layers=layers)


@functools.cache
def _elementwise_kernels():
    """The fused Triton module, or None (not importable, or MASPRISM_NO_FUSED=1)."""
    if os.environ.get("MASPRISM_NO_FUSED", "0") == "1":
        return None
    try:
        from masprism_batch.kernels import elementwise
    except Exception as exc:  # noqa: BLE001 - no triton / broken install: the torch ops below
        log.info("fused elementwise kernels unavailable (%s); using torch ops", exc)
        return None
    return elementwise


def _fused(x: torch.Tensor, head_dim: int | None = None):
    if x.device.type != "cuda":
        return None
    ew = _elementwise_kernels()
    return ew if ew is not None and ew.supports(x, head_dim) else None


@functools.cache
def _scalar(value: float) -> torch.Tensor:
    """A 0-dim fp32 CPU tensor of `value`: an in-place op with a Python float wraps it in a double tensor
    and converts it (an aten::to + copy_ per call); a 0-dim fp32 operand is taken as the
    same fp32 scalar (bitwise the same result), on any device."""
    return torch.tensor(value, dtype=torch.float32)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x * rsqrt(mean(x^2) + eps) * weight over the last dim, in fp32 like transformers, then back to the
    activation dtype before the weight multiply. Returns a fresh tensor; x is not modified."""
    if weight.dim() == 1 and (ew := _fused(x)) is not None:
        return ew.rms_norm(x, weight, eps)
    xf = x.float()
    ms = torch.linalg.vector_norm(xf, dim=-1, keepdim=True).square_().div_(_scalar(float(x.shape[-1])))
    return (xf * ms.add_(_scalar(eps)).rsqrt_()).to(x.dtype).mul_(weight)


def rope_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor, scaling: float, dtype: torch.dtype):
    """cos/sin [T, D/2] for each token's position inside its own sequence (the two halves of the HF
    rotate-half layout use the same frequencies, so only one half is kept)."""
    freqs = positions[:, None].float() * inv_freq[None, :]
    if scaling == 1.0:  # x * 1.0 == x: skip the two multiplies (and their scalar conversions)
        return freqs.cos().to(dtype), freqs.sin().to(dtype)
    return (freqs.cos() * scaling).to(dtype), (freqs.sin() * scaling).to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, H, D] -> fresh roped tensor, rotate-half convention of the HF checkpoints:
    out1 = x1 cos - x2 sin, out2 = x2 cos + x1 sin (x1, x2 the two halves of the head dim)."""
    half = x.shape[-1] // 2
    x1, x2, c, s = x[..., :half], x[..., half:], cos[:, None, :], sin[:, None, :]
    out = torch.empty_like(x)
    o1, o2 = out[..., :half], out[..., half:]
    torch.mul(x1, c, out=o1).addcmul_(x2, s, value=-1)
    torch.mul(x2, c, out=o2).addcmul_(x1, s)
    return out


def qkv_proj(x: torch.Tensor, lw: LayerWeights, arch: ArchSpec, cos, sin):
    """Normed hidden [T, H] -> roped q [T, Hq, D], k/v [T, Hk, D] (strided views, not contiguous)."""
    T, D, Hq = x.shape[0], arch.head_dim, arch.num_heads
    qkv = F.linear(x, lw.qkv_w, lw.qkv_b)
    n_qk = (Hq + arch.num_kv_heads) * D
    qk = qkv[:, :n_qk].view(T, -1, D)
    if (ew := _fused(qk, D)) is not None:
        qk = ew.qk_norm_rope(qk, lw.qk_norm, arch.rms_norm_eps, cos, sin)
        return qk[:, :Hq], qk[:, Hq:], qkv[:, n_qk:].view(T, arch.num_kv_heads, D)
    if lw.qk_norm is not None:
        qk = rms_norm(qk, lw.qk_norm, arch.rms_norm_eps)
    qk = apply_rope(qk, cos, sin)
    return qk[:, :Hq], qk[:, Hq:], qkv[:, n_qk:].view(T, arch.num_kv_heads, D)


def mlp(x: torch.Tensor, lw: LayerWeights, act: str = "silu") -> torch.Tensor:
    gate_up = F.linear(x, lw.gate_up_w, lw.gate_up_b)
    if act == "silu" and (ew := _fused(gate_up)) is not None:
        return F.linear(ew.silu_mul(gate_up), lw.down_w, lw.down_b)
    gate, up = gate_up.chunk(2, dim=-1)
    gate = F.silu(gate) if act == "silu" else F.gelu(gate, approximate="tanh")
    return F.linear(gate.mul_(up), lw.down_w, lw.down_b)


def embed(ids: torch.Tensor, w: Weights, arch: ArchSpec) -> torch.Tensor:
    """Token embeddings [T, H]; Gemma scales them by sqrt(hidden), the scale rounded to the activation dtype
    first as transformers does (a fresh tensor either way: the residual stream is added to in place)."""
    h = F.embedding(ids, w.embed)
    return h if arch.embed_scale == 1.0 else h.mul_(torch.tensor(arch.embed_scale, dtype=h.dtype))


def attn_residual(h: torch.Tensor, o: torch.Tensor, lw: LayerWeights, arch: ArchSpec) -> None:
    """h += o_proj(o), through Gemma's norm on the attention output where the layer has one (in place: h is
    the forward's own residual stream)."""
    y = F.linear(o.reshape(o.shape[0], -1), lw.o_w, lw.o_b)
    h.add_(y if lw.attn_out_norm is None else rms_norm(y, lw.attn_out_norm, arch.rms_norm_eps))


def mlp_residual(h: torch.Tensor, lw: LayerWeights, arch: ArchSpec) -> None:
    """h += mlp(norm(h)), through Gemma's norm on the MLP output where the layer has one."""
    y = mlp(rms_norm(h, lw.post_norm, arch.rms_norm_eps), lw, arch.mlp_act)
    h.add_(y if lw.mlp_out_norm is None else rms_norm(y, lw.mlp_out_norm, arch.rms_norm_eps))

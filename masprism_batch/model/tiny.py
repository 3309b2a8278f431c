"""`tiny-random`: a seeded tiny Qwen3 with a byte-level tokenizer built in code.

Needs no file and no network, builds in well under a second: tests and smoke runs use it so that they
never depend on SmolLM2 being installed. Its signals are meaningless but deterministic.
"""

from __future__ import annotations

import torch

TINY_SEED = 0
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def tiny_config():
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=272,  # 256 bytes + specials, padded like real checkpoints pad their vocab
        hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=8192, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, tie_word_embeddings=True,
        attention_bias=False,
    )


def _bytes_to_unicode() -> dict[int, str]:
    # GPT-2's reversible byte -> printable-char map, so that token id == byte value
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs, strict=True)}


def tiny_tokenizer():
    """Byte-level tokenizer (ids 0..255 are the bytes, then the special tokens), no merges, no files."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {ch: b for b, ch in _bytes_to_unicode().items()}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=SPECIAL_TOKENS[0],
                                   pad_token=SPECIAL_TOKENS[0], model_max_length=8192)


def tiny_state_dict(config, seed: int = TINY_SEED) -> dict[str, torch.Tensor]:
    """HF-named random weights of a Qwen3 or Gemma 3 config (benchmarks build real shapes with it). Scaled ~1/sqrt(fan_in) (not 0.02) so attention is far from uniform and
    the signals have structure that tests can see."""
    g = torch.Generator().manual_seed(seed)
    H, inter, D = config.hidden_size, config.intermediate_size, config.head_dim
    Hq, Hk = config.num_attention_heads, config.num_key_value_heads

    def lin(out_f, in_f):
        return torch.randn(out_f, in_f, generator=g) / in_f**0.5

    def norm(n):
        return 1.0 + 0.1 * torch.randn(n, generator=g)

    # embed is tied to the LM head: 0.25 keeps logits at std ~2, so NLLs are neither ~0 nor huge
    sd = {"model.embed_tokens.weight": 0.25 * torch.randn(config.vocab_size, H, generator=g),
          "model.norm.weight": norm(H)}
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}."
        sd.update({
            p + "input_layernorm.weight": norm(H), p + "post_attention_layernorm.weight": norm(H),
            p + "self_attn.q_proj.weight": 2.0 * lin(Hq * D, H), p + "self_attn.k_proj.weight": 2.0 * lin(Hk * D, H),
            p + "self_attn.v_proj.weight": lin(Hk * D, H), p + "self_attn.o_proj.weight": lin(H, Hq * D),
            p + "self_attn.q_norm.weight": norm(D), p + "self_attn.k_norm.weight": norm(D),
            p + "mlp.gate_proj.weight": lin(inter, H), p + "mlp.up_proj.weight": lin(inter, H),
            p + "mlp.down_proj.weight": lin(H, inter),
        })
        if getattr(config, "model_type", "") == "gemma3_text":  # its norms on the attention and MLP outputs
            sd.update({p + "pre_feedforward_layernorm.weight": norm(H), p + "post_feedforward_layernorm.weight": norm(H)})
    return sd

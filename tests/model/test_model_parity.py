"""Logits and token NLL of our forward vs transformers' own eager model, fp32, random weights."""

from __future__ import annotations

import pytest
import torch
from model_helpers import hf_config, ours_from_hf, random_hf_model, rel_err

LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 64}
CASES = [
    ("llama", False, LLAMA3_ROPE),  # SmolLM2's family, untied, biased attention, llama3 rope scaling
    ("llama", True, None),
    ("qwen2", False, {"rope_type": "linear", "factor": 2.0}),  # q/k/v biases
    ("qwen2", True, None),
    ("qwen3", True, None),  # q/k norms, head_dim != hidden/heads
    ("qwen3", False, {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}),
]


@pytest.mark.parametrize("family,tied,rope", CASES, ids=lambda c: str(c) if not isinstance(c, dict) else c["rope_type"])
def test_logits_match_transformers(family, tied, rope, seed):
    hf = random_hf_model(hf_config(family, tied=tied, rope=rope), seed)
    ours = ours_from_hf(hf)
    g = torch.Generator().manual_seed(seed)
    L = int(torch.randint(70, 140, (1,), generator=g))  # beyond original_max_position_embeddings=64
    ids = torch.randint(0, hf.config.vocab_size, (L,), generator=g)
    with torch.no_grad():
        ref = hf(ids[None]).logits[0]
    got = ours.forward_logits(ids.tolist())
    assert got.shape == ref.shape
    assert rel_err(got, ref) <= 1e-4, f"seed={seed} L={L} rel={rel_err(got, ref):.2e}"
    if tied:
        assert ours.weights.lm_head is ours.weights.embed
    else:
        assert not torch.equal(ours.weights.lm_head, ours.weights.embed)


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_token_nll_matches_log_softmax(family, seed):
    hf = random_hf_model(hf_config(family, tied=family == "qwen3"), seed)
    ours = ours_from_hf(hf)
    g = torch.Generator().manual_seed(seed + 1)
    L = int(torch.randint(40, 90, (1,), generator=g))
    ids = torch.randint(0, hf.config.vocab_size, (L,), generator=g)
    with torch.no_grad():
        logp = torch.log_softmax(hf(ids[None]).logits[0].double(), dim=-1)
    want = -logp[torch.arange(L - 1), ids[1:]]
    (sig,) = ours.signals([ids.tolist()], [[0] * L])
    assert sig.n_tokens == L and sig.token_nll.shape == (L,) and sig.token_nll.dtype.name == "float32"
    assert torch.isnan(torch.tensor(sig.token_nll[0]))
    got = torch.from_numpy(sig.token_nll[1:]).double()
    assert rel_err(got, want) <= 1e-4, f"seed={seed} rel={rel_err(got, want):.2e}"


def test_unsupported_configs_are_refused():
    from transformers import Qwen2Config

    from masprism_batch.model.arch import arch_from_config

    with pytest.raises(ValueError, match="sliding"):
        arch_from_config(Qwen2Config(use_sliding_window=True, sliding_window=16, max_window_layers=0))
    cfg = hf_config("llama", tied=True, rope={"rope_type": "dynamic", "factor": 2.0})
    with pytest.raises(ValueError, match="dynamic"):
        arch_from_config(cfg)

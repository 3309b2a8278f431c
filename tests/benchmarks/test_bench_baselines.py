"""The eager baselines of benchmarks/kernels/bench_prefill.py compute the same signals as PrefillModel.signals.

A speed ratio against a baseline is only meaningful when the baseline does the same job: both eager
variants (all layers' attentions kept, or folded per layer and dropped) must give our token NLL and step
attention on fresh random weights, odd length, GQA, tokens outside steps.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from model_helpers import hf_config, ours_from_hf, random_hf_model

from benchmarks.kernels import bench_prefill


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_eager_baselines_match_signals(family, seed):
    hf = random_hf_model(hf_config(family, tied=family == "qwen3", layers=10), seed)
    ours = ours_from_hf(hf)
    g = torch.Generator().manual_seed(seed)
    T = 123
    ids = torch.randint(0, hf.config.vocab_size, (T,), generator=g)
    # a 3-token preamble outside every step, then steps of random ragged sizes (1-token steps included)
    sizes = torch.randint(1, 30, (40,), generator=g).tolist()
    sid = [-1] * 3 + [i for i, n in enumerate(sizes) for _ in range(n)][: T - 3]
    with torch.inference_mode():
        sig = ours.signals([ids.tolist()], [sid])[0]
        nll_e, mass_e = bench_prefill.eager_signals(hf, ids, sid, ours.instrument_layers)
        nll_s, mass_s = bench_prefill.eager_stream_signals(hf, ids, sid, ours.instrument_layers)
    n = max(sid) + 1
    per_token = torch.bincount(torch.tensor([s for s in sid if s >= 0]), minlength=n).float()[:, None]
    # fp32 forward of 10 layers (2 instrumented) in two implementations: agreement to ~1e-4 relative (summation order)
    for nll, mass, name in ((nll_e, mass_e, "eager"), (nll_s, mass_s, "eager_stream")):  # both layer-averaged
        np.testing.assert_allclose(sig.token_nll[1:], nll.numpy(), rtol=1e-4, atol=1e-4, err_msg=f"{name} seed={seed}")
        np.testing.assert_allclose(sig.step_attn, (mass / per_token).numpy(), rtol=1e-4, atol=1e-6,
                                   err_msg=f"{name} seed={seed}")
    assert not np.isnan(sig.step_attn).any() and sig.step_attn.sum() > 0

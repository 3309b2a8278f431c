"""The CUDA path of a packed forward holds no host sync but the one that brings its results back, and little glue
(issue 45 items 1 and 3), checked on CPU: tests/signals/census.py runs the product's pass-1 and pass-2 calls
(model.signals as stage/prefill.py and stage/attribute.py make them) with every CUDA-only branch forced on and
the Triton launches stubbed, and records every host read and glue op with its source line.

Before issue 45 the same census counted ~19 host syncs per forward (one per instrumented layer, the batch checks,
the step plan, the NLL compaction, the result copies, a synchronize) and the C++ op-count test, the only glue
bound, never ran this path. (The C++ path's bound stays: tests/model/test_glue_ops.py.)
"""

from __future__ import annotations

import census as census_lib
import pytest
import torch

from masprism_batch.config import SignalsConfig
from masprism_batch.model.loader import build_model
from masprism_batch.model.tiny import tiny_state_dict, tiny_tokenizer

pytest.importorskip("triton", reason="the census forces the Triton backend's code path (launches stubbed)")

MAX_SYNCS = 1  # the one transfer that brings the pack's NLL and step mass back
MAX_GLUE_PER_LAYER = 4
N_LAYERS = 12  # layers 9-11 instrumented (the last 20%)


@pytest.fixture(scope="module")
def qwen_like():
    """Qwen3 layout (q/k norm, GQA 4:2, head dim 64: the Triton kernels' shapes), small enough for CPU."""
    from transformers import Qwen3Config

    cfg = Qwen3Config(vocab_size=272, hidden_size=128, intermediate_size=256, num_hidden_layers=N_LAYERS,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=4096,
                      rms_norm_eps=1e-6, rope_theta=1e6, tie_word_embeddings=True, attention_bias=False)
    return build_model(cfg, tiny_state_dict(cfg), tiny_tokenizer(), SignalsConfig(backend="triton"),
                       model_id="census", dtype=torch.bfloat16)


def _pack(seed: int, lengths: list[int], preamble: int = 20):
    g = torch.Generator().manual_seed(seed)
    seqs = [torch.randint(0, 256, (n,), generator=g).tolist() for n in lengths]
    sids = []
    for n in lengths:  # contiguous steps of random lengths, a preamble outside every step, a few -1 gaps
        step = torch.searchsorted(torch.randint(3, 40, (n,), generator=g).cumsum(0), torch.arange(n), right=True)
        step = torch.where((torch.arange(n) < preamble) | (torch.rand(n, generator=g) < 0.05), -1, step)
        sids.append(step.tolist())
    return seqs, sids


PASSES = {  # as the model stage calls the forward
    "pass1": dict(nll_steps_only=True),
    "pass2": dict(nll_steps_only=True, keep_kv=True),
    "per_head": dict(nll_steps_only=True, per_head=True),
    "every_nll": dict(),  # a caller reading every token's NLL (benchmarks, tests): the uncompacted LM head
}
PACKS = {"multi": [47, 123, 300, 1], "single": [457]}


def _census(monkeypatch, model, seqs, sids, **kw):
    census = census_lib.Census()
    census_lib.cuda_path(monkeypatch, census)
    if kw.get("nll_steps_only"):
        kw = dict(kw, nll_from=[0] * len(seqs))
    model.signals(seqs, sids, **kw)  # warm: one-time work (imports, caches) is not the forward's
    with census:
        census.on = True
        out = model.signals(seqs, sids, **kw)
    assert not census.on, "the census never saw the results come back (model.pack.fetch not called)"
    assert len(out) == len(seqs)
    return census


@pytest.mark.parametrize("pack", list(PACKS))
@pytest.mark.parametrize("which", list(PASSES))
def test_cuda_path_one_sync_and_bounded_glue_per_forward(monkeypatch, qwen_like, pack, which, seed):
    seqs, sids = _pack(seed, PACKS[pack])
    census = _census(monkeypatch, qwen_like, seqs, sids, **PASSES[which])
    detail = f"{which}, {pack} pack (seed {seed}):\n{census.report()}"
    assert census.launches["_attn_fwd"] == N_LAYERS, detail  # the CUDA path was taken: every layer's Triton attention
    assert census.launches["_nll_partial"] == 1, detail
    assert census.n_reads <= MAX_SYNCS, f"{census.n_reads} host syncs > {MAX_SYNCS}: {detail}"
    per_layer = census.n_glue / N_LAYERS
    assert per_layer <= MAX_GLUE_PER_LAYER, f"{per_layer:.2f} glue ops per layer > {MAX_GLUE_PER_LAYER}: {detail}"


def test_census_catches_a_sync_inside_the_layer_stack(monkeypatch, qwen_like, seed):
    """A host read slipped into a layer (as `int(n_steps.max())` once was) is counted, with its line."""
    from masprism_batch.model import forward

    seqs, sids = _pack(seed, PACKS["multi"])
    mlp_residual = forward.mlp_residual

    def mlp_with_a_read(h, lw, arch):
        h[0, 0].item()  # the host waits for this layer before it can queue the next
        return mlp_residual(h, lw, arch)
    monkeypatch.setattr(forward, "mlp_residual", mlp_with_a_read)
    census = _census(monkeypatch, qwen_like, seqs, sids, **PASSES["pass1"])
    assert census.n_reads >= N_LAYERS + 1, census.report()

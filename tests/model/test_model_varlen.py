"""Packed varlen forward: same per-sequence results as one sequence at a time; step attention matches a
brute-force computation from transformers' full attention probabilities."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from model_helpers import hf_config, ours_from_hf, random_hf_model, rel_err

from masprism_batch.config import SignalsConfig


def random_steps(L: int, g: torch.Generator) -> list[int]:
    """A preamble of -1 tokens, then contiguous steps of random lengths, sometimes a -1 gap between them."""
    pre = int(torch.randint(0, 6, (1,), generator=g))
    ids, step = [-1] * pre, 0
    while len(ids) < L:
        n = int(torch.randint(1, 15, (1,), generator=g))
        gap = int(torch.randint(0, 3, (1,), generator=g)) == 0
        ids += [step] * n + ([-1] if gap else [])
        step += 1
    return ids[:L]


def brute_force_A(hf, ids: torch.Tensor, sid: list[int], layers: list[int]) -> np.ndarray:
    with torch.no_grad():
        att = hf(ids[None], output_attentions=True).attentions  # per layer [1, H, L, L]
    p = torch.stack([att[i][0] for i in layers]).double().mean(dim=(0, 1))  # [L, L]
    n = max(sid) + 1
    onehot = torch.zeros(len(sid), n, dtype=torch.float64)
    for t, s in enumerate(sid):
        if s >= 0:
            onehot[t, s] = 1.0
    mass = onehot.T @ p @ onehot
    return (mass / onehot.sum(0).clamp_min(1)[:, None]).numpy()


@pytest.fixture(scope="module")
def pair(module_seed):
    seed = module_seed
    hf = random_hf_model(hf_config("qwen3", tied=True, layers=5), seed)
    return seed, hf, ours_from_hf(hf, SignalsConfig(backend="torch", layer_fraction=0.4, attn_block=32))


def test_step_attention_matches_full_attention(pair):
    seed, hf, ours = pair
    assert ours.instrument_layers == [3, 4]
    g = torch.Generator().manual_seed(seed)
    L = int(torch.randint(60, 120, (1,), generator=g))
    ids = torch.randint(0, hf.config.vocab_size, (L,), generator=g)
    sid = random_steps(L, g)
    (sig,) = ours.signals([ids.tolist()], [sid])
    want = brute_force_A(hf, ids, sid, [3, 4])
    assert sig.step_attn.shape == want.shape and sig.step_attn.dtype == np.float32
    np.testing.assert_allclose(sig.step_attn, want, rtol=1e-4, atol=1e-6, err_msg=f"seed={seed}")
    assert np.all(np.triu(sig.step_attn, 1) == 0), "causal: a step attends to no later step"


def test_rows_sum_to_one_when_every_token_is_in_a_step(pair):
    seed, _, ours = pair
    g = torch.Generator().manual_seed(seed + 7)
    L = 77
    sid = sorted(torch.randint(0, 9, (L,), generator=g).tolist())
    sid = np.unique(sid, return_inverse=True)[1].tolist()  # contiguous 0..n-1
    (sig,) = ours.signals([torch.randint(0, 97, (L,), generator=g).tolist()], [sid])
    np.testing.assert_allclose(sig.step_attn.sum(1), 1.0, rtol=1e-5)


def test_packing_equals_one_at_a_time(pair):
    seed, _, ours = pair
    g = torch.Generator().manual_seed(seed + 1)
    lengths = [int(torch.randint(5, 90, (1,), generator=g)) for _ in range(3)]
    seqs = [torch.randint(0, 97, (n,), generator=g).tolist() for n in lengths]
    sids = [random_steps(n, g) for n in lengths]
    packed = ours.signals(seqs, sids)
    assert ours.last_timing.sequences == 3 and ours.last_timing.tokens == sum(lengths)
    for b, (s, sid) in enumerate(zip(seqs, sids, strict=True)):
        (alone,) = ours.signals([s], [sid])
        assert packed[b].n_tokens == len(s)
        np.testing.assert_allclose(packed[b].token_nll, alone.token_nll, rtol=1e-4, atol=1e-5,
                                   err_msg=f"seed={seed} seq={b}")
        np.testing.assert_allclose(packed[b].step_attn, alone.step_attn, rtol=1e-4, atol=1e-6,
                                   err_msg=f"seed={seed} seq={b}")
    hidden_packed = ours.prefill(seqs)
    hidden_first = ours.prefill(seqs[:1])
    assert rel_err(hidden_packed[: lengths[0]], hidden_first) <= 1e-4


def test_nll_only_where_read(pair):
    """nll_from / nll_steps_only (what the model stage asks, issue 24): the NLL of the tokens read equals the
    full computation's, every other entry is nan, and the step attention is untouched."""
    seed, _, ours = pair
    g = torch.Generator().manual_seed(seed + 3)
    lengths = [int(torch.randint(20, 90, (1,), generator=g)) for _ in range(3)]
    seqs = [torch.randint(0, 97, (n,), generator=g).tolist() for n in lengths]
    sids = [random_steps(n, g) for n in lengths]
    starts = [int(torch.randint(0, n // 2, (1,), generator=g)) for n in lengths]
    full = ours.signals(seqs, sids)
    part = ours.signals(seqs, sids, nll_from=starts, nll_steps_only=True)
    for b, (f, p, sid, s0) in enumerate(zip(full, part, sids, starts, strict=True)):
        read = (np.arange(len(sid)) >= s0) & (np.asarray(sid) >= 0)
        read[0] = False  # the first token has no NLL in either
        assert np.isnan(p.token_nll[~read]).all(), f"seed={seed} seq={b}"
        np.testing.assert_allclose(p.token_nll[read], f.token_nll[read], rtol=1e-5, atol=1e-6,
                                   err_msg=f"seed={seed} seq={b}")
        np.testing.assert_array_equal(p.step_attn, f.step_attn)
    with pytest.raises(ValueError, match="nll_from"):
        ours.signals(seqs, sids, nll_from=starts[:1])


def test_prefill_nll_is_the_signals_token_nll_without_the_signals(pair):
    """The benchmarks' baseline (a plain forward with every token's NLL) reads the same NLL as the signals forward."""
    seed, _, ours = pair
    g = torch.Generator().manual_seed(seed + 5)
    lengths = [int(torch.randint(1, 90, (1,), generator=g)) for _ in range(3)] + [1]
    seqs = [torch.randint(0, 97, (n,), generator=g).tolist() for n in lengths]
    got = ours.prefill_nll(seqs)
    want = ours.signals(seqs, [random_steps(n, g) for n in lengths])
    assert ours.last_timing.tokens == sum(lengths)
    for b, (x, w) in enumerate(zip(got, want, strict=True)):
        assert x.shape == (lengths[b],) and np.isnan(x[0]), f"seed={seed} seq={b}"
        np.testing.assert_allclose(x, w.token_nll, rtol=1e-5, atol=1e-6, err_msg=f"seed={seed} seq={b}")


def test_explicit_n_steps_pads_empty_trailing_steps(pair):
    _, _, ours = pair
    seq = torch.randint(0, 97, (20,)).tolist()
    (sig,) = ours.signals([seq], [[0] * 10 + [1] * 10], n_steps=[4])
    assert sig.step_attn.shape == (4, 4)
    assert np.all(sig.step_attn[2:] == 0) and sig.step_attn[1, :2].sum() > 0.99


@pytest.mark.parametrize("seqs,sids,match", [
    ([], [], "no sequences"),
    ([[]], [[]], "has 0 tokens"),
    ([[1, 2, 500]], [[0, 0, 0]], "out of range"),
    ([[1, 2, 3]], [[0, 0]], "step ids"),
    ([[1, 2, 3]], [[0, -2, 0]], ">= -1"),
    ([[1, 2]], [[0, 0], [0, 0]], "step_ids lists"),
])
def test_bad_input_is_refused(pair, seqs, sids, match):
    with pytest.raises(ValueError, match=match):
        pair[2].signals(seqs, sids)


def test_too_long_sequence_is_refused(pair):
    ours = pair[2]
    with pytest.raises(ValueError, match="model context"):
        ours.prefill([[1] * (ours.max_context + 1)])

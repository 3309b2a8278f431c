"""The torch backend (reference, CPU production fallback) against the dense fp64 oracle."""

from __future__ import annotations

import pytest
import torch
from signals_oracle import (
    TOL,
    check_attention,
    dense_nll,
    make_attn_case,
    make_nll_case,
    new_seed,
    poisoned_attn_out,
)

from masprism_batch import signals
from masprism_batch.signals import reference

SHAPES = [  # (lengths packed together, Hq, Hk, D, step pattern)
    ([47], 4, 4, 64, "ragged"),  # GQA ratio 1
    ([123, 47], 4, 2, 64, "ones"),  # ratio 2, 1-token steps
    ([1023], 8, 2, 64, "giant"),  # ratio 4, one giant step
    ([47, 123, 5, 1], 8, 1, 128, "ragged"),  # ratio 8, tiny sequences
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("lengths,hq,hk,d,pattern", SHAPES)
def test_step_attention_matches_dense_oracle(lengths, hq, hk, d, pattern, dtype):
    c = make_attn_case(lengths, hq, hk, d, dtype, new_seed(), pattern)
    out = poisoned_attn_out(c, reference.compute_dtype(dtype))
    got = signals.step_attention(c.q, c.k, c.v, c.cu_seqlens, c.step_ids, c.n_steps, c.scale,
                                 backend="torch", block=64, out=out)
    assert all(g is p for g, p in zip(got, out, strict=True)), "out tensors must be the ones returned"
    check_attention(c, got, TOL[dtype])


def test_step_attention_bf16_inputs_accumulate_in_fp32():
    c = make_attn_case([123, 47], 8, 2, 64, torch.bfloat16, new_seed(), "ragged")
    got = signals.step_attention(c.q, c.k, c.v, c.cu_seqlens, c.step_ids, c.n_steps, c.scale, backend="torch")
    assert got[0].dtype == torch.bfloat16 and got[1].dtype == torch.float32 and got[2].dtype == torch.float32
    check_attention(c, got, TOL[torch.bfloat16])


def test_blockwise_fallback_matches_oracle(monkeypatch):
    """The non-CPU path (no fused CPU flash op) is the blockwise softmax; force it here."""
    monkeypatch.setattr(reference, "_flash_cpu", lambda *a: None)
    c = make_attn_case([123, 47], 4, 2, 64, torch.float32, new_seed(), "ragged")
    got = reference.step_attention(c.q, c.k, c.v, c.cu_seqlens, c.step_ids, c.n_steps, c.scale, block=32)
    check_attention(c, got, TOL[torch.float32])


def test_small_score_budget_gives_same_mass(monkeypatch):
    c = make_attn_case([123], 4, 4, 64, torch.float64, new_seed(), "ragged")
    full = reference.step_attention(c.q, c.k, c.v, c.cu_seqlens, c.step_ids, c.n_steps, c.scale)[2]
    monkeypatch.setattr(reference, "SCORE_BUDGET", 1)  # forces the minimum block of 16 rows
    small = reference.step_attention(c.q, c.k, c.v, c.cu_seqlens, c.step_ids, c.n_steps, c.scale)[2]
    torch.testing.assert_close(small, full, rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("T,d,V", [(47, 64, 1237), (123, 96, 20011)])  # V spans several vocabulary tiles
def test_token_nll_matches_dense_oracle(T, d, V, dtype):
    seed = new_seed()
    hidden, weight, targets = make_nll_case(T, d, V, dtype, seed)
    out = torch.full((T,), float("nan"))
    out[0] = 1e30  # poison with a finite value too
    got = signals.token_nll(hidden, weight, targets, backend="torch", chunk=32, out=out)
    assert got is out and got.dtype == torch.float32
    want = dense_nll(hidden, weight, targets)
    # fp32 output: a tolerance at least the fp32 rounding of values O(10)
    tol = max(TOL[dtype]["nll"], 4e-6)
    torch.testing.assert_close(got.double(), want, rtol=0, atol=tol, equal_nan=True, msg=lambda m: f"{m} seed={seed}")


def test_token_nll_bf16_weight_accumulates_in_fp32():
    seed = new_seed()
    hidden, weight, targets = make_nll_case(64, 64, 9001, torch.bfloat16, seed)
    got = signals.token_nll(hidden, weight, targets, backend="torch", chunk=16)
    torch.testing.assert_close(got.double(), dense_nll(hidden, weight, targets), rtol=0, atol=TOL[torch.bfloat16]["nll"],
                               equal_nan=True, msg=lambda m: f"{m} seed={seed}")


def test_bad_inputs_raise_clear_errors():
    c = make_attn_case([47], 4, 2, 64, torch.float32, new_seed())
    with pytest.raises(ValueError, match="Hq % Hk"):
        signals.step_attention(c.q, c.k[:, :1].expand(-1, 3, -1), c.v[:, :1].expand(-1, 3, -1),
                               c.cu_seqlens, c.step_ids, c.n_steps, c.scale)
    with pytest.raises(ValueError, match="cu_seqlens"):
        signals.step_attention(c.q, c.k, c.v, c.cu_seqlens + 1, c.step_ids, c.n_steps, c.scale)
    with pytest.raises(ValueError, match="n_steps"):
        signals.step_attention(c.q, c.k, c.v, c.cu_seqlens, c.step_ids, c.n_steps - 1, c.scale)
    with pytest.raises(ValueError, match="unknown signals backend"):
        signals.step_attention(c.q, c.k, c.v, c.cu_seqlens, c.step_ids, c.n_steps, c.scale, backend="cuda")
    h, w, t = make_nll_case(8, 16, 50, torch.float32, new_seed())
    t[3] = 50
    with pytest.raises(ValueError, match="outside"):
        signals.token_nll(h, w, t, backend="torch")


def test_backend_resolution(monkeypatch):
    assert signals.resolve_backend("auto", "cpu") == ("cpp" if signals.cpp_available() is None else "torch")
    assert signals.resolve_backend("torch", "cpu") == "torch"
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(RuntimeError, match="triton"):  # explicit backend never silently falls back
        signals.resolve_backend("triton", "cpu")


@pytest.mark.parametrize("lengths,hq,hk,d,pattern", SHAPES[:2] + [([47, 123, 5, 1], 8, 2, 64, "ragged")])
@pytest.mark.parametrize("backend", ["torch", "auto"])
def test_step_attention_per_head_matches_oracle(lengths, hq, hk, d, pattern, backend):
    """per_head=True: mass per query head (GQA, ragged packs); its head mean is the default mass."""
    from signals_oracle import dense_step_mass_per_head

    c = make_attn_case(lengths, hq, hk, d, torch.float32, new_seed(), pattern)
    n_max = int(c.n_steps.max())
    out = poisoned_attn_out(c)
    out = (out[0], out[1], torch.full((len(lengths), hq, n_max, n_max), float("nan")))
    got = signals.step_attention(c.q, c.k, c.v, c.cu_seqlens, c.step_ids, c.n_steps, c.scale,
                                 backend=backend, block=32, out=out, per_head=True)
    want = dense_step_mass_per_head(c)
    rows = want.sum(-1, keepdim=True).clamp_min(1.0)
    assert got[2].shape == want.shape
    assert not torch.isnan(got[2]).any(), f"unwritten per-head mass ({c.desc})"
    torch.testing.assert_close(got[2].double() / rows, want / rows, rtol=0, atol=TOL[torch.float32]["mass"])
    mean = signals.step_attention(c.q, c.k, c.v, c.cu_seqlens, c.step_ids, c.n_steps, c.scale, backend="torch")[2]
    torch.testing.assert_close(got[2].mean(1), mean, rtol=0, atol=1e-5 * float(rows.max()))

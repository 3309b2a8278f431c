"""Triton kernel cases, run by test_triton.py in a fresh interpreter with TRITON_INTERPRET=1 on CPU
(TRITON_INTERPRET must be set before triton is first imported, and torch/transformers import triton
early), or compiled on a CUDA machine. fp32 only on CPU (bf16 is not exact in the interpreter), small
shapes so the suite stays within CI time. Not collected by the main run (file name is not test_*.py).
"""

from __future__ import annotations

import os

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

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(scope="module")
def kernels():
    if DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.fail("run through test_triton.py (needs TRITON_INTERPRET=1 before triton is imported)")
    import masprism_batch.kernels.nll as nll_mod
    import masprism_batch.kernels.step_attention as attn_mod

    return attn_mod, nll_mod


CASES = [  # (lengths, Hq, Hk, D, pattern) - every GQA ratio, both head dims, odd lengths
    ([47], 2, 2, 64, "ragged"),
    ([123, 47, 1], 4, 2, 64, "ones"),
    ([123], 4, 1, 128, "giant"),
    ([47, 9], 8, 1, 64, "ragged"),
]


@pytest.mark.parametrize("lengths,hq,hk,d,pattern", CASES)
def test_triton_step_attention_matches_oracle(kernels, lengths, hq, hk, d, pattern):
    c = make_attn_case(lengths, hq, hk, d, torch.float32, new_seed(), pattern, device=DEVICE)
    out = poisoned_attn_out(c)
    got = signals.step_attention(c.q, c.k, c.v, c.cu_seqlens, c.step_ids, c.n_steps, c.scale,
                                 backend="triton", out=out)
    assert all(g is p for g, p in zip(got, out, strict=True))
    check_attention(c, got, TOL[torch.float32])


def test_triton_long_odd_sequence(kernels):
    """T = 1023 with several query blocks per sequence; one head pair keeps the interpreter quick."""
    c = make_attn_case([1023], 2, 1, 64, torch.float32, new_seed(), "ragged", device=DEVICE)
    got = kernels[0].step_attention(c.q, c.k, c.v, c.cu_seqlens, c.step_ids, c.n_steps, c.scale)
    check_attention(c, got, TOL[torch.float32])


def test_triton_mass_is_deterministic(kernels):
    c = make_attn_case([123, 47], 4, 2, 64, torch.float32, new_seed(), "ragged", device=DEVICE)
    a = kernels[0].step_attention(c.q, c.k, c.v, c.cu_seqlens, c.step_ids, c.n_steps, c.scale)[2]
    b = kernels[0].step_attention(c.q, c.k, c.v, c.cu_seqlens, c.step_ids, c.n_steps, c.scale)[2]
    assert torch.equal(a, b), "deterministic ownership: two runs must be bit-identical"


@pytest.mark.parametrize("T,d,V,n_split", [(47, 64, 1237, None), (123, 96, 2053, 3)])
def test_triton_token_nll_matches_oracle(kernels, T, d, V, n_split):
    seed = new_seed()
    hidden, weight, targets = make_nll_case(T, d, V, torch.float32, seed, device=DEVICE)
    out = torch.full((T,), float("nan"), device=DEVICE)
    got = kernels[1].token_nll(hidden, weight, targets, out=out, n_split=n_split)
    assert got is out
    torch.testing.assert_close(got.cpu().double(), dense_nll(hidden, weight, targets), rtol=0,
                               atol=TOL[torch.float32]["nll"], equal_nan=True, msg=lambda m: f"{m} seed={seed}")

"""Plain (non-instrumented) layers' attention: the one-call padded SDPA path the GPU takes without flash-attn
must equal per-sequence SDPA and the fp64 oracle (run here on CPU tensors; fresh random inputs, ragged packs,
GQA, odd lengths)."""

from __future__ import annotations

import pytest
import torch

from masprism_batch.model import attention

pytestmark = pytest.mark.kernel  # the kernels' tests (Triton interpreter, AOT compile, GPU runbook): -m 'not kernel' skips


def _oracle(q, k, v, bounds, scale):
    q, k, v = (x.double() for x in (q, k, v))
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    o = torch.zeros_like(q)
    for s, e in zip(bounds[:-1], bounds[1:], strict=True):
        sc = torch.einsum("thd,uhd->htu", q[s:e], k[s:e]) * scale
        sc.masked_fill_(torch.ones(e - s, e - s, dtype=torch.bool).triu(1), float("-inf"))
        o[s:e] = torch.einsum("htu,uhd->thd", sc.softmax(-1), v[s:e])
    return o


@pytest.mark.parametrize("lengths,hq,hk,d", [([47, 123, 1], 4, 2, 64), ([123, 123], 9, 3, 64),
                                             ([47, 9, 31], 16, 8, 128), ([1023, 47], 2, 1, 16)])
def test_padded_sdpa_matches_per_sequence_and_oracle(lengths, hq, hk, d, seed):
    g = torch.Generator().manual_seed(seed)
    T = sum(lengths)
    q, k, v = (torch.randn(T, h, d, generator=g) * s for h, s in ((hq, 2.0), (hk, 1.0), (hk, 1.0)))
    bounds = [0, *torch.tensor(lengths).cumsum(0).tolist()]
    cu = torch.tensor(bounds, dtype=torch.int32)
    scale = d ** -0.5
    got = attention.sdpa_padded(q, k, v, cu, len(lengths), max(lengths), scale)
    assert got.shape == q.shape and got.is_contiguous() and not bool(got.isnan().any())
    loop = attention.sdpa_per_sequence(q, k, v, bounds, scale)
    want = _oracle(q, k, v, bounds, scale)
    torch.testing.assert_close(got.double(), want, rtol=2e-5, atol=2e-5, msg=lambda m: f"{m} seed={seed}")
    torch.testing.assert_close(loop.double(), want, rtol=2e-5, atol=2e-5, msg=lambda m: f"{m} seed={seed}")


def test_causal_attention_picks_padded_path_off_cpu_only_when_padding_is_cheap(monkeypatch):
    calls = []
    monkeypatch.setattr(attention, "_triton_varlen", lambda q: None)  # (no Triton kernel for this device)
    monkeypatch.setattr(attention, "sdpa_padded", lambda *a: calls.append("padded") or a[0])
    monkeypatch.setattr(attention, "sdpa_per_sequence", lambda *a: calls.append("loop") or a[0])

    class FakeDev:
        type = "cuda"

    class Q:
        device = FakeDev()
        dtype = torch.float32
        shape = (300, 4, 64)

    q = Q()
    attention.causal_attention(q, q, q, None, [0, 100, 200, 300], 100, 0.1)  # B*Lmax = T
    attention.causal_attention(q, q, q, None, [0, 290, 295, 300], 290, 0.1)  # B*Lmax = 2.9 T
    attention.causal_attention(torch.zeros(3, 1, 8), None, None, None, [0, 1, 2, 3], 1, 0.1)  # CPU
    assert calls == ["padded", "loop", "loop"]


def test_cuda_pack_takes_the_triton_varlen_forward_when_it_applies(monkeypatch):
    """On CUDA without flash-attn a pack (of one sequence too) goes to the Triton varlen forward (no padded
    scatter/gather, issue 33 item 4) when the kernels take its head dim and dtype; MASPRISM_NO_TRITON_ATTN=1
    and unsupported head dims keep SDPA. (The kernel's numerics: tests/signals/test_step_attention.py.)"""
    pytest.importorskip("triton")

    class FakeDev:
        type = "cuda"

    class Q:
        device = FakeDev()
        dtype = torch.bfloat16

        def __init__(self, d):
            self.shape = (300, 4, d)

    got = attention._triton_varlen(Q(128))
    from masprism_batch.kernels import step_attention

    assert got is step_attention.attention_lse
    assert attention._triton_varlen(Q(16)) is None  # tiny-random's head dim: SDPA
    monkeypatch.setenv("MASPRISM_NO_TRITON_ATTN", "1")
    assert attention._triton_varlen(Q(128)) is None
    monkeypatch.delenv("MASPRISM_NO_TRITON_ATTN")
    assert attention._triton_varlen(torch.zeros(3, 4, 128)) is None  # CPU tensors never
    calls = []
    monkeypatch.setattr(attention, "_triton_varlen", lambda q: lambda *a: (calls.append("triton") or a[0], None))
    monkeypatch.setattr(attention, "sdpa_padded", lambda *a: calls.append("padded") or a[0])
    attention.causal_attention(Q(128), None, None, None, [0, 100, 200, 300], 100, 0.1)
    attention.causal_attention(Q(128), None, None, None, [0, 300], 300, 0.1)  # one sequence: no K/V repeat either
    assert calls == ["triton", "triton"]

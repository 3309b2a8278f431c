"""Fused elementwise Triton kernels (kernels/elementwise.py) vs the torch ops of model/layers.py and an fp64
oracle. Run by test_elementwise.py in a fresh interpreter with TRITON_INTERPRET=1 on CPU (must be set before
triton is imported), or compiled on a CUDA machine. Not collected by the main run (not test_*.py).

Tolerances, paired with the dtype: fp32 against the fp64 oracle at 2e-6 relative (one fp32 reduction over
<= 1,024 squares, a rsqrt and a 2-term rotation: a few ulps of 6e-8); fp16 (bf16 on a GPU) against the torch
ops in the same dtype at 2 units in the last place of the output's magnitude: both round the norm to the
dtype before the weight multiply, the fused RoPE rounds once where torch rounds after each of its two ops.
"""

from __future__ import annotations

import os

import pytest
import torch

from masprism_batch.model import layers

pytestmark = pytest.mark.kernel  # the kernels' tests (Triton interpreter, AOT compile, GPU runbook): -m 'not kernel' skips

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if DEVICE == "cuda" else [])
ULP = {torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7}


@pytest.fixture(scope="module")
def ew():
    if DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.fail("run through test_elementwise.py (needs TRITON_INTERPRET=1 before triton is imported)")
    from masprism_batch.kernels import elementwise

    return elementwise


def _close(got, want64, ref_same_dtype, dtype, what):
    got = got.detach().cpu().double()
    assert not bool(torch.isnan(got).any()), f"{what}: nan"
    if dtype == torch.float32:
        torch.testing.assert_close(got, want64, rtol=2e-6, atol=2e-6 * float(want64.abs().max()), msg=lambda m: f"{what}: {m}")
    else:
        atol = 2 * ULP[dtype] * float(want64.abs().max())
        torch.testing.assert_close(got, ref_same_dtype.detach().cpu().double(), rtol=0, atol=atol, msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,n", [(123, 1024), (47, 576), (1, 47)])
def test_rms_norm(ew, dtype, rows, n, seed):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, n, generator=g, dtype=torch.float64) * 3).to(dtype).to(DEVICE)
    w = (1 + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)).to(dtype).to(DEVICE)
    eps = 1e-6
    got = ew.rms_norm(x, w, eps)
    x64, w64 = x.cpu().double(), w.cpu().double()
    want = x64 * torch.rsqrt(x64.square().mean(-1, keepdim=True) + eps) * w64
    ref = layers.rms_norm(x.cpu(), w.cpu(), eps)  # the torch path (CPU)
    assert got.shape == x.shape and got.dtype == dtype
    _close(got, want, ref, dtype, f"rms_norm seed={seed} {dtype} {rows}x{n}")


def _rope64(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2, c, s = x[..., :half], x[..., half:], cos[:, None, :], sin[:, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("T,hq,hk,d,norm", [(123, 16, 8, 128, True), (47, 9, 3, 64, False), (23, 4, 2, 16, True)])
def test_qk_norm_rope(ew, dtype, T, hq, hk, d, norm, seed):
    g = torch.Generator().manual_seed(seed)
    hn = hq + hk
    # the strided q/k part of a qkv GEMM output [T, (hq + 2 hk) d], as qkv_proj passes it
    qkv = (torch.randn(T, (hq + 2 * hk) * d, generator=g, dtype=torch.float64) * 2).to(dtype).to(DEVICE)
    qk = qkv[:, : hn * d].view(T, hn, d)
    w = (1 + 0.1 * torch.randn(hn, d, generator=g, dtype=torch.float64)).to(dtype).to(DEVICE) if norm else None
    pos = torch.cat([torch.arange(T // 2), torch.arange(T - T // 2)])  # two sequences of the pack
    inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    freqs = pos[:, None].double() * inv_freq[None, :]
    cos, sin = freqs.cos().to(dtype).to(DEVICE), freqs.sin().to(dtype).to(DEVICE)
    eps = 1e-6
    got = ew.qk_norm_rope(qk, w, eps, cos, sin)
    x64 = qk.cpu().double()
    if norm:
        x64 = x64 * torch.rsqrt(x64.square().mean(-1, keepdim=True) + eps) * w.cpu().double()
    want = _rope64(x64, cos.cpu().double(), sin.cpu().double())
    ref = qk.cpu()
    if norm:
        ref = layers.rms_norm(ref, w.cpu(), eps)
    ref = layers.apply_rope(ref, cos.cpu(), sin.cpu())
    assert got.shape == (T, hn, d) and got.is_contiguous()
    _close(got, want, ref, dtype, f"qk_norm_rope seed={seed} {dtype} T={T} heads={hn} d={d} norm={norm}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("T,inter", [(47, 3072), (123, 1536), (1, 37)])
def test_silu_mul(ew, dtype, T, inter, seed):
    g = torch.Generator().manual_seed(seed)
    gu = (torch.randn(T, 2 * inter, generator=g, dtype=torch.float64) * 3).to(dtype).to(DEVICE)
    got = ew.silu_mul(gu)
    g64, u64 = gu.cpu().double().chunk(2, dim=-1)
    want = torch.nn.functional.silu(g64) * u64
    gate, up = gu.cpu().chunk(2, dim=-1)
    ref = torch.nn.functional.silu(gate).mul_(up)  # the torch path of layers.mlp
    assert got.shape == (T, inter)
    _close(got, want, ref, dtype, f"silu_mul seed={seed} {dtype} T={T} I={inter}")


@pytest.mark.parametrize("family", ["qwen3", "llama"])
def test_forward_with_fused_chain_matches_torch_chain(ew, family, monkeypatch, seed):
    """The wiring in layers.py: a whole packed prefill (q/k norms + RoPE for Qwen3, biases for Llama) with the
    fused kernels (RMSNorm, q/k norm + RoPE, SiLU * up) forced on equals the torch-op forward (fp32, so to fp32
    rounding)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "model"))
    from model_helpers import hf_config, ours_from_hf, random_hf_model

    # the model on the kernels' device: on a CUDA machine a CPU model would hand CPU tensors to compiled kernels
    ours = ours_from_hf(random_hf_model(hf_config(family, tied=True), seed), device=DEVICE)
    g = torch.Generator().manual_seed(seed)
    seqs = [torch.randint(0, 97, (n,), generator=g).tolist() for n in (47, 23, 1)]
    monkeypatch.setattr(layers, "_fused", lambda x, head_dim=None: None)  # the torch-op chain (CUDA fuses by default)
    plain = ours.prefill(seqs).clone()
    used = []

    def forced(x, head_dim=None):
        used.append(head_dim)
        return ew if ew.supports(x, head_dim) else None

    monkeypatch.setattr(layers, "_fused", forced)
    fused = ours.prefill(seqs)
    assert None in used and any(h is not None for h in used), "both fused kernels must have been taken"
    torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-5, msg=lambda m: f"{family} seed={seed}: {m}")

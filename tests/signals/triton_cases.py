"""Triton kernel cases, run by test_triton.py in a fresh interpreter with TRITON_INTERPRET=1 on CPU
(TRITON_INTERPRET must be set before triton is first imported, and torch/transformers import triton
early), or compiled on a CUDA machine. fp32 and fp16 on CPU (bf16 is not exact in the interpreter; it is
compile-checked only, tests/kernels/test_aot_compile.py), small shapes so the suite stays within CI time. Not collected by the main run (file name is not test_*.py).
"""

from __future__ import annotations

import os

import pytest
import torch
from signals_oracle import (
    TOL,
    assert_close,
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


def test_triton_noncontiguous_steps_take_the_ordered_rmw(kernels):
    """Step ids that come back after another step (allowed by the API, never produced by render): the
    kernel's read-modify-write path for a step it already stored must still give the oracle's mass."""
    c = make_attn_case([123, 47], 4, 2, 64, torch.float32, new_seed(), "ragged", device=DEVICE)
    g = torch.Generator().manual_seed(abs(hash(c.desc)) % 2**31)
    sid = c.step_ids.cpu().clone()
    for b, (s, e) in enumerate(zip(c.cu_seqlens.tolist()[:-1], c.cu_seqlens.tolist()[1:], strict=True)):
        n = int(c.n_steps[b])
        if n:  # every token a random step (some -1): steps interleave within and across key tiles
            sid[s:e] = torch.randint(-1, n, (e - s,), generator=g, dtype=torch.int32)
    c.step_ids = sid.to(DEVICE)
    c.desc += " noncontiguous"
    check_attention(c, kernels[0].step_attention(c.q, c.k, c.v, c.cu_seqlens, c.step_ids, c.n_steps, c.scale),
                    TOL[torch.float32])


@pytest.mark.parametrize("lengths,hq,hk,d", [([123, 47, 1], 4, 2, 64), ([47, 9], 6, 2, 128)])
def test_triton_per_head_mass_matches_oracle(kernels, lengths, hq, hk, d):
    """per_head=True through the dispatcher: [B, Hq, N, N], each head's sum (no mean), one head per program."""
    from signals_oracle import dense_step_mass_per_head

    c = make_attn_case(lengths, hq, hk, d, torch.float32, new_seed(), "ragged", device=DEVICE)
    out = poisoned_attn_out(c)
    out = (out[0], out[1], torch.full((c.n_steps.numel(), hq, out[2].shape[1], out[2].shape[2]), float("nan"),
                                      device=DEVICE))
    got = signals.step_attention(c.q, c.k, c.v, c.cu_seqlens, c.step_ids, c.n_steps, c.scale, backend="triton",
                                 out=out, per_head=True)
    assert got[2] is out[2]
    want = dense_step_mass_per_head(c)
    rows = want.sum(-1, keepdim=True).clamp_min(1.0)
    assert_close("mass per head", got[2] / rows, want / rows, TOL[torch.float32]["mass"], c.desc)
    # the torch reference backend's per_head mass (the one the other backends route to)
    ref = signals.step_attention(c.q, c.k, c.v, c.cu_seqlens, c.step_ids, c.n_steps, c.scale, backend="torch",
                                 per_head=True)[2]
    assert_close("mass per head vs torch reference", got[2] / rows, ref.cpu().double() / rows,
                 2 * TOL[torch.float32]["mass"], c.desc)
    # its head mean is the default mass
    mean = kernels[0].step_attention(c.q, c.k, c.v, c.cu_seqlens, c.step_ids, c.n_steps, c.scale)[2]
    torch.testing.assert_close(got[2].mean(1), mean, rtol=1e-5, atol=1e-5)


# ---- fp16 (bf16 on a GPU) at Qwen3-0.6B shapes ---------------------------------------------------------------------------
# Tolerance rule (flash-attention's): the kernel's error against the fp64 oracle (computed on the same
# fp16-rounded inputs) must be at most 2x the error of a plain PyTorch implementation run in fp16 on those
# inputs, plus a floor of one fp16 rounding of the output (2^-11 relative) for the cases where plain fp16
# happens to be exact. The kernels accumulate in fp32, so they should sit far below the bound; a wrong mask,
# scale or accumulation dtype does not. bf16 is NOT checked numerically here: the interpreter's bf16 dot is
# wrong (triton-lang/triton#11584); bf16 is covered by the AOT compile test only, and by gpu_smoke.sh on a GPU.
QWEN3 = dict(hq=16, hk=8, d=128, hidden=1024, vocab=151_936)
# unit roundoff of the output dtype: the floor of the bound. bf16 runs only on a GPU (gpu_smoke.sh).
EPS = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}
LOW_DTYPES = [torch.float16] + ([torch.bfloat16] if DEVICE == "cuda" else [])


def _plain_lowp_attention(c):
    """Eager attention in the inputs' 16-bit dtype: scores, softmax, P@V, LSE and mass all in that dtype."""
    q, k, v = c.q.cpu(), c.k.cpu(), c.v.cpu()
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    bounds, n_steps = c.cu_seqlens.tolist(), c.n_steps.tolist()
    o = torch.zeros_like(q)
    lse = torch.zeros(q.shape[1], q.shape[0], dtype=q.dtype)
    mass = torch.zeros(len(n_steps), max(n_steps), max(n_steps), dtype=q.dtype)
    for b, (s, e) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        scores = torch.einsum("thd,uhd->htu", q[s:e], k[s:e]) * torch.tensor(c.scale, dtype=q.dtype)
        scores.masked_fill_(torch.ones(e - s, e - s, dtype=torch.bool).triu(1), float("-inf"))
        lse[:, s:e] = torch.logsumexp(scores, -1)
        p = torch.softmax(scores, -1)
        o[s:e] = torch.einsum("htu,uhd->thd", p, v[s:e])
        n = n_steps[b]
        sid = c.step_ids[s:e].cpu().long()
        onehot = torch.zeros(e - s, n, dtype=q.dtype)
        keep = sid >= 0
        onehot[keep.nonzero()[:, 0], sid[keep]] = 1.0
        mass[b, :n, :n] = onehot.T @ p.mean(0) @ onehot
    return o, lse, mass


def _err(got, want, rows=None):
    got, want = got.detach().cpu().double(), want.double()
    if rows is not None:
        got, want = got / rows, want / rows
    return float((got - want).abs().max())


@pytest.mark.parametrize("dtype", LOW_DTYPES)
def test_triton_16bit_qwen3_shapes_within_2x_plain(kernels, dtype):
    from signals_oracle import dense_step_attention

    # 200 tokens = two 128-row query blocks, the second with unmasked key tiles; ragged pack with a 1-token sequence
    c = make_attn_case([200, 47, 1], QWEN3["hq"], QWEN3["hk"], QWEN3["d"], dtype, new_seed(),
                       "ragged", device=DEVICE)
    out = poisoned_attn_out(c)
    got = signals.step_attention(c.q, c.k, c.v, c.cu_seqlens, c.step_ids, c.n_steps, c.scale, backend="triton",
                                 out=out)
    o64, lse64, mass64 = dense_step_attention(c)
    plain = _plain_lowp_attention(c)
    rows = mass64.sum(-1, keepdim=True).clamp_min(1.0)
    for name, g, p, want, r, scale in (("o", got[0], plain[0], o64, None, float(o64.abs().max())),
                                       ("lse", got[1], plain[1], lse64, None, float(lse64.abs().max())),
                                       ("mass", got[2], plain[2], mass64, rows, 1.0)):
        assert not bool(torch.isnan(g).any()), f"{name}: nan left in the output ({c.desc})"
        e_kernel, e_plain = _err(g, want, r), _err(p, want, r)
        bound = 2 * e_plain + EPS[dtype] * scale
        assert e_kernel <= bound, f"{name}: err {e_kernel:.3e} > 2 x plain {dtype} {e_plain:.3e} + floor ({c.desc})"


@pytest.mark.parametrize("dtype", LOW_DTYPES)
def test_triton_16bit_nll_qwen3_vocab(kernels, dtype):
    """Qwen3-0.6B's vocabulary V = 151,936 (1,187 online-LSE rescales per token at BLOCK_V = 128) at a reduced
    T = 37 and a reduced hidden size d = 200 (odd against every BLOCK_D: the masked tail). The interpreter
    gathers every loaded element with numpy: Qwen3's d = 1,024 costs ~100 s here, d = 200 a few seconds; the
    dot length changes only the fp32-accumulated logit rounding, not the LSE path this case is for. On the
    interpreter the tiles are wider than the GPU config (same code, fewer interpreted loop trips); the GPU tile
    sizes themselves are compile-checked by tests/kernels/test_aot_compile.py."""
    seed = new_seed()
    T, d = 37, 200 if DEVICE == "cpu" else QWEN3["hidden"]
    hidden, weight, targets = make_nll_case(T, d, QWEN3["vocab"], dtype, seed, device=DEVICE)
    weight = weight / 4  # logits of O(5), as an LM head gives; the oracle sees the same fp16 values
    out = torch.full((T,), float("nan"), device=DEVICE)
    cfg = dict(BLOCK_T=64, BLOCK_V=1024, BLOCK_D=256) if DEVICE == "cpu" else None
    got = kernels[1].token_nll(hidden, weight, targets, out=out, config=cfg)
    assert got is out
    want = dense_nll(hidden, weight, targets)
    logits16 = hidden.cpu() @ weight.cpu().T  # plain 16-bit: logits, logsumexp and the pick in that dtype
    t = targets.cpu().long()
    plain = torch.logsumexp(logits16, -1) - logits16.gather(1, t.clamp_min(0)[:, None])[:, 0]
    plain = torch.where(t == -100, torch.full_like(plain, float("nan")), plain)
    ok = ~torch.isnan(want)
    assert torch.equal(torch.isnan(got.cpu()), ~ok), f"nan pattern differs (seed={seed})"
    e_kernel, e_plain = _err(got[ok], want[ok]), _err(plain[ok], want[ok])
    bound = 2 * e_plain + EPS[dtype] * float(want[ok].abs().max())
    assert e_kernel <= bound, f"nll: err {e_kernel:.3e} > 2 x plain {dtype} {e_plain:.3e} + floor (seed={seed})"

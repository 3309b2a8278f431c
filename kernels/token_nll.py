"""Triton: fused LM head + cross-entropy -> per-token NLL (fp32), never forming T x V logits.
The launcher below is the raw kernel; masprism_batch.signals.triton registers it as the torch op
torch.ops.masprism_triton.token_nll (with a fake kernel), the one the dispatcher calls.

A program owns BLOCK_T tokens and one contiguous slice of the vocabulary; it streams BLOCK_V-wide
vocabulary tiles (logit tile = h @ W_tile^T accumulated over BLOCK_D slices of the hidden size in fp32)
and keeps an online log-sum-exp (running max m, running sum s) plus the target's logit when the target
falls in its slice. Splitting the vocabulary across programs keeps the GPU busy when T is small (one
program per token block would leave most SMs idle at T = 1k); the NSPLIT partial (m, s, target) triples
are merged by a few torch reductions in a fixed order, so the result is deterministic (no atomics).
fp32 inputs use IEEE dot products; bf16/fp16 inputs use tensor cores with fp32 accumulation.
Tile sizes, warps and stages per dtype and GPU target come from `token_nll_config`; tests/kernels/test_aot_compile.py
compiles exactly those for sm_80 and sm_90 (shared memory, spills).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


def _capability(device) -> int:
    """Compute capability as 80/90/...; CPU (the interpreter) uses the sm_80 configs."""
    device = torch.device(device)
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return major * 10 + minor
    return 80


def token_nll_config(dtype: torch.dtype, capability: int) -> dict:
    """Shared memory ~ stages x (BLOCK_T + BLOCK_V) x BLOCK_D x itemsize (A100 limit 166,912 B). A vocabulary tile
    does 2 BT BV d FLOPs on (BT + BV) d operands: BT BV / (BT + BV) FLOP per byte in 16-bit, 42.7 at 64 x 128,
    64 at 128 x 128, 85 at 128 x 256. 16-bit, AOT rows (Qwen3-0.6B shapes, 2026-11-28): 128 x 128 x 64 with 8
    warps and 3 stages spills nothing on sm_80 (64 KB smem) nor sm_90 (96 KB, 178 registers); every 128 x 256
    tile spilled on sm_90 (48-112 B at 8 warps; at 16 warps the 128-register cap spilled 72-160 B on both), and
    128 x 128 with 4 warps spilled 136-264 B. fp32 (IEEE dots on CUDA cores) with 64x128x64 tiles spilled 5.9 KB
    on sm_80; 64x64x32 spills nothing on either target."""
    if dtype == torch.float32:
        return dict(BLOCK_T=64, BLOCK_V=64, BLOCK_D=32, num_warps=4, num_stages=2)
    return dict(BLOCK_T=128, BLOCK_V=128, BLOCK_D=64, num_warps=8, num_stages=3)


@triton.jit
def _nll_partial(H, W, TGT, M_OUT, S_OUT, P_OUT, T, V, d, v_per_split,
                 sh_t, sw_v, IGNORE: tl.constexpr,
                 BLOCK_T: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_D: tl.constexpr, PREC: tl.constexpr):
    pid_t = tl.program_id(0)
    split = tl.program_id(1)
    offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    t_ok = offs_t < T
    tgt = tl.load(TGT + offs_t, mask=t_ok, other=IGNORE).to(tl.int32)
    v_lo = split * v_per_split
    v_hi = tl.minimum(v_lo + v_per_split, V)
    m = tl.full([BLOCK_T], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK_T], tl.float32)
    picked = tl.zeros([BLOCK_T], tl.float32)
    for v0 in range(v_lo, v_hi, BLOCK_V):
        offs_v = v0 + tl.arange(0, BLOCK_V)
        v_ok = offs_v < v_hi
        logits = tl.zeros([BLOCK_T, BLOCK_V], tl.float32)
        for d0 in range(0, d, BLOCK_D):
            offs_d = d0 + tl.arange(0, BLOCK_D)
            d_ok = offs_d < d
            h = tl.load(H + offs_t[:, None] * sh_t + offs_d[None, :], mask=t_ok[:, None] & d_ok[None, :], other=0.0)
            w = tl.load(W + offs_v[:, None] * sw_v + offs_d[None, :], mask=v_ok[:, None] & d_ok[None, :], other=0.0)
            logits += tl.dot(h, tl.trans(w), input_precision=PREC)
        logits = tl.where(v_ok[None, :], logits, float("-inf"))
        m_new = tl.maximum(m, tl.max(logits, 1))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(logits - m_new[:, None]), 1)
        m = m_new
        picked += tl.sum(tl.where(offs_v[None, :] == tgt[:, None], logits, 0.0), 1)
    tl.store(M_OUT + split * T + offs_t, m, mask=t_ok)
    tl.store(S_OUT + split * T + offs_t, s, mask=t_ok)
    # nan for an ignored target: the merge's lse - sum(picked) is then nan there, with no masking op after it
    tl.store(P_OUT + split * T + offs_t, tl.where(tgt == IGNORE, float("nan"), picked), mask=t_ok)


def token_nll(hidden, weight, targets, *, ignore_index: int = -100, out=None, n_split: int | None = None,
              config: dict | None = None):
    """nll [T] fp32: logsumexp(hidden @ weight.T) - logit[target]; nan where target == ignore_index."""
    T, d = hidden.shape
    V = weight.shape[0]
    hidden = hidden if hidden.stride(1) == 1 else hidden.contiguous()
    weight = weight if weight.stride(1) == 1 else weight.contiguous()
    if out is None:
        out = torch.empty(T, dtype=torch.float32, device=hidden.device)
    if T == 0:
        return out
    cfg = dict(config or token_nll_config(hidden.dtype, _capability(hidden.device)))
    block_t, block_v, block_d = cfg.pop("BLOCK_T"), cfg.pop("BLOCK_V"), cfg.pop("BLOCK_D")
    n_tblocks = triton.cdiv(T, block_t)
    if n_split is None:  # aim for >= ~4 programs per SM-ish; 1 on the interpreter's small shapes
        n_split = max(1, min(triton.cdiv(V, 8 * block_v), triton.cdiv(512, n_tblocks)))
    v_per_split = triton.cdiv(triton.cdiv(V, n_split), block_v) * block_v
    n_split = triton.cdiv(V, v_per_split)
    part = torch.empty(3, n_split, T, dtype=torch.float32, device=hidden.device)
    tgt = targets if targets.device == hidden.device and targets.stride(0) == 1 else targets.to(hidden.device).contiguous()
    _nll_partial[(n_tblocks, n_split)](
        hidden, weight, tgt, part[0], part[1], part[2], T, V, d, v_per_split,
        hidden.stride(0), weight.stride(0), IGNORE=ignore_index,
        BLOCK_T=block_t, BLOCK_V=block_v, BLOCK_D=block_d,
        PREC="ieee" if hidden.dtype == torch.float32 else "tf32", **cfg)
    m, s, picked = part[0], part[1], part[2]
    m_all = m.amax(dim=0)
    lse = m_all + torch.log((s * torch.exp(m - m_all)).sum(dim=0))
    return torch.sub(lse, picked.sum(dim=0), out=out)  # nan where the target is ignored (the kernel's picked)

"""Triton: causal varlen GQA prefill attention (O + row LSE) and the head-averaged step mass.

Design decisions
- Two passes, not one. Pass 1 is a plain flash-attention forward (online softmax) that returns O and the
  row LSE, so the same kernel serves the model's forward on the instrumented layers. Pass 2 recomputes
  QK^T once with the final LSE known, so p = exp(s - lse) is the exact probability and can be summed over
  heads in registers before it is reduced per key step. A single pass would have to keep per-head,
  per-step partial sums and rescale all of them every time a row maximum moves (H x N accumulators per
  row instead of N, rescaled per key tile); pass 2 costs only QK^T (half the forward's FLOPs, no PV)
  and no extra memory beyond the [T, Nmax] row-mass buffer.
- Deterministic ownership, no atomics. A program of pass 2 owns a block of query rows and loops over all
  heads and key tiles itself, so it is the only writer of its rows of R[t, j] = sum_{u in step j}
  mean_h p_h(t, u); the per-(query step) sum of R is then a fixed-order one-hot matmul on the host. The
  result is bit-identical from run to run (atomics would make fp32 sums order-dependent).
- fp32 accumulation everywhere (scores, softmax statistics, O accumulator, R). fp32 inputs use IEEE dot
  products (not TF32) so the fp32 path is as accurate as the torch reference; bf16/fp16 use tensor cores.
- The key-step scatter loops over the distinct step ids of a key tile (usually 1-2; at most BLOCK_N with
  1-token steps), which needs no assumption that steps are contiguous.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


@triton.jit
def _attn_fwd(Q, K, V, Out, LSE, CU, BLK_SEQ, BLK_START, qk_scale, T,
              sq_t, sq_h, sk_t, sk_h, sv_t, sv_h, so_t, so_h,
              GROUPS: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              PREC: tl.constexpr):
    pid = tl.program_id(0)
    h = tl.program_id(1)
    seq = tl.load(BLK_SEQ + pid)
    start = tl.load(BLK_START + pid)
    s0 = tl.load(CU + seq)
    L = tl.load(CU + seq + 1) - s0
    hk = h // GROUPS
    offs_m = start + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    row_ok = offs_m < L
    q = tl.load(Q + (s0 + offs_m)[:, None] * sq_t + h * sq_h + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    end = tl.minimum(start + BLOCK_M, L)
    for n0 in range(0, end, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        col_ok = offs_n < L
        k = tl.load(K + (s0 + offs_n)[:, None] * sk_t + hk * sk_h + offs_d[None, :], mask=col_ok[:, None], other=0.0)
        v = tl.load(V + (s0 + offs_n)[:, None] * sv_t + hk * sv_h + offs_d[None, :], mask=col_ok[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PREC) * qk_scale  # log2 domain
        # padded rows (offs_m >= L) still see key 0..L-1, so no row is all -inf (no nan)
        s = tl.where((offs_n[None, :] <= offs_m[:, None]) & col_ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PREC)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(Out + (s0 + offs_m)[:, None] * so_t + h * so_h + offs_d[None, :], out.to(Out.dtype.element_ty),
             mask=row_ok[:, None])
    tl.store(LSE + h * T + s0 + offs_m, (m_i + tl.log2(l_i)) * 0.6931471805599453, mask=row_ok)


@triton.jit
def _step_mass(Q, K, LSE, STEP, CU, BLK_SEQ, BLK_START, R, qk_scale, T, n_r,
               sq_t, sq_h, sk_t, sk_h,
               HK: tl.constexpr, GROUPS: tl.constexpr, D: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PREC: tl.constexpr):
    pid = tl.program_id(0)
    seq = tl.load(BLK_SEQ + pid)
    start = tl.load(BLK_START + pid)
    s0 = tl.load(CU + seq)
    L = tl.load(CU + seq + 1) - s0
    offs_m = start + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    row_ok = offs_m < L
    qstep = tl.load(STEP + s0 + offs_m, mask=row_ok, other=-1)
    # a block with no step token contributes nothing: skip its key loop entirely
    end = tl.where(tl.max(qstep, 0) >= 0, tl.minimum(start + BLOCK_M, L), 0)
    for n0 in range(0, end, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        col_ok = offs_n < L
        keep = (offs_n[None, :] <= offs_m[:, None]) & col_ok[None, :] & row_ok[:, None]
        psum = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        for hk in range(0, HK):
            k = tl.load(K + (s0 + offs_n)[:, None] * sk_t + hk * sk_h + offs_d[None, :],
                        mask=col_ok[:, None], other=0.0)
            for g in range(0, GROUPS):
                h = hk * GROUPS + g
                q = tl.load(Q + (s0 + offs_m)[:, None] * sq_t + h * sq_h + offs_d[None, :],
                            mask=row_ok[:, None], other=0.0)
                lse2 = tl.load(LSE + h * T + s0 + offs_m, mask=row_ok, other=0.0) * 1.4426950408889634
                s = tl.dot(q, tl.trans(k), input_precision=PREC) * qk_scale
                psum += tl.where(keep, tl.exp2(s - lse2[:, None]), 0.0)
        kstep = tl.load(STEP + s0 + offs_n, mask=col_ok, other=-1)
        smin = tl.min(tl.where(kstep >= 0, kstep, 2147483647), 0)
        smax = tl.max(kstep, 0)
        for st in range(smin, smax + 1):
            contrib = tl.sum(tl.where(kstep[None, :] == st, psum, 0.0), 1)
            ptr = R + (s0 + offs_m) * n_r + st
            tl.store(ptr, tl.load(ptr, mask=row_ok, other=0.0) + contrib, mask=row_ok)


def _blocks(cu_list: list[int], block_m: int, device):
    seq, start = [], []
    for b in range(len(cu_list) - 1):
        for a in range(0, cu_list[b + 1] - cu_list[b], block_m):
            seq.append(b)
            start.append(a)
    return (torch.tensor(seq, dtype=torch.int32, device=device),
            torch.tensor(start, dtype=torch.int32, device=device))


def _prec(dtype) -> str:
    return "ieee" if dtype == torch.float32 else "tf32"  # tf32 is ignored for 16-bit inputs


def attention_lse(q, k, v, cu_seqlens, scale: float, block_m: int = 64, block_n: int = 64, out=None):
    """Pass 1: o [T, Hq, D] (dtype of q), lse [Hq, T] fp32."""
    T, Hq, D = q.shape
    if D not in (64, 128) or q.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"triton step_attention supports head_dim 64/128 in fp32/fp16/bf16; got D={D}, {q.dtype}")
    groups = Hq // k.shape[1]
    q, k, v = (x if x.stride(2) == 1 else x.contiguous() for x in (q, k, v))
    o = torch.empty_like(q) if out is None else out[0]
    lse = torch.empty(Hq, T, dtype=torch.float32, device=q.device) if out is None else out[1]
    if o.stride(2) != 1 or lse.stride(1) != 1 or lse.stride(0) != T:
        raise ValueError("out tensors must be contiguous")
    cu = cu_seqlens.to(device=q.device, dtype=torch.int32)
    blk_seq, blk_start = _blocks(cu.tolist(), block_m, q.device)
    if blk_seq.numel():
        _attn_fwd[(blk_seq.numel(), Hq)](
            q, k, v, o, lse, cu, blk_seq, blk_start, scale * LOG2E, T,
            q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), o.stride(0), o.stride(1),
            GROUPS=groups, D=D, BLOCK_M=block_m, BLOCK_N=block_n, PREC=_prec(q.dtype))
    return o, lse


def step_mass(q, k, lse, cu_seqlens, step_ids, n_steps, scale: float, block_m: int = 64, block_n: int = 64,
              out=None):
    """Pass 2: mass [B, Nmax, Nmax] fp32 from the known LSE (row buffer [T, Nmax], then a fixed-order sum)."""
    T, Hq, D = q.shape
    Hk = k.shape[1]
    q, k = (x if x.stride(2) == 1 else x.contiguous() for x in (q, k))
    B = cu_seqlens.numel() - 1
    n_list = n_steps.tolist()
    n_max = max(n_list, default=0)
    mass = torch.zeros(B, n_max, n_max, dtype=torch.float32, device=q.device) if out is None else out.zero_()
    if n_max == 0 or T == 0:
        return mass
    cu = cu_seqlens.to(device=q.device, dtype=torch.int32)
    steps = step_ids.to(device=q.device, dtype=torch.int32).contiguous()
    r = torch.zeros(T, n_max, dtype=torch.float32, device=q.device)
    blk_seq, blk_start = _blocks(cu.tolist(), block_m, q.device)
    _step_mass[(blk_seq.numel(),)](
        q, k, lse, steps, cu, blk_seq, blk_start, r, scale * LOG2E, T, n_max,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1),
        HK=Hk, GROUPS=Hq // Hk, D=D, BLOCK_M=block_m, BLOCK_N=block_n, PREC=_prec(q.dtype))
    bounds = cu.tolist()
    for b in range(B):
        s, e, n = bounds[b], bounds[b + 1], n_list[b]
        if n == 0 or e == s:
            continue
        sid = steps[s:e].long()
        onehot = torch.zeros(n + 1, e - s, dtype=torch.float32, device=q.device)
        onehot[torch.where(sid >= 0, sid, n), torch.arange(e - s, device=q.device)] = 1.0
        mass[b, :n, :n] = (onehot @ r[s:e, :n])[:n] / Hq
    return mass


def step_attention(q, k, v, cu_seqlens, step_ids, n_steps, scale: float, out=None):
    """out: optional preallocated (o, lse, mass), every element of which is overwritten."""
    o, lse = attention_lse(q, k, v, cu_seqlens, scale, out=None if out is None else out[:2])
    return o, lse, step_mass(q, k, lse, cu_seqlens, step_ids, n_steps, scale, out=None if out is None else out[2])

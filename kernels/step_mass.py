"""Triton pass 2 of step_attention: the step mass R[hb, t, j] = sum_{h in head block hb} sum_{u in step j}
p_h(t, u), with p = exp(s - lse) exact because pass 1 already gave the row LSE.

Two kernels, one chosen per pack by the host (`step_mass`):
- `_step_mass_dot` (the normal path). The step mass is attention whose "values" are the
  one-hot matrix of the key steps: a key tile's contribution to its rows is p [HPB*BM, BN] @ onehot [BN, NS],
  where onehot[u, c] = (step(u) == base + c) over a window of NS consecutive step ids (NS a power of 2,
  16..64). A tensor-core dot replaces today's loop over the steps of a tile with one masked reduction each.
  The window [base, base + NS) lives in a register accumulator [HPB*BM, NS], a row per (head, query): the heads
  are summed when the window is flushed, not on every tile (a cross-warp round trip through shared memory and
  a barrier per tile; docs/gpu.md "Issue 45"). When a tile's steps leave the window, the
  window is added into R (read-modify-write of the program's own rows, behind a CTA barrier) and a new one
  opens at the tile's lowest step. Steps are contiguous runs in rendered traces, so a window is flushed once
  per ~NS steps, and any order of step ids stays correct (every flush adds, R starts at zero).
  In 16-bit the probabilities enter the dot as fp16 hi + lo halves (p = hi + lo to ~2^-22 relative): two
  dots with an exact 0/1 right operand, so the mass keeps fp32-level accuracy on tensor cores.
  Only diagonal key tiles are masked (MASK constexpr), as in pass 1.
- `_step_mass` (the fallback, the previous kernel): walks every step of a key tile with a masked reduction.
  The host takes it when some key tile spans more than `STEPS` step ids (many 1-token steps packed
  densely, or interleaved ids), which the dot kernel's window cannot hold.
On-paper cost per tile against the attention forward: docs/gpu.md ("Step mass at forward speed").

Ownership and determinism as in pass 1's module docstring (kernels/step_attention.py): one program owns its
rows of R; the head-block and per-(query step) sums are one fixed-order kernel (kernels/step_plan.py), so
results are bit-identical run to run.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


def mass_config(dtype: torch.dtype, head_dim: int, groups: int, capability: int, per_head: bool) -> dict:
    """HPB query heads of one KV group per program, HPB * BLOCK_M <= 128 rows per dot in 16-bit, 32 in fp32
    (fp32 IEEE dots run on CUDA cores: 64-row tiles spilled 3.8 KB at D=64, 32 rows spill nothing).
    STEPS: the widest step window of the dot kernel; a pack with a key tile spanning more step ids takes the
    loop kernel (0 forces it)."""
    if dtype == torch.float32:
        bm, bn, warps, stages, rows, steps = 32, 32, (8 if head_dim > 64 else 4), 2, 32, 32
    else:
        # a 64-wide window at D = 64 (4 warps) spilled 168-184 B on sm_80/sm_90 (AOT); 32 spills nothing
        bm, bn, warps, stages, rows = 64, 64, (8 if head_dim > 64 else 4), 2, 128
        steps = 64 if warps == 8 else 32
    hpb = 1
    if not per_head:
        while groups % (hpb * 2) == 0 and hpb * 2 * bm <= rows:
            hpb *= 2
    # the window accumulator holds a row per (head, query): HPB * BM x NS fp32. 128 x 64 spilled 8 B on sm_90
    # (AOT, bf16, Qwen3 head mean); 128 x 32 and the per-head 64 x 64 spill nothing
    while dtype != torch.float32 and hpb * bm * steps > 4096:
        steps //= 2
    return dict(BLOCK_M=bm, BLOCK_N=bn, HPB=hpb, STEPS=steps, num_warps=warps, num_stages=stages)


# ---- shared by both kernels ------------------------------------------------------------------------------
@triton.jit
def _program_rows(Q, LSE, STEP, CU, BLK_SEQ, BLK_START, R, T, n_r, sq_t, sq_h, sr_h,
                  GROUPS: tl.constexpr, HPB: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr):
    """This program's query block: its KV head, sequence bounds, key range `[0, end)` (0 when the block holds
    no step token, so its key loop is skipped), the HPB heads' queries stacked along rows (row r = g * BLOCK_M
    + m) with their base-2 LSE, and the R rows it owns."""
    pid = tl.program_id(0)
    hb = tl.program_id(1)  # head block: query heads hb*HPB .. hb*HPB+HPB-1, all in KV group hk
    h0 = hb * HPB
    hk = h0 // GROUPS
    seq = tl.load(BLK_SEQ + pid)
    live = seq >= 0
    start = tl.where(live, tl.load(BLK_START + pid), 0)
    seq = tl.maximum(seq, 0)
    s0 = tl.load(CU + seq)
    L = tl.where(live, tl.load(CU + seq + 1) - s0, 0)
    offs_m = start + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    row_ok = offs_m < L
    offs_r = tl.arange(0, HPB * BLOCK_M)
    r_g = offs_r // BLOCK_M
    r_m = start + offs_r % BLOCK_M
    r_ok = r_m < L
    q = tl.load(Q + (s0 + r_m)[:, None] * sq_t + (h0 + r_g)[:, None] * sq_h + offs_d[None, :],
                mask=r_ok[:, None], other=0.0)
    lse2 = tl.load(LSE + (h0 + r_g) * T + s0 + r_m, mask=r_ok, other=0.0) * 1.4426950408889634
    qstep = tl.load(STEP + s0 + offs_m, mask=row_ok, other=-1)
    end = tl.where(tl.max(qstep, 0) >= 0, tl.minimum(start + BLOCK_M, L), 0)
    R_rows = R + hb * sr_h + (s0 + offs_m) * n_r
    return hk, s0, L, start, end, offs_d, row_ok, r_m, r_ok, q, lse2, R_rows


# ---- the dot kernel --------------------------------------------------------------------------------------
@triton.jit
def _mass_tile(q, K, STEP, s0, n0, L, r_m, offs_d, hk, sk_t, sk_h, lse2, qk_scale,
               HPB: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, MASK: tl.constexpr,
               PREC: tl.constexpr):
    """Probabilities p [HPB * BM, BN] of one key tile (the HPB heads stacked along rows) and its key steps [BN].
    The heads are not summed here: rows of different heads sit in different warps, so a per-tile head sum is a
    round trip through shared memory; they are summed once per window flush instead (`_flush_window`)."""
    offs_n = n0 + tl.arange(0, BLOCK_N)
    if MASK:
        col_ok = offs_n < L
        k = tl.load(K + (s0 + offs_n)[:, None] * sk_t + hk * sk_h + offs_d[None, :], mask=col_ok[:, None],
                    other=0.0)
        kstep = tl.load(STEP + s0 + offs_n, mask=col_ok, other=-1)
    else:
        k = tl.load(K + (s0 + offs_n)[:, None] * sk_t + hk * sk_h + offs_d[None, :])
        kstep = tl.load(STEP + s0 + offs_n)
    s = tl.dot(q, tl.trans(k), input_precision=PREC) * qk_scale  # log2 domain
    p = tl.exp2(s - lse2[:, None])
    if MASK:
        p = tl.where((offs_n[None, :] <= r_m[:, None]) & col_ok[None, :], p, 0.0)
    return p, kstep


@triton.jit
def _flush_window(R_rows, base, acc, row_ok, n_r, HPB: tl.constexpr, BLOCK_M: tl.constexpr, NS: tl.constexpr):
    """Add the window's accumulator [HPB * BM, NS], its heads summed, into R[rows, base:base+NS] (a window that
    was never opened has base < 0). The barrier orders this read after an earlier flush's store of the same
    elements by other threads."""
    if base >= 0:
        cols = base + tl.arange(0, NS)
        ok = row_ok[:, None] & (cols < n_r)[None, :]
        ptr = R_rows[:, None] + cols[None, :]
        tl.debug_barrier()
        tl.store(ptr, tl.load(ptr, mask=ok, other=0.0) + tl.sum(tl.reshape(acc, [HPB, BLOCK_M, NS]), 0), mask=ok)


@triton.jit
def _add_tile(R_rows, row_ok, n_r, psum, kstep, base, acc, HPB: tl.constexpr, BLOCK_M: tl.constexpr,
              NS: tl.constexpr, PREC: tl.constexpr, SPLIT: tl.constexpr):
    """acc += p @ onehot(kstep - base) (p: every head's rows), first moving the window when the tile's steps
    leave it."""
    smax = tl.max(kstep, 0)
    if smax >= 0:  # a tile of only non-step keys (-1) adds nothing
        smin = tl.min(tl.where(kstep >= 0, kstep, 2147483647), 0)
        if (smin < base) | (smax >= base + NS):
            _flush_window(R_rows, base, acc, row_ok, n_r, HPB, BLOCK_M, NS)
            base = smin + tl.zeros([], tl.int32)
            acc = tl.zeros_like(acc)
        hit = (kstep[:, None] - base) == tl.arange(0, NS)[None, :]  # [BN, NS]; -1 keys never hit (base >= 0)
        if SPLIT:  # 16-bit: fp16 hi + lo halves of p on tensor cores, exact 0/1 onehot
            hi = psum.to(tl.float16)
            lo = (psum - hi.to(tl.float32)).to(tl.float16)
            onehot = hit.to(tl.float16)
            acc = tl.dot(hi, onehot, acc)
            acc = tl.dot(lo, onehot, acc)
        else:
            acc = tl.dot(psum, hit.to(tl.float32), acc, input_precision=PREC)
    return base, acc


@triton.jit
def _step_mass_dot(Q, K, LSE, STEP, CU, BLK_SEQ, BLK_START, R, qk_scale, T, n_r,
                   sq_t, sq_h, sk_t, sk_h, sr_h,
                   GROUPS: tl.constexpr, HPB: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr, NS: tl.constexpr, PREC: tl.constexpr, SPLIT: tl.constexpr):
    hk, s0, L, start, end, offs_d, row_ok, r_m, r_ok, q, lse2, R_rows = _program_rows(
        Q, LSE, STEP, CU, BLK_SEQ, BLK_START, R, T, n_r, sq_t, sq_h, sr_h, GROUPS, HPB, D, BLOCK_M)
    full = (tl.minimum(start, end) // BLOCK_N) * BLOCK_N  # key tiles wholly before the first query row
    base = tl.full([], -1073741824, tl.int32)  # no window yet: every first tile opens one
    acc = tl.zeros([HPB * BLOCK_M, NS], tl.float32)  # per head row: heads summed at each flush
    for n0 in range(0, full, BLOCK_N):
        psum, kstep = _mass_tile(q, K, STEP, s0, n0, L, r_m, offs_d, hk, sk_t, sk_h, lse2, qk_scale,
                                 HPB, BLOCK_M, BLOCK_N, False, PREC)
        base, acc = _add_tile(R_rows, row_ok, n_r, psum, kstep, base, acc, HPB, BLOCK_M, NS, PREC, SPLIT)
    for n0 in range(full, end, BLOCK_N):
        psum, kstep = _mass_tile(q, K, STEP, s0, n0, L, r_m, offs_d, hk, sk_t, sk_h, lse2, qk_scale,
                                 HPB, BLOCK_M, BLOCK_N, True, PREC)
        base, acc = _add_tile(R_rows, row_ok, n_r, psum, kstep, base, acc, HPB, BLOCK_M, NS, PREC, SPLIT)
    _flush_window(R_rows, base, acc, row_ok, n_r, HPB, BLOCK_M, NS)


# ---- the loop kernel (fallback) --------------------------------------------------------------------------
@triton.jit
def _flush(R_rows, st, carry, seen, row_ok):
    """Write the finished key step `st` of this program's rows: a plain store the first time the step is
    seen (the common case: every (row, step) is written once), a barrier-ordered read-modify-write when a
    non-contiguous step comes back."""
    if st >= 0:
        if seen:
            tl.debug_barrier()
            tl.store(R_rows + st, tl.load(R_rows + st, mask=row_ok, other=0.0) + carry, mask=row_ok)
        else:
            tl.store(R_rows + st, carry, mask=row_ok)


@triton.jit
def _step_mass(Q, K, LSE, STEP, CU, BLK_SEQ, BLK_START, R, qk_scale, T, n_r,
               sq_t, sq_h, sk_t, sk_h, sr_h,
               GROUPS: tl.constexpr, HPB: tl.constexpr, D: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PREC: tl.constexpr):
    hk, s0, L, start, end, offs_d, row_ok, r_m, r_ok, q, lse2, R_rows = _program_rows(
        Q, LSE, STEP, CU, BLK_SEQ, BLK_START, R, T, n_r, sq_t, sq_h, sr_h, GROUPS, HPB, D, BLOCK_M)
    cur = tl.full([], -1, tl.int32)  # key step being carried, -1 none
    cur_seen = tl.full([], 0, tl.int1)  # whether `cur` was already flushed once (non-contiguous ids)
    hi = tl.full([], -1, tl.int32)  # highest step id met so far
    carry = tl.zeros([BLOCK_M], tl.float32)
    for n0 in range(0, end, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        col_ok = offs_n < L
        k = tl.load(K + (s0 + offs_n)[:, None] * sk_t + hk * sk_h + offs_d[None, :], mask=col_ok[:, None],
                    other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PREC) * qk_scale
        keep = (offs_n[None, :] <= r_m[:, None]) & col_ok[None, :] & r_ok[:, None]
        p = tl.where(keep, tl.exp2(s - lse2[:, None]), 0.0)
        psum = tl.sum(tl.reshape(p, [HPB, BLOCK_M, BLOCK_N]), 0)
        kstep = tl.load(STEP + s0 + offs_n, mask=col_ok, other=-1)
        smin = tl.min(tl.where(kstep >= 0, kstep, 2147483647), 0)
        smax = tl.max(kstep, 0)
        for st in range(smin, smax + 1):
            contrib = tl.sum(tl.where(kstep[None, :] == st, psum, 0.0), 1)
            if st == cur:
                carry += contrib
            else:
                _flush(R_rows, cur, carry, cur_seen, row_ok)
                cur_seen = st <= hi
                hi = tl.maximum(hi, st)
                cur = st + tl.zeros([], tl.int32)
                carry = contrib
    _flush(R_rows, cur, carry, cur_seen, row_ok)

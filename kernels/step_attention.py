"""Triton: causal varlen GQA prefill attention (O + row LSE) and the step mass (head mean or per head).
The launchers below are the raw kernels; masprism_batch.signals.triton registers them as the torch op
torch.ops.masprism_triton.step_attention (with a fake kernel), the one the dispatcher calls.

Design decisions
- Two passes, not one. Pass 1 is a plain flash-attention forward (online softmax) that returns O and the
  row LSE, so the same kernel serves the model's forward on the instrumented layers. Pass 2 recomputes
  QK^T once with the final LSE known, so p = exp(s - lse) is the exact probability and can be summed over
  heads in registers before it is reduced per key step. A single pass would have to keep per-head,
  per-step partial sums and rescale all of them every time a row maximum moves (H x N accumulators per
  row instead of N, rescaled per key tile); pass 2 costs only QK^T (half the forward's FLOPs, no PV).
- Pass 2 runs one program per (query block x head block): a head block is HPB consecutive query heads of
  one KV group, stacked along the rows of a single [HPB * BLOCK_M, D] x [D, BLOCK_N] dot (GQA without
  copying K). At 8k tokens and Qwen3-0.6B shapes that is 128 x 8 = 1,024 programs, not 128.
- Deterministic ownership, no atomics, race-free by construction. A program is the only writer of its
  rows of R[hb, t, j] = sum_{h in head block hb} sum_{u in step j} p_h(t, u). Within the program the
  contribution to the current key step is carried in registers across key tiles and stored ONCE, with a
  plain store, when the step changes (steps are contiguous runs in rendered traces, so every (row, step)
  is written exactly once and R is never read back by the kernel). A step that re-appears after another
  one (non-contiguous ids, allowed by the API) takes a read-modify-write that is preceded by a CTA barrier
  (tl.debug_barrier), so its earlier store is visible to every thread whatever layout the compiler picks.
  The head-block and per-(query step) sums are then fixed-order torch ops: bit-identical run to run.
- fp32 accumulation everywhere (scores, softmax statistics, O accumulator, R). fp32 inputs use IEEE dot
  products (not TF32) so the fp32 path is as accurate as the torch reference; bf16/fp16 use tensor cores.
- Only the diagonal key tiles are masked: tiles strictly below a query block's first row need no causal or
  length mask (one inner function, MASK a constexpr).
- Block sizes, warps and stages are chosen per dtype, head dim and GPU target (`attn_config`,
  `mass_config`); tests/kernels/test_aot_compile.py compiles exactly these for sm_80 and sm_90 and checks
  shared memory and spills, so a config that would fail at launch on an A100 fails CI instead.
- Host syncs: the launch grid is an upper bound computed from shapes (cdiv(T, BLOCK_M) + B programs; the
  spare ones exit at once) and the block table is built on the device, so the kernels need no sync. The
  per-sequence reduction needs the sequence bounds on the host once per (cu_seqlens, step_ids, n_steps):
  a one-slot plan cache keyed by tensor identity (and version counter where the tensor has one) makes
  that one sync per forward instead of several per instrumented layer.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634
SUPPORTED_HEAD_DIMS = (64, 128)
SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def supports(head_dim: int, dtype: torch.dtype) -> str | None:
    """None when these kernels take (head_dim, dtype), else why not (the dispatcher's `auto` falls back)."""
    if head_dim not in SUPPORTED_HEAD_DIMS:
        return f"triton step_attention supports head_dim {SUPPORTED_HEAD_DIMS}; got {head_dim}"
    if dtype not in SUPPORTED_DTYPES:
        return f"triton step_attention supports fp32/fp16/bf16; got {dtype}"
    return None


# ---- configs: (BLOCK_M, BLOCK_N, num_warps, num_stages) per dtype, head dim and target -------------------
# Shared memory of pass 1 ~ Q tile + stages x (K + V tiles): fp32 at D=128 with 64x64 tiles and 3 stages is
# 180,480 B, over the A100's 166,912 B (it also spilled 10 KB of registers with 4 warps). The rows below are
# the ones the AOT test compiles; its table (README "GPU readiness") gives each one's smem, regs and spills.
def _capability(device) -> int:
    """Compute capability as 80/90/...; CPU (the interpreter) uses the sm_80 configs."""
    device = torch.device(device)
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return major * 10 + minor
    return 80


def attn_config(dtype: torch.dtype, head_dim: int, capability: int) -> dict:
    if dtype == torch.float32:
        if head_dim > 64:
            return dict(BLOCK_M=64, BLOCK_N=32, num_warps=8, num_stages=2)
        return dict(BLOCK_M=64, BLOCK_N=32, num_warps=4, num_stages=2)
    # 16-bit: 128-row query tiles need 8 warps (4 warps at D=64 spilled 40 B on sm_80, and the old 64x64
    # 4-warp tile spilled 24 B at D=128); 3 stages of K/V at D=128 take 131,072 B: fine on sm_90; sm_80 keeps
    # 2 stages (65,536 B), leaving the A100's smaller shared memory room for the compiler's layout scratch.
    if head_dim > 64:
        return dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3 if capability >= 90 else 2)
    return dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3)


def mass_config(dtype: torch.dtype, head_dim: int, groups: int, capability: int, per_head: bool) -> dict:
    """HPB query heads of one KV group per program, HPB * BLOCK_M <= 128 rows per dot in 16-bit, 32 in fp32
    (fp32 IEEE dots run on CUDA cores: 64-row tiles spilled 3.8 KB at D=64, 32 rows spill nothing)."""
    if dtype == torch.float32:
        bm, bn, warps, stages, rows = 32, 32, (8 if head_dim > 64 else 4), 2, 32
    else:
        bm, bn, warps, stages, rows = 64, 64, (8 if head_dim > 64 else 4), 2, 128
    hpb = 1
    if not per_head:
        while groups % (hpb * 2) == 0 and hpb * 2 * bm <= rows:
            hpb *= 2
    return dict(BLOCK_M=bm, BLOCK_N=bn, HPB=hpb, num_warps=warps, num_stages=stages)


# ---- pass 1 --------------------------------------------------------------------------------------------
@triton.jit
def _attn_tile(q, K, V, s0, n0, L, offs_m, offs_d, hk, sk_t, sk_h, sv_t, sv_h, qk_scale, m_i, l_i, acc,
               BLOCK_N: tl.constexpr, MASK: tl.constexpr, PREC: tl.constexpr):
    offs_n = n0 + tl.arange(0, BLOCK_N)
    if MASK:
        col_ok = offs_n < L
        k = tl.load(K + (s0 + offs_n)[:, None] * sk_t + hk * sk_h + offs_d[None, :], mask=col_ok[:, None],
                    other=0.0)
        v = tl.load(V + (s0 + offs_n)[:, None] * sv_t + hk * sv_h + offs_d[None, :], mask=col_ok[:, None],
                    other=0.0)
    else:
        k = tl.load(K + (s0 + offs_n)[:, None] * sk_t + hk * sk_h + offs_d[None, :])
        v = tl.load(V + (s0 + offs_n)[:, None] * sv_t + hk * sv_h + offs_d[None, :])
    s = tl.dot(q, tl.trans(k), input_precision=PREC) * qk_scale  # log2 domain
    if MASK:
        # padded rows (offs_m >= L) still see key 0..L-1, so no row is all -inf (no nan)
        s = tl.where((offs_n[None, :] <= offs_m[:, None]) & col_ok[None, :], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    p = tl.exp2(s - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PREC)
    return m_new, l_i, acc


@triton.jit
def _attn_fwd(Q, K, V, Out, LSE, CU, BLK_SEQ, BLK_START, qk_scale, T,
              sq_t, sq_h, sk_t, sk_h, sv_t, sv_h, so_t, so_h,
              GROUPS: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              PREC: tl.constexpr):
    pid = tl.program_id(0)
    h = tl.program_id(1)
    seq = tl.load(BLK_SEQ + pid)
    live = seq >= 0  # the grid is an upper bound: spare programs see an empty sequence and store nothing
    start = tl.where(live, tl.load(BLK_START + pid), 0)
    seq = tl.maximum(seq, 0)
    s0 = tl.load(CU + seq)
    L = tl.where(live, tl.load(CU + seq + 1) - s0, 0)
    hk = h // GROUPS
    offs_m = start + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    row_ok = offs_m < L
    q = tl.load(Q + (s0 + offs_m)[:, None] * sq_t + h * sq_h + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    end = tl.minimum(start + BLOCK_M, L)
    full = (tl.minimum(start, L) // BLOCK_N) * BLOCK_N  # key tiles wholly before the first query row
    for n0 in range(0, full, BLOCK_N):
        m_i, l_i, acc = _attn_tile(q, K, V, s0, n0, L, offs_m, offs_d, hk, sk_t, sk_h, sv_t, sv_h, qk_scale,
                                   m_i, l_i, acc, BLOCK_N, False, PREC)
    for n0 in range(full, end, BLOCK_N):
        m_i, l_i, acc = _attn_tile(q, K, V, s0, n0, L, offs_m, offs_d, hk, sk_t, sk_h, sv_t, sv_h, qk_scale,
                                   m_i, l_i, acc, BLOCK_N, True, PREC)
    out = acc / l_i[:, None]
    tl.store(Out + (s0 + offs_m)[:, None] * so_t + h * so_h + offs_d[None, :], out.to(Out.dtype.element_ty),
             mask=row_ok[:, None])
    tl.store(LSE + h * T + s0 + offs_m, (m_i + tl.log2(l_i)) * 0.6931471805599453, mask=row_ok)


# ---- pass 2 --------------------------------------------------------------------------------------------
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
    # the HPB heads stacked along rows: row r = g * BLOCK_M + m
    offs_r = tl.arange(0, HPB * BLOCK_M)
    r_g = offs_r // BLOCK_M
    r_m = start + offs_r % BLOCK_M
    r_ok = r_m < L
    q = tl.load(Q + (s0 + r_m)[:, None] * sq_t + (h0 + r_g)[:, None] * sq_h + offs_d[None, :],
                mask=r_ok[:, None], other=0.0)
    lse2 = tl.load(LSE + (h0 + r_g) * T + s0 + r_m, mask=r_ok, other=0.0) * 1.4426950408889634
    qstep = tl.load(STEP + s0 + offs_m, mask=row_ok, other=-1)
    # a block with no step token contributes nothing: skip its key loop entirely
    end = tl.where(tl.max(qstep, 0) >= 0, tl.minimum(start + BLOCK_M, L), 0)
    R_rows = R + hb * sr_h + (s0 + offs_m) * n_r
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


# ---- host side -----------------------------------------------------------------------------------------
def _block_table(cu: torch.Tensor, block_m: int, T: int):
    """(blk_seq, blk_start, n_programs) without a host sync: n_programs = cdiv(T, BM) + B >= the real
    number of query blocks sum_b cdiv(L_b, BM); the spare programs get seq = -1."""
    B = cu.numel() - 1
    n_prog = triton.cdiv(T, block_m) + B
    lens = (cu[1:] - cu[:-1]).long()
    nblk = (lens + block_m - 1) // block_m
    ends = torch.cumsum(nblk, 0)
    pid = torch.arange(n_prog, device=cu.device)
    seq = torch.searchsorted(ends, pid, right=True)
    live = seq < B
    seqc = seq.clamp_max(max(B - 1, 0))
    start = (pid - (ends - nblk)[seqc]) * block_m
    return (torch.where(live, seq, -1).to(torch.int32), torch.where(live, start, 0).to(torch.int32), n_prog)


def _prec(dtype) -> str:
    return "ieee" if dtype == torch.float32 else "tf32"  # tf32 is ignored for 16-bit inputs


def _version(t: torch.Tensor):
    try:
        return t._version
    except RuntimeError:  # inference tensors have no version counter
        return None


class _Plan:
    """Host-side view of one pack: sequence bounds, step counts and the per-sequence one-hot matrices
    of query steps. Built with one sync; reused while the same tensors are passed (one forward)."""

    _last: _Plan | None = None

    def __init__(self, cu, step_ids, n_steps, device):
        self.keys = (cu, step_ids, n_steps)
        self.device = device
        self.versions = tuple(_version(t) for t in self.keys)
        self.bounds = cu.tolist()
        self.n_list = [int(n) for n in n_steps.tolist()]
        self.n_max = max(self.n_list, default=0)
        steps = step_ids.to(device=device, dtype=torch.int32).contiguous()
        self.steps = steps
        self.onehots = []
        for b in range(len(self.n_list)):
            s, e, n = self.bounds[b], self.bounds[b + 1], self.n_list[b]
            if n == 0 or e == s:
                self.onehots.append(None)
                continue
            sid = steps[s:e].long()
            onehot = torch.zeros(n + 1, e - s, dtype=torch.float32, device=device)
            onehot[torch.where(sid >= 0, sid, n), torch.arange(e - s, device=device)] = 1.0
            self.onehots.append(onehot)

    def matches(self, cu, step_ids, n_steps, device) -> bool:
        new = (cu, step_ids, n_steps)
        return (self.device == device and all(a is b for a, b in zip(self.keys, new, strict=True))
                and all(v == _version(t) for v, t in zip(self.versions, new, strict=True)))

    @classmethod
    def get(cls, cu, step_ids, n_steps, device) -> _Plan:
        last = cls._last
        if last is not None and last.matches(cu, step_ids, n_steps, device):
            return last
        cls._last = plan = cls(cu, step_ids, n_steps, device)
        return plan


def attention_lse(q, k, v, cu_seqlens, scale: float, *, out=None, config: dict | None = None):
    """Pass 1: o [T, Hq, D] (dtype of q), lse [Hq, T] fp32."""
    T, Hq, D = q.shape
    if (why := supports(D, q.dtype)) is not None:
        raise ValueError(why)
    groups = Hq // k.shape[1]
    q, k, v = (x if x.stride(2) == 1 else x.contiguous() for x in (q, k, v))
    o = torch.empty_like(q) if out is None else out[0]
    lse = torch.empty(Hq, T, dtype=torch.float32, device=q.device) if out is None else out[1]
    if o.stride(2) != 1 or lse.stride(1) != 1 or lse.stride(0) != T:
        raise ValueError("out tensors must be contiguous")
    if T == 0:
        return o, lse
    cfg = dict(config or attn_config(q.dtype, D, _capability(q.device)))
    block_m, block_n = cfg.pop("BLOCK_M"), cfg.pop("BLOCK_N")
    cu = cu_seqlens.to(device=q.device, dtype=torch.int32)
    blk_seq, blk_start, n_prog = _block_table(cu, block_m, T)
    _attn_fwd[(n_prog, Hq)](
        q, k, v, o, lse, cu, blk_seq, blk_start, scale * LOG2E, T,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), o.stride(0), o.stride(1),
        GROUPS=groups, D=D, BLOCK_M=block_m, BLOCK_N=block_n, PREC=_prec(q.dtype), **cfg)
    return o, lse


def step_mass(q, k, lse, cu_seqlens, step_ids, n_steps, scale: float, *, out=None, per_head: bool = False,
              config: dict | None = None):
    """Pass 2: mass [B, Nmax, Nmax] fp32 (head mean) or, per_head, [B, Hq, Nmax, Nmax] (per head, no mean)."""
    T, Hq, D = q.shape
    Hk = k.shape[1]
    groups = Hq // Hk
    q, k = (x if x.stride(2) == 1 else x.contiguous() for x in (q, k))
    cu = cu_seqlens.to(device=q.device, dtype=torch.int32)
    plan = _Plan.get(cu_seqlens, step_ids, n_steps, q.device)
    B, n_max = len(plan.n_list), plan.n_max
    shape = (B, Hq, n_max, n_max) if per_head else (B, n_max, n_max)
    mass = torch.zeros(shape, dtype=torch.float32, device=q.device) if out is None else out.zero_()
    if n_max == 0 or T == 0:
        return mass
    cfg = dict(config or mass_config(q.dtype, D, groups, _capability(q.device), per_head))
    block_m, block_n, hpb = cfg.pop("BLOCK_M"), cfg.pop("BLOCK_N"), cfg.pop("HPB")
    if per_head and hpb != 1:
        raise ValueError("per_head needs one head per program (HPB=1)")
    steps = plan.steps
    r = torch.zeros(Hq // hpb, T, n_max, dtype=torch.float32, device=q.device)
    blk_seq, blk_start, n_prog = _block_table(cu, block_m, T)
    _step_mass[(n_prog, Hq // hpb)](
        q, k, lse, steps, cu, blk_seq, blk_start, r, scale * LOG2E, T, n_max,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), r.stride(0),
        GROUPS=groups, HPB=hpb, D=D, BLOCK_M=block_m, BLOCK_N=block_n, PREC=_prec(q.dtype), **cfg)
    if not per_head:
        r = r.sum(0)  # fixed-order sum over head blocks -> [T, n_max]
    for b, onehot in enumerate(plan.onehots):
        if onehot is None:
            continue
        s, e, n = plan.bounds[b], plan.bounds[b + 1], plan.n_list[b]
        if per_head:
            mass[b, :, :n, :n] = torch.matmul(onehot, r[:, s:e, :n])[:, :n]
        else:
            mass[b, :n, :n] = (onehot @ r[s:e, :n])[:n] / Hq
    return mass


def step_attention(q, k, v, cu_seqlens, step_ids, n_steps, scale: float, *, out=None, per_head: bool = False):
    """out: optional preallocated (o, lse, mass), every element of which is overwritten."""
    o, lse = attention_lse(q, k, v, cu_seqlens, scale, out=None if out is None else out[:2])
    return o, lse, step_mass(q, k, lse, cu_seqlens, step_ids, n_steps, scale,
                             out=None if out is None else out[2], per_head=per_head)

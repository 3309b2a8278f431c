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
- Pass 2 (kernels/step_mass.py) treats the step mass as attention whose values are the one-hot matrix of
  the key steps: a tile's contribution is one tensor-core dot psum @ onehot over the few step ids the tile
  spans; the previous per-step loop kernel is the fallback for packs whose key tiles span too many ids.
- Deterministic ownership, no atomics, race-free by construction. A program is the only writer of its
  rows of R[hb, t, j] = sum_{h in head block hb} sum_{u in step j} p_h(t, u); a read-modify-write of its own
  rows is preceded by a CTA barrier (tl.debug_barrier), so an earlier store is visible to every thread
  whatever layout the compiler picks. The head-block and per-(query step) sums are then fixed-order torch
  ops: bit-identical run to run.
- fp32 accumulation everywhere (scores, softmax statistics, O accumulator, R). fp32 inputs use IEEE dot
  products (not TF32) so the fp32 path is as accurate as the torch reference; bf16/fp16 use tensor cores.
- Only the diagonal key tiles are masked: tiles strictly below a query block's first row need no causal or
  length mask (one inner function, MASK a constexpr).
- Block sizes, warps and stages are chosen per dtype, head dim and GPU target (`attn_config`,
  `mass_config`); tests/kernels/test_aot_compile.py compiles exactly these for sm_80 and sm_90 and checks
  shared memory and spills, so a config that would fail at launch on an A100 fails CI instead.
- Host syncs: none in the model's forward. It binds the pack's plan from its host arrays before the layer
  stack (`step_plan.Plan.bind`), so the block tables (exact grid) and the per-(query step) token lists are
  built on the host and copied without blocking. A direct caller without a bound plan gets an upper-bound grid
  (cdiv(T, BLOCK_M) + B programs; the spare ones exit at once) built on the device, and the plan read from the
  tensors once per (cu_seqlens, step_ids, n_steps): a one-slot cache keyed by tensor identity (and version
  counter where the tensor has one).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from masprism_batch.kernels import step_mass as _sm
from masprism_batch.kernels import step_plan as _plan
from masprism_batch.kernels.step_mass import mass_config  # noqa: F401  (re-exported: the configs of both passes)

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


# ---- host side -----------------------------------------------------------------------------------------
_TABLES: dict = {}  # (block_m, T) -> (cu, its version, table): the current pack's block tables


def _block_table(cu: torch.Tensor, block_m: int, T: int):
    """(blk_seq, blk_start, n_programs) of the pack whose bounds are `cu`. When the forward bound the pack's plan
    (kernels/step_plan.py `Plan.bind`), exact and from its host bounds: no device op, no sync. Otherwise built on
    the device without a host sync: n_programs = cdiv(T, BM) + B >= the real number of query blocks sum_b
    cdiv(L_b, BM); the spare programs get seq = -1. Cached for the last pack (same cu tensor, unchanged version):
    one forward's 28 layers build it once, not once per layer."""
    hit = _TABLES.get((block_m, T))
    if hit is not None and hit[0] is cu and hit[1] == _sm_version(cu):
        return hit[2]
    bound = _plan.Plan._last
    if bound is not None and bound.keys[0] is cu and bound.versions[0] == _sm_version(cu):
        table = bound.block_table(block_m)
    else:
        table = _build_block_table(cu, block_m, T)
    for key in [k for k, v in _TABLES.items() if v[0] is not cu]:  # one pack at a time (both passes' tiles)
        del _TABLES[key]
    _TABLES[(block_m, T)] = (cu, _sm_version(cu), table)
    return table


def _sm_version(t: torch.Tensor):
    try:
        return t._version
    except RuntimeError:  # inference tensors have no version counter
        return None


def _build_block_table(cu: torch.Tensor, block_m: int, T: int):
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
    """Pass 2: mass [B, Nmax, Nmax] fp32 (head mean) or, per_head, [B, Hq, Nmax, Nmax] (per head, no mean).
    The dot kernel when every key tile spans at most config STEPS step ids, else the loop kernel
    (kernels/step_mass.py)."""
    T, Hq, D = q.shape
    Hk = k.shape[1]
    groups = Hq // Hk
    q, k = (x if x.stride(2) == 1 else x.contiguous() for x in (q, k))
    cu = cu_seqlens.to(device=q.device, dtype=torch.int32)
    plan = _plan.Plan.get(cu_seqlens, step_ids, n_steps, q.device)
    B, n_max = len(plan.n_list), plan.n_max
    shape = (B, Hq, n_max, n_max) if per_head else (B, n_max, n_max)
    if out is not None and not (out.is_contiguous() and out.dtype == torch.float32):
        return out.copy_(step_mass(q, k, lse, cu_seqlens, step_ids, n_steps, scale, per_head=per_head,
                                   config=config))
    mass = torch.empty(shape, dtype=torch.float32, device=q.device) if out is None else out
    if n_max == 0 or T == 0:
        return mass.zero_()
    cfg = dict(config or mass_config(q.dtype, D, groups, _capability(q.device), per_head))
    block_m, block_n, hpb = cfg.pop("BLOCK_M"), cfg.pop("BLOCK_N"), cfg.pop("HPB")
    ns = _plan.window_steps(plan.max_span(block_n), cfg.pop("STEPS"))
    if per_head and hpb != 1:
        raise ValueError("per_head needs one head per program (HPB=1)")
    r = torch.zeros(Hq // hpb, T, n_max, dtype=torch.float32, device=q.device)
    blk_seq, blk_start, n_prog = _block_table(cu, block_m, T)
    args = (q, k, lse, plan.steps, cu, blk_seq, blk_start, r, scale * LOG2E, T, n_max,
            q.stride(0), q.stride(1), k.stride(0), k.stride(1), r.stride(0))
    common = dict(GROUPS=groups, HPB=hpb, D=D, BLOCK_M=block_m, BLOCK_N=block_n, PREC=_prec(q.dtype), **cfg)
    if ns:
        _sm._step_mass_dot[(n_prog, Hq // hpb)](*args, NS=ns, SPLIT=q.dtype != torch.float32, **common)
    else:
        _sm._step_mass[(n_prog, Hq // hpb)](*args, **common)
    # head blocks and the tokens of each query step summed in one fixed-order launch; writes every element
    return _plan.sum_step_rows(plan, r, mass, per_head, Hq)


def step_attention(q, k, v, cu_seqlens, step_ids, n_steps, scale: float, *, out=None, per_head: bool = False):
    """out: optional preallocated (o, lse, mass), every element of which is overwritten."""
    o, lse = attention_lse(q, k, v, cu_seqlens, scale, out=None if out is None else out[:2])
    return o, lse, step_mass(q, k, lse, cu_seqlens, step_ids, n_steps, scale,
                             out=None if out is None else out[2], per_head=per_head)

"""Triton: the plain layers' elementwise chain, fused (GPU only; the CPU keeps the torch ops in model/layers.py).

- `rms_norm`: one pass over each row (load, fp32 sum of squares, scale, cast, weight) instead of ~7 torch
  passes over an fp32 copy. Same semantics as layers.rms_norm: normalise in fp32, cast to the activation
  dtype, then multiply by the weight in that dtype (transformers' order).
- `qk_norm_rope`: Qwen3's per-head q/k RMSNorm (optional) and the rotate-half RoPE of q and k in one pass:
  one program per token over all its q and k heads, reading the strided qkv GEMM output in place and
  writing one fresh [T, Hq + Hk, D] tensor (torch: norm copy, rope copy and 4 elementwise passes).
  The rotation is computed in fp32 from the (normed, rounded) inputs and rounded once; torch's version rounds
  after each of its two ops, so results can differ by one unit in the last place of bf16/fp16.
- `silu_mul`: the MLP's silu(gate) * up from the fused gate_up GEMM output in one pass (torch: silu writes
  [T, I], the multiply reads it back), rounded like torch: silu in fp32, to the dtype, then the product.
Liger-Kernel's RMSNorm, RoPE and SwiGLU kernels are the anchors for both (same row-per-program layout).
Correctness under the interpreter (tests/kernels/test_elementwise.py), compile/resources for sm_80/sm_90
(tests/kernels/test_aot_compile.py).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


def supports(x: torch.Tensor, head_dim: int | None = None) -> bool:
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        return False
    return head_dim is None or (head_dim >= 4 and head_dim & (head_dim - 1) == 0)


@triton.jit
def _rms_norm(X, W, Y, N, sx, sy, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    m = offs < N
    x = tl.load(X + row * sx + offs, mask=m, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, 0) / N + eps)
    y = (x * rstd).to(Y.dtype.element_ty)
    w = tl.load(W + offs, mask=m, other=0.0)
    tl.store(Y + row * sy + offs, (y * w).to(Y.dtype.element_ty), mask=m)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x [..., N] (last dim contiguous) -> fresh tensor of x's shape and dtype."""
    N = x.shape[-1]
    x2 = x.reshape(-1, N)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    y = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
    if x2.shape[0]:
        _rms_norm[(x2.shape[0],)](x2, weight.contiguous(), y, N, x2.stride(0), y.stride(0), eps,
                                  BLOCK=triton.next_power_of_2(N), num_warps=4 if N <= 2048 else 8)
    return y.view(x.shape)


@triton.jit
def _qk_norm_rope(X, W, COS, SIN, Y, HN, sx_t, sx_h, sy_t, sy_h, sc_t, eps,
                  HALF: tl.constexpr, BLOCK_H: tl.constexpr, NORM: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, HALF)
    hm = (offs_h < HN)[:, None]
    p1 = X + t * sx_t + offs_h[:, None] * sx_h + offs_d[None, :]
    x1 = tl.load(p1, mask=hm, other=0.0)
    x2 = tl.load(p1 + HALF, mask=hm, other=0.0)
    if NORM:
        f1, f2 = x1.to(tl.float32), x2.to(tl.float32)
        rstd = tl.rsqrt((tl.sum(f1 * f1, 1) + tl.sum(f2 * f2, 1)) / (2 * HALF) + eps)[:, None]
        w1 = tl.load(W + offs_h[:, None] * (2 * HALF) + offs_d[None, :], mask=hm, other=0.0)
        w2 = tl.load(W + offs_h[:, None] * (2 * HALF) + HALF + offs_d[None, :], mask=hm, other=0.0)
        x1 = ((f1 * rstd).to(x1.dtype) * w1).to(x1.dtype)
        x2 = ((f2 * rstd).to(x2.dtype) * w2).to(x2.dtype)
    c = tl.load(COS + t * sc_t + offs_d).to(tl.float32)[None, :]
    s = tl.load(SIN + t * sc_t + offs_d).to(tl.float32)[None, :]
    a, b = x1.to(tl.float32), x2.to(tl.float32)
    q1 = Y + t * sy_t + offs_h[:, None] * sy_h + offs_d[None, :]
    tl.store(q1, (a * c - b * s).to(Y.dtype.element_ty), mask=hm)
    tl.store(q1 + HALF, (b * c + a * s).to(Y.dtype.element_ty), mask=hm)


def qk_norm_rope(qk: torch.Tensor, norm_weight: torch.Tensor | None, eps: float, cos: torch.Tensor,
                 sin: torch.Tensor) -> torch.Tensor:
    """qk [T, Hn, D] (any token/head strides, last dim contiguous), norm_weight [Hn, D] or None,
    cos/sin [T, D/2] -> fresh contiguous [T, Hn, D]: rope(rms_norm(qk) * w) like layers.qkv_proj."""
    T, HN, D = qk.shape
    if qk.stride(2) != 1:
        qk = qk.contiguous()
    y = torch.empty((T, HN, D), dtype=qk.dtype, device=qk.device)
    cos, sin = cos.contiguous(), sin.contiguous()
    w = norm_weight.contiguous() if norm_weight is not None else cos  # unused when NORM is False
    if T:
        _qk_norm_rope[(T,)](qk, w, cos, sin, y, HN, qk.stride(0), qk.stride(1), y.stride(0), y.stride(1),
                            cos.stride(0), eps, HALF=D // 2, BLOCK_H=triton.next_power_of_2(HN),
                            NORM=norm_weight is not None, num_warps=4)
    return y


@triton.jit
def _silu_mul(GU, Y, INTER, sg, sy, BLOCK: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = offs < INTER
    g = tl.load(GU + t * sg + offs, mask=m, other=0.0)
    u = tl.load(GU + t * sg + INTER + offs, mask=m, other=0.0)
    gf = g.to(tl.float32)
    s = (gf / (1.0 + tl.exp(-gf))).to(g.dtype)
    tl.store(Y + t * sy + offs, (s * u).to(Y.dtype.element_ty), mask=m)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """gate_up [T, 2I] (gate then up, last dim contiguous) -> silu(gate) * up [T, I]."""
    T, two_i = gate_up.shape
    inter = two_i // 2
    if gate_up.stride(1) != 1:
        gate_up = gate_up.contiguous()
    y = torch.empty(T, inter, dtype=gate_up.dtype, device=gate_up.device)
    if T:
        block = min(1024, triton.next_power_of_2(inter))
        _silu_mul[(T, triton.cdiv(inter, block))](gate_up, y, inter, gate_up.stride(0), y.stride(0), BLOCK=block,
                                                  num_warps=4)
    return y

"""Plain causal attention over a packed varlen batch, for the layers that produce no signal.

- GPU with flash-attn importable: its varlen kernel, one launch for the whole pack, GQA native.
- GPU without flash-attn, head dim / dtype the Triton kernels take: the Triton varlen forward
  (kernels/step_attention.py pass 1), no padding and no scatter/gather glue, for a single-sequence pack too
  (SDPA per sequence would repeat K and V per query head: two [T, Hq, D] copies per layer).
- Otherwise on GPU: ONE SDPA call over the pack laid out as [B, H, Lmax, D] (each sequence left-aligned,
  zero padding after it; is_causal, so a real query never sees a padded key: padding sits after every real
  key of its row). The scatter/gather indices are built on the device from cu_seqlens (no host sync, no
  per-sequence Python loop). When padding would more than double the work (one long sequence packed with
  short ones) it runs SDPA per sequence instead, which is then the cheaper of the two.
- CPU: torch SDPA once per sequence with is_causal and native GQA: its CPU flash kernel works in blocks, so
  no T x T score matrix is formed (measured: the fastest CPU path here).
(Instrumented layers go through masprism_batch.signals instead.)

Sliding-window layers (Gemma 3: query t sees keys t-W+1 .. t, transformers' sliding_window_overlay) take
`window`: flash-attn's window_size on GPU; otherwise SDPA per sequence, plain causal while the sequence is no
longer than W (the window then hides nothing), else in query blocks of W whose keys start W-1 before the
block, with a boolean mask (the CPU flash kernel takes it blockwise): work and memory O(L W), not O(L^2).
Never the Triton varlen forward, which has no window; the signal kernels never see a windowed layer
(arch.instrument_layers).
"""

from __future__ import annotations

import logging
import os

import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)
_SDPA_GQA = tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 5)  # enable_gqa arrived in 2.5
PAD_WASTE_LIMIT = 2.0  # padded path only while B * Lmax <= this x T

try:  # optional: only on CUDA machines with the gpu extra installed
    from flash_attn import flash_attn_varlen_func as _flash_varlen
except Exception:  # noqa: BLE001 - any import failure (missing, ABI mismatch) means "not available"
    _flash_varlen = None


def flash_available(device: torch.device) -> bool:
    return _flash_varlen is not None and device.type == "cuda"


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor,
                     bounds: list[int], max_seqlen: int, scale: float, window: int | None = None) -> torch.Tensor:
    """q [T, Hq, D], k/v [T, Hk, D] -> o [T, Hq, D]; attention never crosses a sequence boundary.
    window: a sliding-window layer's W (None: full causal)."""
    if flash_available(q.device) and q.dtype in (torch.float16, torch.bfloat16):
        kw = {} if window is None else {"window_size": (window - 1, 0)}  # keys i - (W - 1) .. i
        return _flash_varlen(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
                             softmax_scale=scale, causal=True, **kw)
    if window is not None and window < max_seqlen:
        return sdpa_windowed(q, k, v, bounds, scale, window)
    B = len(bounds) - 1
    if (fwd := _triton_varlen(q)) is not None:
        return fwd(q, k, v, cu_seqlens, scale)[0]
    if q.device.type != "cpu" and B > 1 and B * max_seqlen <= PAD_WASTE_LIMIT * q.shape[0]:
        return sdpa_padded(q, k, v, cu_seqlens, B, max_seqlen, scale)
    return sdpa_per_sequence(q, k, v, bounds, scale)


def _triton_varlen(q: torch.Tensor):
    """The Triton varlen forward (pass 1 of step_attention: varlen and GQA native, strided q/k/v) for a CUDA
    pack, or None. Without flash-attn the padded SDPA path scattered q, k and v into padded
    buffers (index_put_, 17.3 of 145.7 ms CUDA time of a 16 x 2,048 pack on an H200) and gathered O back;
    this kernel reads the pack as it is. MASPRISM_NO_TRITON_ATTN=1 keeps the padded SDPA path."""
    if q.device.type != "cuda" or os.environ.get("MASPRISM_NO_TRITON_ATTN", "0") == "1":
        return None
    try:
        from masprism_batch.kernels import step_attention as kernels
    except Exception:  # noqa: BLE001 - no triton: the SDPA paths below
        return None
    return kernels.attention_lse if kernels.supports(q.shape[2], q.dtype) is None else None


def _expand_kv(k: torch.Tensor, groups: int, native_gqa: bool, dim: int) -> torch.Tensor:
    return k if groups == 1 or native_gqa else k.repeat_interleave(groups, dim=dim)


def sdpa_padded(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor, B: int,
                max_seqlen: int, scale: float) -> torch.Tensor:
    """One SDPA call over the pack padded to [B, H, Lmax, D] (see the module docstring); any device."""
    T, Hq, D = q.shape
    Hk = k.shape[1]
    groups = Hq // Hk
    cu = cu_seqlens.to(device=q.device, dtype=torch.long)
    seq = torch.repeat_interleave(torch.arange(B, device=q.device), cu[1:] - cu[:-1], output_size=T)
    pos = torch.arange(T, device=q.device) - cu[seq]

    def pad(x):
        out = x.new_zeros(B, max_seqlen, x.shape[1], D)
        out[seq, pos] = x
        return out.transpose(1, 2)  # [B, H, Lmax, D]

    # CUDA: expand K/V, because SDPA's fused CUDA kernels refuse enable_gqa in some torch versions and the
    # math fallback is quadratic; CPU (tests) takes GQA natively.
    native_gqa = _SDPA_GQA and q.device.type == "cpu" and groups > 1
    kp, vp = (_expand_kv(pad(x), groups, native_gqa, dim=1) for x in (k, v))
    kw = {"enable_gqa": True} if native_gqa else {}
    o = F.scaled_dot_product_attention(pad(q), kp, vp, is_causal=True, scale=scale, **kw)
    return o.transpose(1, 2)[seq, pos]  # [T, Hq, D], contiguous


def sdpa_per_sequence(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bounds: list[int],
                      scale: float) -> torch.Tensor:
    groups = q.shape[1] // k.shape[1]
    native_gqa = _SDPA_GQA and q.device.type == "cpu" and groups > 1
    outs = []
    for s, e in zip(bounds[:-1], bounds[1:], strict=True):
        if e == s:
            continue
        # 4-D [1, H, L, D] and no mask: the shape SDPA's blockwise CPU flash kernel accepts (3-D inputs fall
        # back to the math path, which forms H x L x L scores).
        qs = q[s:e].transpose(0, 1)[None]
        ks, vs = (_expand_kv(x[s:e], groups, native_gqa, dim=1).transpose(0, 1)[None] for x in (k, v))
        kw = {"enable_gqa": True} if native_gqa else {}
        outs.append(F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scale, **kw)[0].transpose(0, 1))
    # the CPU flash kernel allocates its output token-major, so each [L, H, D] view is contiguous: one pack
    # needs no copy at all, several take one cat (not a copy per sequence into a preallocated o)
    if len(outs) == 1 and outs[0].is_contiguous():
        return outs[0]
    return torch.cat(outs).contiguous()


def window_mask(q0: int, q1: int, k0: int, k1: int, window: int | None, device) -> torch.Tensor:
    """Boolean [q1 - q0, k1 - k0]: query at absolute position p sees key u iff u <= p and (no window or
    u > p - window), the rule of transformers' causal and sliding-window masks."""
    qp = torch.arange(q0, q1, device=device)[:, None]
    kp = torch.arange(k0, k1, device=device)[None, :]
    return (kp <= qp) if window is None else (kp <= qp) & (kp > qp - window)


def sdpa_windowed(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bounds: list[int], scale: float,
                  window: int) -> torch.Tensor:
    """Sliding-window causal attention per sequence (module docstring); any device."""
    groups = q.shape[1] // k.shape[1]
    native_gqa = _SDPA_GQA and q.device.type == "cpu" and groups > 1
    kw = {"enable_gqa": True} if native_gqa else {}
    o = torch.empty_like(q)
    for s, e in zip(bounds[:-1], bounds[1:], strict=True):
        L = e - s
        if L == 0:
            continue
        qs = q[s:e].transpose(0, 1)[None]
        ks, vs = (_expand_kv(x[s:e], groups, native_gqa, dim=1).transpose(0, 1)[None] for x in (k, v))
        if L <= window:
            o[s:e] = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scale, **kw)[0].transpose(0, 1)
            continue
        for a in range(0, L, window):
            b, k0 = min(L, a + window), max(0, a - window + 1)
            mask = window_mask(a, b, k0, b, window, q.device)
            o[s + a:s + b] = F.scaled_dot_product_attention(qs[:, :, a:b], ks[:, :, k0:b], vs[:, :, k0:b],
                                                            attn_mask=mask, scale=scale, **kw)[0].transpose(0, 1)
    return o

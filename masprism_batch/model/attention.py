"""Plain causal attention over a packed varlen batch, for the layers that produce no signal.

GPU: flash-attn's varlen kernel when it is importable (one launch for the whole pack, GQA native).
Otherwise torch SDPA once per sequence with is_causal: its CPU flash kernel works in blocks, so no
T x T score matrix is formed either way. (Instrumented layers go through masprism_batch.signals instead.)
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)

try:  # optional: only on CUDA machines with the gpu extra installed
    from flash_attn import flash_attn_varlen_func as _flash_varlen
except Exception:  # noqa: BLE001 - any import failure (missing, ABI mismatch) means "not available"
    _flash_varlen = None


def flash_available(device: torch.device) -> bool:
    return _flash_varlen is not None and device.type == "cuda"


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor,
                     bounds: list[int], max_seqlen: int, scale: float) -> torch.Tensor:
    """q [T, Hq, D], k/v [T, Hk, D] -> o [T, Hq, D]; attention never crosses a sequence boundary."""
    if flash_available(q.device) and q.dtype in (torch.float16, torch.bfloat16):
        return _flash_varlen(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
                             softmax_scale=scale, causal=True)
    groups = q.shape[1] // k.shape[1]
    o = torch.empty_like(q)
    for s, e in zip(bounds[:-1], bounds[1:], strict=True):
        if e == s:
            continue
        # 4-D [1, H, L, D] and no mask: the shape SDPA's blockwise CPU flash kernel accepts (3-D inputs fall
        # back to the math path, which forms H x L x L scores). Expanded K/V cost L*Hq*D each.
        qs = q[s:e].transpose(0, 1)[None]
        ks = (k[s:e].repeat_interleave(groups, dim=1) if groups > 1 else k[s:e]).transpose(0, 1)[None]
        vs = (v[s:e].repeat_interleave(groups, dim=1) if groups > 1 else v[s:e]).transpose(0, 1)[None]
        o[s:e] = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scale)[0].transpose(0, 1)
    return o

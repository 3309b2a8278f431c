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
_SDPA_GQA = tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 5)  # enable_gqa arrived in 2.5

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
    # CPU: SDPA's flash kernel takes GQA natively. CUDA without flash-attn: expand K/V, because SDPA's
    # fused CUDA kernels refuse enable_gqa in some torch versions and the math fallback is quadratic.
    native_gqa = _SDPA_GQA and q.device.type == "cpu" and groups > 1
    o = q.new_empty(q.shape)  # contiguous even when q is a strided view (empty_like would keep its strides)
    for s, e in zip(bounds[:-1], bounds[1:], strict=True):
        if e == s:
            continue
        # 4-D [1, H, L, D] and no mask: the shape SDPA's blockwise CPU flash kernel accepts (3-D inputs fall
        # back to the math path, which forms H x L x L scores).
        qs = q[s:e].transpose(0, 1)[None]
        ks, vs = k[s:e], v[s:e]
        if groups > 1 and not native_gqa:
            ks, vs = ks.repeat_interleave(groups, dim=1), vs.repeat_interleave(groups, dim=1)
        ks, vs = ks.transpose(0, 1)[None], vs.transpose(0, 1)[None]
        kw = {"enable_gqa": True} if native_gqa else {}
        o[s:e] = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scale, **kw)[0].transpose(0, 1)
    return o

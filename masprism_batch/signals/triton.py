"""The Triton backend (kernels/<op>.py): the kernels registered as torch.library custom ops
torch.ops.masprism_triton.step_attention and torch.ops.masprism_triton.token_nll, like the C++ op
torch.ops.masprism.step_attention, each with a fake (meta) kernel so torch.library.opcheck and torch.compile
can trace them without running them. Thin wrappers below give them the backends' common signatures.

Only imported once `signals.resolve_backend` chose triton (this imports triton): CUDA tensors, or CPU tensors
under TRITON_INTERPRET=1 (tests). The ops take any device; the kernels' launchers are the real ones.
Like the C++ op, the ops return fresh tensors (a custom op's outputs may not alias its inputs) and `out=` is
filled by a copy; the model's forward passes no `out`. `n_max` (the padded step count of `mass`) is an
argument, as in the C++ op, so the fake kernel knows the output shape without reading n_steps.
(No `from __future__ import annotations` here: custom_op infers the schema from real annotations.)
"""

import torch
from torch import Tensor

from masprism_batch.kernels import step_attention as _attn
from masprism_batch.kernels import step_plan as _plan
from masprism_batch.kernels import token_nll as _nll


def bind(cu_seqlens, step_ids, n_steps, host, upload) -> None:
    """The pack about to run: its plan (step counts, step-token lists, block tables) from the host arrays
    `host` = (bounds, step ids, step counts), so no layer reads a device tensor (kernels/step_plan.py)."""
    _plan.Plan.bind(cu_seqlens, step_ids, n_steps, cu_seqlens.device, host, upload)


@torch.library.custom_op("masprism_triton::step_attention", mutates_args=())
def _step_attention_op(q: Tensor, k: Tensor, v: Tensor, cu_seqlens: Tensor, step_ids: Tensor, n_steps: Tensor,
                       scale: float, n_max: int, per_head: bool) -> tuple[Tensor, Tensor, Tensor]:
    o, lse, mass = _attn.step_attention(q, k, v, cu_seqlens, step_ids, n_steps, scale, per_head=per_head)
    if mass.shape[-1] != n_max:
        raise ValueError(f"n_max={n_max} but n_steps.max()={mass.shape[-1]}")
    return o, lse, mass


@_step_attention_op.register_fake
def _step_attention_fake(q, k, v, cu_seqlens, step_ids, n_steps, scale, n_max, per_head):
    T, Hq, _ = q.shape
    B = cu_seqlens.shape[0] - 1
    shape = (B, Hq, n_max, n_max) if per_head else (B, n_max, n_max)
    return (torch.empty_like(q), q.new_empty((Hq, T), dtype=torch.float32), q.new_empty(shape, dtype=torch.float32))


@torch.library.custom_op("masprism_triton::token_nll", mutates_args=())
def _token_nll_op(hidden: Tensor, weight: Tensor, targets: Tensor, ignore_index: int) -> Tensor:
    return _nll.token_nll(hidden, weight, targets, ignore_index=ignore_index)


@_token_nll_op.register_fake
def _token_nll_fake(hidden, weight, targets, ignore_index):
    return hidden.new_empty((hidden.shape[0],), dtype=torch.float32)


def step_attention(q, k, v, cu_seqlens, step_ids, n_steps, scale: float, *, block: int = 256, out=None,
                   per_head: bool = False):
    """block: unused (the kernels' tiles come from attn_config / mass_config per dtype and GPU target)."""
    n_max = _plan.Plan.get(cu_seqlens, step_ids, n_steps, q.device).n_max  # bound: no device read
    res = _step_attention_op(q, k, v, cu_seqlens, step_ids, n_steps, float(scale), n_max,
                                                   bool(per_head))
    if out is None:
        return res
    for dst, src in zip(out, res, strict=True):
        dst.copy_(src)
    return tuple(out)


def token_nll(hidden, weight, targets, *, chunk: int = 1024, ignore_index: int = -100, out=None):
    """chunk: unused (the kernel streams vocabulary tiles, token_nll_config)."""
    res = _token_nll_op(hidden, weight, targets, int(ignore_index))
    if out is None:
        return res
    out.copy_(res)
    return out

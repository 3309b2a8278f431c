"""The C++ CPU backend (csrc/<op>/, built by setup.py as masprism_batch._C): thin wrappers over torch.ops.masprism.
step_attention is C++; token_nll is the torch reference (see token_nll below for why).

Only imported once `signals.cpp_available()` said the extension loaded. The fake (meta) kernels below let
torch.library.opcheck and torch.compile trace the ops without running them.
"""

from __future__ import annotations

import torch

from masprism_batch import _C  # noqa: F401  (loads the library: registers torch.ops.masprism.*)
from masprism_batch.signals import reference
from masprism_batch.signals.reference import compute_dtype


@torch.library.register_fake("masprism::step_attention")
def _step_attention_fake(q, k, v, cu_seqlens, step_ids, n_steps, scale, n_max):
    cdt = compute_dtype(q.dtype)
    T, Hq, _ = q.shape
    return (torch.empty_like(q), q.new_empty((Hq, T), dtype=cdt),
            q.new_empty((cu_seqlens.shape[0] - 1, n_max, n_max), dtype=cdt))


def step_attention(q, k, v, cu_seqlens, step_ids, n_steps, scale: float, *, block: int = 256, out=None,
                   per_head: bool = False):
    """block: unused (the C++ op sizes its own blocks). per_head: no C++ kernel; the torch reference's."""
    if per_head:
        return reference.step_attention(q, k, v, cu_seqlens, step_ids, n_steps, scale, block=block, out=out,
                                        per_head=True)
    n_max = int(n_steps.max()) if n_steps.numel() else 0
    res = torch.ops.masprism.step_attention(q, k, v, cu_seqlens, step_ids, n_steps, float(scale), n_max)
    if out is None:
        return res
    for dst, src in zip(out, res, strict=True):
        dst.copy_(src)
    return tuple(out)


def token_nll(hidden, weight, targets, *, chunk: int = 1024, ignore_index: int = -100, out=None):
    """The cpp backend's NLL is the torch reference: the op is GEMM-bound on a CPU, so a fused C++ kernel does
    not beat it, and C++ ops stay only where they beat the reference (the measurement: docs/benchmarks.md,
    "Per-token NLL", `cpp_removed`)."""
    return reference.token_nll(hidden, weight, targets, chunk=chunk, ignore_index=ignore_index, out=out)

"""The two signal ops and their backend dispatch. Knows nothing of traces: tensors in, tensors out.

See `reference.py` for exact shapes and semantics. Backends: torch (reference, always available),
cpp (csrc/, CPU, when built), triton (kernels/, CUDA). `auto` = triton on CUDA, cpp on CPU when built,
else torch.
"""

from __future__ import annotations

from . import reference


def resolve_backend(backend: str, device) -> str:
    # Filled in by the kernels work; until then every backend is the torch reference.
    return "torch"


def step_attention(q, k, v, cu_seqlens, step_ids, n_steps, scale, backend="auto", block=256):
    return reference.step_attention(q, k, v, cu_seqlens, step_ids, n_steps, scale, block)


def token_nll(hidden, weight, targets, backend="auto", chunk=1024, ignore_index=-100):
    return reference.token_nll(hidden, weight, targets, chunk, ignore_index)

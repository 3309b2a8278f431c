"""Which backend runs the two signal ops: what each needs, and the choice of `auto`.

torch (reference, always available), cpp (csrc/<op>/, CPU, when built; `cpp.py`), triton (kernels/<op>.py, CUDA;
CPU tensors only under TRITON_INTERPRET=1, for tests; `triton.py`). `auto` = triton on CUDA, cpp on CPU when
built, else torch. An explicitly requested backend that cannot run raises a clear error instead of silently
falling back.
"""

from __future__ import annotations

import functools
import logging
import os

import torch

from masprism_batch.signals import reference

log = logging.getLogger(__name__)
BACKENDS = ("auto", "triton", "cpp", "torch")


@functools.cache
def triton_available() -> str | None:
    """None when the triton backend can run, else the reason it cannot."""
    try:
        import triton  # noqa: F401
    except Exception as exc:  # ImportError, or a broken install
        return f"triton not importable ({exc})"
    return None


@functools.cache
def cpp_available() -> str | None:
    """None when the C++ extension is built and loaded, else the reason it is not."""
    try:
        from masprism_batch import _C  # noqa: F401  (registers torch.ops.masprism.*)
    except Exception as exc:
        return (f"C++ CPU ops not built ({exc}): the torch reference runs instead; `pip install --no-build-isolation "
                f"-e .` in the source tree builds them (~1 CPU-minute, a C++ compiler; not with MASPRISM_NO_EXT=1)")
    return None


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def triton_supports(head_dim: int | None = None, dtype: torch.dtype | None = None) -> str | None:
    """None when the Triton kernels take this head dim / dtype (None = not asked), else why not."""
    if dtype is not None and dtype not in (torch.float32, torch.float16, torch.bfloat16):
        return f"triton kernels run fp32/fp16/bf16, got {dtype}"
    if head_dim is not None:
        from masprism_batch.kernels.step_attention import supports

        return supports(head_dim, dtype or torch.float32)
    return None


def resolve_backend(backend: str, device, head_dim: int | None = None, dtype: torch.dtype | None = None) -> str:
    """head_dim/dtype: of the op's inputs; `auto` on CUDA falls back to torch where the Triton kernels do
    not take them (e.g. tiny-random's head_dim 16: step_attention's kernels take 64 and 128)."""
    device = torch.device(device)
    if backend not in BACKENDS:
        raise ValueError(f"unknown signals backend {backend!r}; expected one of {BACKENDS}")
    if backend == "auto":
        if device.type == "cuda" and triton_available() is None:
            if (why := triton_supports(head_dim, dtype)) is None:
                return "triton"
            log.debug("signals backend auto -> torch on %s: %s", device, why)
            return "torch"
        if device.type == "cpu" and cpp_available() is None:
            return "cpp"
        return "torch"
    if backend == "triton":
        if (why := triton_available()) is not None:
            raise RuntimeError(f"signals backend 'triton' unavailable: {why}")
        if device.type != "cuda" and not (device.type == "cpu" and _interpreting()):
            raise RuntimeError(f"signals backend 'triton' needs CUDA tensors (got {device}; "
                               "CPU only under TRITON_INTERPRET=1, for tests)")
        if (why := triton_supports(head_dim, dtype)) is not None:
            raise RuntimeError(f"signals backend 'triton' cannot run these inputs: {why} (use auto or torch)")
    if backend == "cpp":
        if device.type != "cpu":
            raise RuntimeError(f"signals backend 'cpp' runs on CPU tensors only (got {device})")
        if (why := cpp_available()) is not None:
            raise RuntimeError(f"signals backend 'cpp' unavailable: {why}")
    return backend


def _backend_module(chosen: str):
    """The module implementing `chosen`; every backend exposes the two ops with the same signatures:
    step_attention(q, k, v, cu_seqlens, step_ids, n_steps, scale, *, block, out, per_head) and
    token_nll(hidden, weight, targets, *, chunk, ignore_index, out)."""
    if chosen == "triton":
        from masprism_batch.signals import triton

        return triton
    if chosen == "cpp":
        from masprism_batch.signals import cpp

        return cpp
    return reference

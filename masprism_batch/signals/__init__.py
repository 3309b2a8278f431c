"""The two signal ops and their backend dispatch. Knows nothing of traces: tensors in, tensors out.

See `reference.py` for exact shapes and semantics. Backends: torch (reference, always available),
cpp (csrc/<op>/, CPU, when built; `cpp.py`), triton (kernels/<op>.py, CUDA; CPU tensors only under
TRITON_INTERPRET=1, for tests; `triton.py`). The kernels are registered torch ops: torch.ops.masprism.step_attention
(C++) and torch.ops.masprism_triton.{step_attention,token_nll} (Triton), each with a fake kernel.
Every backend module has the same signatures (keyword-only options), so dispatch is one table lookup.
`auto` = triton on CUDA, cpp on CPU when built, else torch. An explicitly requested backend that cannot
run raises a clear error instead of silently falling back.
"""

from __future__ import annotations

import functools
import logging
import os
import weakref

import numpy as np
import torch
from torch.utils.weak import WeakIdKeyDictionary

from masprism_batch.signals import reference

log = logging.getLogger(__name__)
BACKENDS = ("auto", "triton", "cpp", "torch")
COMPACT_NLL_SHARE = 0.9  # token_nll gathers the scored rows when at most this share of them is scored


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


# packed batches whose data passed the checks, by their cu_seqlens tensor, held weakly and by identity (a tensor's `==`
# is elementwise): {cu_seqlens: (weak refs to step_ids and n_steps, version counters, T)}. An entry goes with
# its tensor, so nothing outlives the forward that made the batch.
_CHECKED: WeakIdKeyDictionary = WeakIdKeyDictionary()


def _already_checked(batch: tuple, versions: tuple, T: int) -> bool:
    memo = _CHECKED.get(batch[0])
    if memo is None:
        return False
    (sid, ns), seen, seen_T = memo
    return seen_T == T and seen == versions and sid() is batch[1] and ns() is batch[2]


def _version(t: torch.Tensor):
    try:
        return t._version
    except RuntimeError:  # inference tensors have no version counter
        return None


def _check_batch_host(cu, sid, ns, T):
    """The data checks of one packed batch on host arrays (numpy: no aten op, no device round trip)."""
    if cu[0] != 0 or cu[-1] != T:
        raise ValueError(f"cu_seqlens must be prefix sums from 0 to T={T}; got {cu.tolist()[:8]}...")
    if (np.diff(cu) < 0).any():
        raise ValueError("cu_seqlens must be non-decreasing")
    if T:
        if (sid < -1).any():
            raise ValueError("step_ids must be >= -1 (-1 = token outside every step)")
        if (sid.astype(np.int64) >= np.repeat(ns.astype(np.int64), np.diff(cu))).any():
            raise ValueError("a step id is >= its sequence's n_steps")


def _check_batch_device(cu_seqlens, step_ids, n_steps, T):
    """The same checks on device tensors: one sync for the three flags, one for the two step-id flags."""
    first_ok, last_ok, monotone = (bool(x) for x in torch.stack(
        [cu_seqlens[0] == 0, cu_seqlens[-1] == T, (cu_seqlens[1:] >= cu_seqlens[:-1]).all()]).tolist())
    if not (first_ok and last_ok):
        raise ValueError(f"cu_seqlens must be prefix sums from 0 to T={T}; got {cu_seqlens.tolist()[:8]}...")
    if not monotone:
        raise ValueError("cu_seqlens must be non-decreasing")
    if T:
        seq_of_tok = torch.repeat_interleave(torch.arange(n_steps.numel(), device=step_ids.device),
                                             (cu_seqlens[1:] - cu_seqlens[:-1]).long(), output_size=T)
        below, above = torch.stack([(step_ids < -1).any(),
                                    (step_ids.long() >= n_steps.long()[seq_of_tok]).any()]).tolist()
        if below:
            raise ValueError("step_ids must be >= -1 (-1 = token outside every step)")
        if above:
            raise ValueError("a step id is >= its sequence's n_steps")


def _check_attention(q, k, v, cu_seqlens, step_ids, n_steps):
    """Shape checks every call; the data checks (host syncs) once per packed batch: a forward passes the same
    cu_seqlens / step_ids / n_steps tensors to every instrumented layer, so the layers after the first skip
    them (same tensor objects, unchanged version counters where the tensors have one)."""
    if q.dim() != 3 or k.dim() != 3 or v.shape != k.shape:
        raise ValueError(f"expected q [T,Hq,D], k/v [T,Hk,D]; got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    T, Hq, D = q.shape
    if k.shape[0] != T or k.shape[2] != D or Hq % k.shape[1] != 0:
        raise ValueError(f"k {tuple(k.shape)} does not match q {tuple(q.shape)} (need same T, D and Hq % Hk == 0)")
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 1:
        raise ValueError(f"cu_seqlens must be prefix sums from 0 to T={T}; got {cu_seqlens.tolist()[:8]}...")
    if step_ids.shape != (T,) or n_steps.shape != (cu_seqlens.numel() - 1,):
        raise ValueError(f"step_ids must be [T]={T} and n_steps [B]; got {tuple(step_ids.shape)}, {tuple(n_steps.shape)}")
    batch = (cu_seqlens, step_ids, n_steps)
    versions = tuple(_version(t) for t in batch)
    if _already_checked(batch, versions, T):
        return
    _CHECKED.pop(cu_seqlens, None)
    if all(t.device.type == "cpu" for t in batch):
        _check_batch_host(cu_seqlens.numpy(), step_ids.numpy(), n_steps.numpy(), T)
    else:
        _check_batch_device(cu_seqlens, step_ids, n_steps, T)
    _CHECKED[cu_seqlens] = ((weakref.ref(step_ids), weakref.ref(n_steps)), versions, T)


def to_device(a: np.ndarray, device) -> torch.Tensor:
    """A host array as a tensor on `device`: on CUDA copied from pinned memory without blocking the host (the
    caching host allocator keeps the pinned block until the copy is done); elsewhere the array's own memory."""
    t = torch.from_numpy(np.ascontiguousarray(a))
    device = torch.device(device)
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def bind_pack(cu_seqlens, step_ids, n_steps, host, *, backend="auto", head_dim=None, dtype=None) -> None:
    """Declare the packed batch a forward is about to run: `host` = (bounds, step ids, step counts), numpy arrays
    holding the same data as the three device tensors (the forward uploaded them). The batch checks run on the
    host arrays here, and the triton backend builds its plan from them, so no layer reads a device tensor."""
    cu, sid, ns = (np.asarray(x) for x in host)
    if cu.shape != tuple(cu_seqlens.shape) or sid.shape != tuple(step_ids.shape) or ns.shape != tuple(n_steps.shape):
        raise ValueError("bind_pack: the host arrays do not have the shapes of the device tensors")
    T = int(sid.shape[0])
    _check_batch_host(cu, sid, ns, T)
    batch = (cu_seqlens, step_ids, n_steps)
    _CHECKED.pop(cu_seqlens, None)
    _CHECKED[cu_seqlens] = ((weakref.ref(step_ids), weakref.ref(n_steps)), tuple(_version(t) for t in batch), T)
    if resolve_backend(backend, cu_seqlens.device, head_dim=head_dim, dtype=dtype) == "triton":
        from masprism_batch.signals import triton

        triton.bind(cu_seqlens, step_ids, n_steps, (cu, sid, ns), to_device)


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


def step_attention(q, k, v, cu_seqlens, step_ids, n_steps, scale, *, backend="auto", block=256, out=None,
                   per_head=False):
    """Causal varlen GQA attention + row LSE + head-averaged step mass; see reference.py for semantics.

    out: optional preallocated (o, lse, mass) with the documented shapes/dtypes, all overwritten.
    per_head: mass per query head [B, Hq, N, N] (the input of learned head weights). Backends without a
    per-head kernel (the C++ op) use the torch reference for it: same semantics, measured in bench_accuracy.
    block: query rows per block of the torch reference (ignored by the kernels, whose tiles are per target).
    """
    _check_attention(q, k, v, cu_seqlens, step_ids, n_steps)
    chosen = resolve_backend(backend, q.device, head_dim=q.shape[2], dtype=q.dtype)
    return _backend_module(chosen).step_attention(q, k, v, cu_seqlens, step_ids, n_steps, scale, block=block,
                                                  out=out, per_head=per_head)


def token_nll(hidden, weight, targets, *, backend="auto", chunk=1024, ignore_index=-100, out=None,
              host_targets: np.ndarray | None = None):
    """Per-token NLL fp32 [T] of targets under hidden @ weight.T (nan where target == ignore_index).
    chunk: tokens per block of the torch reference (ignored by the Triton kernel).
    host_targets: the same targets as a host array, when the caller has them: the checks and the choice of rows
    then read no device tensor (the model's forward passes only scored rows, so nothing is compacted here)."""
    if hidden.dim() != 2 or weight.dim() != 2 or hidden.shape[1] != weight.shape[1]:
        raise ValueError(f"expected hidden [T,d], weight [V,d]; got {tuple(hidden.shape)}, {tuple(weight.shape)}")
    if targets.shape != (hidden.shape[0],):
        raise ValueError(f"targets must be [T]={hidden.shape[0]}; got {tuple(targets.shape)}")
    if host_targets is not None:
        if host_targets.shape != tuple(targets.shape):
            raise ValueError(f"host_targets must be [T]={targets.shape[0]}; got {host_targets.shape}")
        valid_h = host_targets != ignore_index
        bad_h = valid_h & ((host_targets < 0) | (host_targets >= weight.shape[0]))
        if bad_h.any():
            raise ValueError(f"target ids outside [0, {weight.shape[0]}) at positions {np.flatnonzero(bad_h)[:5].tolist()}")
        n_valid, valid = int(valid_h.sum()), None
    else:
        valid = targets != ignore_index
        bad = valid & ((targets < 0) | (targets >= weight.shape[0]))
        if bool(bad.any()):
            raise ValueError(f"target ids outside [0, {weight.shape[0]}) at positions {bad.nonzero()[:5, 0].tolist()}")
        n_valid = int(torch.count_nonzero(valid))  # (a bool sum would first convert the mask: an extra copy)
    chosen = resolve_backend(backend, hidden.device, dtype=hidden.dtype)
    op = _backend_module(chosen).token_nll
    if n_valid > COMPACT_NLL_SHARE * targets.shape[0]:
        return op(hidden, weight, targets, chunk=chunk, ignore_index=ignore_index, out=out)
    # most rows unread (a window's re-read context and digest, prompt heads): the LM head, a quarter
    # of a bf16 CPU forward, runs on the scored rows only. Row results do not depend on the other rows.
    res = out if out is not None else torch.empty(targets.shape[0], dtype=torch.float32, device=hidden.device)
    res.fill_(float("nan"))
    if n_valid:
        if valid is None:
            idx = to_device(np.flatnonzero(valid_h), hidden.device)
        else:
            idx = valid.nonzero().squeeze(1)
        res[idx] = op(hidden[idx], weight, targets[idx], chunk=chunk, ignore_index=ignore_index)
    return res

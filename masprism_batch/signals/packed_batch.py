"""A packed batch's data checks, run once per batch, and its upload and binding to the chosen backend.

A forward passes the same cu_seqlens / step_ids / n_steps tensors to every instrumented layer: the checks (host
syncs on a device) run for the first layer, or from the host arrays in `bind_pack`, and the layers after it skip
them.
"""

from __future__ import annotations

import weakref

import numpy as np
import torch
from torch.utils.weak import WeakIdKeyDictionary

from masprism_batch.signals.backends import resolve_backend

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

"""The two signal ops' entry points: shape checks, the backend's choice, then one table lookup.

Every backend module has the same signatures (keyword-only options); see `reference.py` for exact shapes and
semantics.
"""

from __future__ import annotations

import numpy as np
import torch

from masprism_batch.signals.backends import _backend_module, resolve_backend
from masprism_batch.signals.packed_batch import _check_attention, to_device

COMPACT_NLL_SHARE = 0.9  # token_nll gathers the scored rows when at most this share of them is scored


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

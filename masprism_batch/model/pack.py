"""Host side of one packed forward (model/forward.py): what the host knows about a pack, built once from host arrays
and sent host->device without blocking (ids, positions, bounds, step ids and counts, the NLL rows and their
targets); the one transfer that brings the results back; the forward's clock (CUDA events, no synchronize).
docs/gpu.md "A sync-free packed forward" gives the syncs this removed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from masprism_batch import signals as sig


class PrefillTiming:
    """One forward's time: on CUDA between two events around its device work (read without a synchronize on the
    hot path: `signals` reads the results first, so the end event has completed by then), else wall time."""

    def __init__(self, sequences: int, tokens: int, with_signals: bool, clock: Clock):
        self.sequences, self.tokens, self.with_signals, self._clock = sequences, tokens, with_signals, clock

    @property
    def seconds(self) -> float:
        return self._clock.seconds()

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else float("inf")


class Clock:
    def __init__(self, device: torch.device):
        self._events = None
        if device.type == "cuda":
            self._events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            self._events[0].record()
        self._t = [time.perf_counter(), None]

    def stop(self) -> Clock:
        if self._events is not None:
            self._events[1].record()
        self._t[1] = time.perf_counter()
        return self

    def seconds(self) -> float:
        if self._events is None:
            return self._t[1] - self._t[0]
        self._events[1].synchronize()  # at once when the forward's results were read after it
        return self._events[0].elapsed_time(self._events[1]) / 1e3


@dataclass
class PackedBatch:
    ids: torch.Tensor  # [T] int64 on the device
    host_ids: np.ndarray  # [T] int64, the same ids on the host
    positions: torch.Tensor  # [T] int64 on the device, restart at 0 per sequence
    host_positions: np.ndarray
    cu_seqlens: torch.Tensor  # [B+1] int32 on the device
    bounds: list[int]
    max_seqlen: int


def packed_batch(seqs: list[list[int]], vocab_size: int, max_context: int, device: torch.device) -> PackedBatch:
    """The pack's ids, positions and bounds: host arrays, and their device copies (non-blocking from pinned memory)."""
    if not seqs:
        raise ValueError("no sequences to prefill")
    lengths = [len(s) for s in seqs]
    for b, n in enumerate(lengths):
        if n == 0 or n > max_context:
            raise ValueError(f"sequence {b} has {n} tokens; need 1..{max_context} (model context)")
    host_ids = np.fromiter((t for s in seqs for t in s), dtype=np.int64, count=sum(lengths))
    if int(host_ids.min()) < 0 or int(host_ids.max()) >= vocab_size:
        raise ValueError(f"token id out of range [0, {vocab_size})")
    bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    starts = np.repeat(np.asarray(bounds[:-1], dtype=np.int64), lengths)
    positions = np.arange(bounds[-1], dtype=np.int64) - starts
    up = sig.to_device
    return PackedBatch(ids=up(host_ids, device), host_ids=host_ids, positions=up(positions, device),
                        host_positions=positions, cu_seqlens=up(np.asarray(bounds, dtype=np.int32), device),
                        bounds=bounds, max_seqlen=max(lengths))

def host_steps(seqs, step_ids, n_steps) -> tuple[np.ndarray, list[int]]:
    """The pack's step ids [T] int32 and step counts, checked on the host."""
    if len(step_ids) != len(seqs):
        raise ValueError(f"{len(seqs)} sequences but {len(step_ids)} step_ids lists")
    for b, (s, sid) in enumerate(zip(seqs, step_ids, strict=True)):
        if len(sid) != len(s):
            raise ValueError(f"sequence {b}: {len(s)} tokens but {len(sid)} step ids")
    sid_h = np.fromiter((x for sid in step_ids for x in sid), dtype=np.int64, count=sum(map(len, step_ids)))
    if sid_h.size and int(sid_h.min()) < -1:
        raise ValueError("step ids must be >= -1")
    seen = [max(sid, default=-1) + 1 for sid in step_ids]
    n_steps = seen if n_steps is None else [int(n) for n in n_steps]
    if len(n_steps) != len(seqs):
        raise ValueError(f"{len(seqs)} sequences but {len(n_steps)} n_steps")
    if any(n < m for n, m in zip(n_steps, seen, strict=True)):
        raise ValueError(f"n_steps {n_steps} smaller than the step ids used {seen}")
    return sid_h.astype(np.int32), n_steps


def next_token_targets(batch: PackedBatch) -> np.ndarray:
    """[T] int64: position t predicts token t+1 of the same sequence; a sequence's last token predicts nothing."""
    targets = np.full(batch.bounds[-1], -100, dtype=np.int64)
    targets[:-1] = batch.host_ids[1:]
    targets[np.asarray(batch.bounds[1:], dtype=np.int64) - 1] = -100
    return targets


def nll_rows(batch: PackedBatch, sid_h: np.ndarray, nll_from: list[int] | None, steps_only: bool):
    """(rows, targets), host arrays: the hidden rows whose NLL is read and their target ids, or (None, the
    targets of every row, -100 where nothing is read) when more than COMPACT_NLL_SHARE of them are read.
    Position t predicts token t+1 of the same sequence; the last token of each predicts nothing; a token's NLL
    nobody reads (before nll_from, outside a step with steps_only) costs no LM-head row."""
    targets = next_token_targets(batch)
    unread = sid_h < 0 if steps_only else None
    if nll_from is not None:
        if len(nll_from) != len(batch.bounds) - 1:
            raise ValueError(f"{len(batch.bounds) - 1} sequences but {len(nll_from)} nll_from")
        early = batch.host_positions < np.repeat(np.asarray(nll_from, dtype=np.int64), np.diff(batch.bounds))
        unread = early if unread is None else unread | early
    if unread is not None:
        targets[:-1][unread[1:]] = -100
    rows = np.flatnonzero(targets != -100)
    if len(rows) > sig.COMPACT_NLL_SHARE * len(targets):
        return None, targets
    return rows, targets[rows]


def fetch(nll: torch.Tensor, mass) -> tuple[np.ndarray, torch.Tensor | None]:
    """The forward's results in ONE device->host transfer (its one sync): the NLL [n] fp32 and the step mass, summed
    [B, N, N] or per layer [B, Hq, N, N] (-> [B, L, Hq, N, N]), flattened into one buffer and cut on the host."""
    parts = [nll.float().reshape(-1)]
    if mass is not None:
        parts += [m.reshape(-1) for m in (mass if isinstance(mass, list) else [mass])]
    host = (torch.cat(parts) if len(parts) > 1 else parts[0]).cpu()
    n = nll.shape[0]
    if mass is None:
        return host.numpy(), None
    if not isinstance(mass, list):
        return host[:n].numpy(), host[n:].view(mass.shape)
    return host[:n].numpy(), host[n:].view(len(mass), *mass[0].shape).transpose(0, 1).contiguous()

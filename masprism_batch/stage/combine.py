"""One log's view from its windows' signals: the per-window step mass scattered into one N x N (the rule for
attention across windows is in render/windows.py, which makes the windows), token NLL over the full render.

Kept apart from the rendering: it is the first step of the attribution stage on a windowed log, and the only
place that knows how a long log's step attention is stored (dense, or row-sparse past `DENSE_STEPS` steps).
"""

from __future__ import annotations

import logging

import numpy as np

from masprism_batch.method.sparse_attn import Accumulator
from masprism_batch.render.windows import Windowed
from masprism_batch.schema import DENSE_STEPS

log = logging.getLogger(__name__)
# per-(layer, head) step attention of a combined log is kept whole up to this many cells (64 MiB in fp32):
# enough for every labelled benchmark trace (Who&When, TRAIL), while a 4,096-step log would need L x H x 16.7 M
HEADS_BUDGET = 1 << 24


def combine_windows(wd: Windowed, sigs: list, n_steps: int, head_weights=None):
    """Per-window signals -> one full-log view: token NLL over the full render, A [N, N] and (when the
    windows were read per head) A per (layer, head) [L, H, N, N] if it fits `HEADS_BUDGET`, rows normalised by
    owned query tokens. head_weights (method/heads.HeadWeights): also the learned A [N, N], applied per window
    (linear, so equal to applying it to the whole per-head A) into `step_attn_learned`.

    A (and the learned A) is a dense array up to `schema.DENSE_STEPS` steps, a row-sparse
    `sparse_attn.SparseAttn` above (exact: a query step has mass only inside its windows), so memory stays
    linear in the steps."""
    from masprism_batch.model.forward import SeqSignals

    T = len(wd.full.input_ids)
    nll = np.full(T, np.nan, dtype=np.float32)
    n = n_steps
    dense = n <= DENSE_STEPS
    raw = np.zeros((n, n), dtype=np.float64) if dense else Accumulator(n)
    counts = np.zeros(n, dtype=np.float64)
    per_head = bool(sigs) and all(s.step_attn_heads is not None for s in sigs)
    raw_h = raw_l = None
    if per_head:
        lh = sigs[0].step_attn_heads.shape[:2]
        if lh[0] * lh[1] * n * n <= HEADS_BUDGET:
            raw_h = np.zeros((*lh, n, n), dtype=np.float64)
        else:
            log.debug("%d steps: per-head step attention not kept whole (%s x %d x %d cells)", n, lh, n, n)
        if head_weights is not None:
            raw_l = np.zeros((n, n), dtype=np.float64) if dense else Accumulator(n)
    for w, s in zip(wd.windows, sigs, strict=True):
        k = w.full_end - w.full_start
        nll[w.full_start:w.full_end] = s.token_nll[w.offset:w.offset + k]
        g = np.asarray(w.steps, dtype=np.int64)
        sid = np.asarray(w.sids, dtype=np.int64)
        c = np.bincount(sid[sid >= 0], minlength=len(g)).astype(np.float64)
        at = _Scatter(g, n, c)
        at.add(raw, s.step_attn)
        counts[at.to_rows[:, 0]] += c[at.rows]
        if raw_h is not None:
            at.add(raw_h, s.step_attn_heads)
        if raw_l is not None:
            at.add(raw_l, head_weights.apply(s.step_attn_heads))
    denom = np.maximum(counts, 1.0)
    A, learned = _normalise(raw, denom), None if raw_l is None else _normalise(raw_l, denom)
    Ah = None if raw_h is None else np.divide(raw_h, denom[:, None], out=raw_h).astype(np.float32)
    return SeqSignals(token_nll=nll, step_attn=A, n_tokens=T, step_attn_heads=Ah, step_attn_learned=learned)


def _normalise(raw, denom: np.ndarray):
    """Rows divided by their owned query tokens, as float32 (in place for a dense raw: one N x N float64 at a time)."""
    if isinstance(raw, Accumulator):
        return raw.finish(denom)
    return np.divide(raw, denom[:, None], out=raw).astype(np.float32)


class _Scatter:
    """Where one window's local m x m mass goes in the log's N x N: rows of owned steps only (the queries),
    columns of owned steps and of key-only copies (N + j -> j). A step may sit in one window both as owned
    tokens and as a key-only copy (cut by the window's edge): two local columns, one log column. Within each
    group the log columns are distinct, so two fancy-index additions are exact."""

    def __init__(self, g: np.ndarray, n: int, counts: np.ndarray):
        self.rows = np.flatnonzero(g < n)
        self.own, self.key = self.rows, np.flatnonzero(g >= n)
        self.to_rows, self.to_own, self.to_key = g[self.rows][:, None], g[self.own][None, :], (g[self.key] - n)[None, :]
        self.scale = counts[self.rows][:, None]  # undoes the per-window row normalisation

    def add(self, dst, A: np.ndarray) -> None:
        Ar = A[..., self.rows, :].astype(np.float64) * self.scale
        if isinstance(dst, Accumulator):  # same values, same order as the dense additions below
            dst.add(self.to_rows, self.to_own, Ar[..., self.own])
            dst.add(self.to_rows, self.to_key, Ar[..., self.key])
            return
        dst[..., self.to_rows, self.to_own] += Ar[..., self.own]
        dst[..., self.to_rows, self.to_key] += Ar[..., self.key]

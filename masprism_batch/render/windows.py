"""Pass 1 over the whole log: windows with overlap and a digest, so every step is read in full context.

A log longer than the model's prompt is not cut to fit (the paper's pass 1 gives each step the same tiny
budget: ~30 tokens a step on a 48-step Magentic-One log at 2,048 tokens). Instead the full render (every step
complete, or cut at `window_step_cap` content tokens in the default fast setting) is read in windows of
`max_context` tokens:

    window w = [head: preamble + question] [digest] [context] [owned tokens]

- owned: each token of the full render is owned by exactly one window; its NLL and its attention as a
  query are taken there. Windows tile the log in order, so cost and memory are linear in log length.
- context: up to `window_context` tokens just before the owned ones (already owned by the previous
  window): the owned tokens' recent past, read in full.
- digest: every earlier step (entirely before the context) as its header and first
  `window_digest_step_tokens` content tokens, at most `window_digest_share` of the window (most recent steps
  kept when even headers do not fit). It is what makes attention across windows defined.

Step ids are local to a window: a window's tokens name only the steps it holds, numbered 0..m-1
(`Window.steps` maps them back: owned step i -> i, key-only copy of step j -> N + j), so the model computes an
m x m step mass per window, not the whole log's 2N x 2N, and `stage/combine.py` scatters it into one N x N: a dense
array up to `schema.DENSE_STEPS` steps, above that rows of at most a window's steps each (only steps in
a query's windows get its mass), so a log of N steps costs O(N) memory. The per-(layer, head) matrices are kept whole
only while small (`combine.HEADS_BUDGET`); with learned head weights they are applied window by window instead.

Rule for attention across windows: A[i -> j] is the mean, over the query tokens of step i (in the window that
owns them), of their attention mass on the tokens of step j *as they appear in that window* -- in full if j
is in the window (owned or context), as its digest if j is older. Step j's tokens in a digest or context
are keys only (they carry step id N + j in the prefill, so they never count as queries of step j).
A log that fits one window is read exactly as one prompt (no digest, no context): nothing changes there.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from dataclasses import dataclass

import numpy as np

from masprism_batch.config import RenderConfig
from masprism_batch.render.prompt import Rendered, _Pieces, fit_budget
from masprism_batch.trace import Trace

log = logging.getLogger(__name__)


@dataclass
class Window:
    input_ids: list[int]
    sids: list[int]  # per token its local step id 0..n_steps-1, -1 outside every step
    n_steps: int  # steps this window holds (owned and key-only copies counted apart)
    full_start: int  # owned tokens are full[full_start:full_end] ...
    full_end: int
    offset: int  # ... found at input_ids[offset:offset + (full_end - full_start)]
    steps: list[int]  # local id -> log step: owned step i -> i; key-only copy of step j -> N + j (ascending)

    def step_ids(self) -> list[int]:
        return self.sids


@dataclass
class Windowed:
    full: Rendered  # the full render (steps complete or capped): spans index the virtual full sequence
    windows: list[Window]
    head_len: int

    @property
    def input_ids(self) -> list[int]:  # what was read, for token accounting
        return [t for w in self.windows for t in w.input_ids]


def _local(ids: list[int], gsids: np.ndarray, full_start: int, full_end: int, offset: int) -> Window:
    """A window whose tokens carry log-wide ids `gsids` (owned i, key-only N + j, -1), renumbered locally."""
    used = gsids >= 0
    steps, local = np.unique(gsids[used], return_inverse=True)
    sids = np.full(len(gsids), -1, dtype=np.int64)
    sids[used] = local
    return Window(ids, sids.tolist(), len(steps), full_start, full_end, offset, steps.tolist())


def render_windows(trace: Trace, tokenizer, cfg: RenderConfig) -> Windowed:
    """The full pass-1 render of `trace` and its windows (see module docstring)."""
    p = _Pieces(trace, tokenizer, cfg, cfg.pass1_preamble)
    n = len(p.lengths)
    ids, spans, cut, text, cspans = p.assemble([cfg.window_step_cap] * n, None)
    full = Rendered(ids, spans, cut, text, p.lengths.tolist(), cfg.window_step_cap, None, cspans)
    W, head = cfg.max_context, p.head_ids
    step_of = np.full(len(ids), -1, dtype=np.int64)
    for i, (s, e) in enumerate(spans):
        step_of[s:e] = i
    if len(ids) <= W:
        return Windowed(full, [_local(list(ids), step_of, 0, len(ids), 0)], len(head))
    min_owned = max(1, W // 4)
    digest_room = int(cfg.window_digest_share * W)
    ends = [e for _, e in spans]
    # header + separator tokens of steps [0, k): the digest's fixed cost of any run of older steps, O(1) each
    fixed_cum = np.concatenate([[0], np.cumsum([len(h) + len(p.sep) for h in p.headers])])
    windows = [_local(ids[:W], step_of[:W], 0, W, 0)]
    pos = W
    while pos < len(ids):
        ctx_start = max(len(head), pos - cfg.window_context)
        n_older = bisect_right(ends, ctx_start)  # steps entirely before the context (spans are in order)
        dig_ids, dig_sids = _digest(p, n_older, n, digest_room, cfg.window_digest_step_tokens, fixed_cum)
        room = W - len(head) - len(dig_ids) - (pos - ctx_start)
        if room < min_owned:  # huge question/head: give up context before owned room
            ctx_start = pos
            room = W - len(head) - len(dig_ids)
        if room < 1:
            raise ValueError(f"trace {trace.trace_id!r}: window of {W} tokens has no room after head and digest")
        end = min(len(ids), pos + room)
        ctx_sids = np.where(step_of[ctx_start:pos] >= 0, n + step_of[ctx_start:pos], -1)
        win_ids = list(head) + dig_ids + ids[ctx_start:pos] + ids[pos:end]
        win_sids = np.concatenate([np.full(len(head), -1, dtype=np.int64), np.asarray(dig_sids, dtype=np.int64),
                                   ctx_sids, step_of[pos:end]])
        windows.append(_local(win_ids, win_sids, pos, end, len(head) + len(dig_ids) + (pos - ctx_start)))
        pos = end
    return Windowed(full, windows, len(head))


def _digest(p: _Pieces, n_older: int, n: int, room: int, per_step: int,
            fixed_cum: np.ndarray) -> tuple[list[int], list[int]]:
    """Headers + first tokens of the older steps [d, n_older) within `room` tokens, d the fewest oldest steps
    dropped so that they fit. Token step ids are log-wide key-only ids (n + j).

    Dropping a step never makes the rest harder to fit (it lowers the fixed cost and every budget's cost), so
    d is found by bisection: O(log N) budget fits of O(room) steps per window, where dropping one step at a time
    was O(N) fits of O(N) steps."""
    marker = len(p.marker)

    def budget(d: int) -> int | None:
        fixed = int(fixed_cum[n_older] - fixed_cum[d])
        return fit_budget(p.lengths[d:n_older], marker, room - fixed, per_step)

    # steps whose headers alone overflow the room never fit: start at the first d they do not (the kept steps
    # are then at most `room` headers, so each fit costs O(room), not O(N))
    lo = min(n_older, int(np.searchsorted(fixed_cum, fixed_cum[n_older] - room, side="left")))
    hi = n_older  # the answer d lies in [lo, hi]; hi = n_older: nothing fits, no digest
    while lo < hi:
        mid = (lo + hi) // 2
        if budget(mid) is not None:
            hi = mid
        else:
            lo = mid + 1
    if lo == n_older:
        return [], []
    b = budget(lo)
    ids: list[int] = []
    sids: list[int] = []
    for j in range(lo, n_older):
        c = p.contents[j]
        piece = p.headers[j] + (c[:b] + p.marker if len(c) > b else c) + p.sep
        ids += piece
        sids += [n + j] * len(piece)
    return ids, sids

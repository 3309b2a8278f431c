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

Rule for attention across windows: A[i -> j] is the mean, over the query tokens of step i (in the window that
owns them), of their attention mass on the tokens of step j *as they appear in that window* -- in full if j
is in the window (owned or context), as its digest if j is older. Step j's tokens in a digest or context
are keys only (they carry step id N + j in the prefill, so they never count as queries of step j).
A log that fits one window is read exactly as one prompt (no digest, no context): nothing changes there.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .config import RenderConfig
from .render import Rendered, _Pieces, fit_budget
from .trace import Trace


@dataclass
class Window:
    input_ids: list[int]
    sids: list[int]  # owned token of step i: i; key-only token of step j: n_steps + j; else -1
    n_steps: int  # 2 * N (owned ids and key-only ids)
    full_start: int  # owned tokens are full[full_start:full_end] ...
    full_end: int
    offset: int  # ... found at input_ids[offset:offset + (full_end - full_start)]

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
        return Windowed(full, [Window(list(ids), step_of.tolist(), 2 * n, 0, len(ids), 0)], len(head))
    min_owned = max(1, W // 4)
    digest_room = int(cfg.window_digest_share * W)
    windows = [Window(ids[:W], step_of[:W].tolist(), 2 * n, 0, W, 0)]
    pos = W
    while pos < len(ids):
        ctx_start = max(len(head), pos - cfg.window_context)
        older = [j for j, (_, e) in enumerate(spans) if e <= ctx_start]
        dig_ids, dig_sids = _digest(p, older, n, digest_room, cfg.window_digest_step_tokens)
        room = W - len(head) - len(dig_ids) - (pos - ctx_start)
        if room < min_owned:  # huge question/head: give up context before owned room
            ctx_start = pos
            room = W - len(head) - len(dig_ids)
        if room < 1:
            raise ValueError(f"trace {trace.trace_id!r}: window of {W} tokens has no room after head and digest")
        end = min(len(ids), pos + room)
        ctx = ids[ctx_start:pos]
        ctx_sids = [n + int(s) if s >= 0 else -1 for s in step_of[ctx_start:pos]]
        win_ids = list(head) + dig_ids + ctx + ids[pos:end]
        win_sids = [-1] * len(head) + dig_sids + ctx_sids + step_of[pos:end].tolist()
        windows.append(Window(win_ids, win_sids, 2 * n, pos, end, len(head) + len(dig_ids) + len(ctx)))
        pos = end
    return Windowed(full, windows, len(head))


def _digest(p: _Pieces, older: list[int], n: int, room: int, per_step: int) -> tuple[list[int], list[int]]:
    """Headers + first tokens of the `older` steps within `room` tokens; drops the oldest while headers alone
    do not fit. Token step ids are key-only (n + j)."""
    marker = len(p.marker)
    while older:
        fixed = sum(len(p.headers[j]) + len(p.sep) for j in older)
        b = fit_budget(p.lengths[older], marker, room - fixed, per_step)
        if b is not None:
            break
        older = older[1:]
    ids: list[int] = []
    sids: list[int] = []
    for j in older:
        c = p.contents[j]
        piece = p.headers[j] + (c[:b] + p.marker if len(c) > b else c) + p.sep
        ids += piece
        sids += [n + j] * len(piece)
    return ids, sids


def combine(wd: Windowed, sigs: list, n_steps: int):
    """Per-window signals -> one full-log view: token NLL over the full render, A [N, N] and (when the
    windows were read per head) A per (layer, head) [L, H, N, N], rows normalised by owned query tokens."""
    from .model.forward import SeqSignals

    T = len(wd.full.input_ids)
    nll = np.full(T, np.nan, dtype=np.float32)
    n = n_steps
    raw = np.zeros((n, n), dtype=np.float64)
    raw_h = None
    counts = np.zeros(n, dtype=np.float64)
    for w, s in zip(wd.windows, sigs, strict=True):
        k = w.full_end - w.full_start
        nll[w.full_start:w.full_end] = s.token_nll[w.offset:w.offset + k]
        sid = np.asarray(w.sids)
        c = np.bincount(sid[sid >= 0], minlength=2 * n)[: 2 * n].astype(np.float64)
        A = s.step_attn.astype(np.float64) * c[:, None]  # undo the per-window row normalisation
        raw += A[:n, :n] + A[:n, n:]
        counts += c[:n]
        if s.step_attn_heads is not None:
            Ah = s.step_attn_heads.astype(np.float64) * c[None, None, :, None]
            Ah = Ah[:, :, :n, :n] + Ah[:, :, :n, n:]
            raw_h = Ah if raw_h is None else raw_h + Ah
    denom = np.maximum(counts, 1.0)
    A = (raw / denom[:, None]).astype(np.float32)
    Ah = None if raw_h is None else (raw_h / denom[None, None, :, None]).astype(np.float32)
    return SeqSignals(token_nll=nll, step_attn=A, n_tokens=T, step_attn_heads=Ah)

"""Render a trace into model input ids with one header per step, and record each step's token span.

Layout (every piece is tokenized on its own and the ids are concatenated, so spans are exact):

    [BOS]  preamble  [question]  \\n
    [note]                        (pass 2 only, just before the earliest symptom step; outside every span)
    header_i \\n  content_i [ " [...]" ]  \\n\\n      <- span of step i = header + content + marker + separator

Truncation policies (token counts are content tokens; the marker costs its own tokens on top):
- pass 1: one budget b for every step, the largest that fits the trace into `max_context`, capped at
  `step_budget_cap`. If even b = 1 does not fit (thousands of steps), `TraceTooLong` is raised; the caller
  turns it into an error row.
- pass 2: steps in `keep_full` complete, others cut to `pass2_prefix_tokens`. When that does not fit:
  (a) key steps share what is left by one water level (equal budget, short ones stay whole) as long as that
      level is >= the prefix of the others;
  (b) otherwise key steps are reserved `pass2_key_share` of the content room (or all they need, if less),
      the other steps get the largest common prefix that fits in the rest, then key steps the largest level
      that fits;
  (c) if (b) would leave key steps shorter than the others, every step gets one common budget (as in pass 1,
      capped at the prefix); if even 1 token per step does not fit, `TraceTooLong`.
- The question (task text, not a label) is cut to `question_max_tokens`.
BOS: prepended iff the tokenizer adds `bos_token_id` by default (e.g. Llama); Qwen/SmolLM2 add none.
`text` is for humans (cut contents are decoded from their kept ids); `input_ids` are what the model sees.
`content_spans` leave out header and separator, for callers that want a content-only step NLL.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from masprism_batch.config import RenderConfig
from masprism_batch.render.encoding import encoder_for
from masprism_batch.trace import Trace

log = logging.getLogger(__name__)

SEPARATOR = "\n\n"  # after each step


class TraceTooLong(ValueError):
    """The trace cannot fit `max_context` even with one content token per step."""

    reason = "trace_too_long"

    def __init__(self, trace_id: str, n_steps: int, min_tokens: int, max_context: int):
        self.trace_id, self.n_steps, self.min_tokens, self.max_context = trace_id, n_steps, min_tokens, max_context
        super().__init__(f"trace {trace_id!r}: {n_steps} steps need at least {min_tokens} tokens "
                         f"(headers + 1 content token each) > max_context {max_context}")

    def __reduce__(self):  # picklable across Ray workers despite the custom signature
        return (type(self), (self.trace_id, self.n_steps, self.min_tokens, self.max_context))


@dataclass
class Rendered:
    input_ids: list[int]
    step_spans: list[tuple[int, int]]  # per trace step: [start, end) over header + content + marker + separator
    step_truncated: list[bool]
    text: str
    step_content_tokens: list[int] = field(default_factory=list)  # uncut content length of each step
    budget: int | None = None  # pass 1: the equal step budget b; pass 2: the prefix kept of non-key steps
    key_budget: int | None = None  # pass 2: budget of key steps (None: complete)
    content_spans: list[tuple[int, int]] = field(default_factory=list)  # per step: kept content (+ marker) only

    def step_ids(self) -> list[int]:
        """Per token: the step (position in the trace) it belongs to, -1 outside every step."""
        out = [-1] * len(self.input_ids)
        for i, (s, e) in enumerate(self.step_spans):
            out[s:e] = [i] * (e - s)
        return out


def _cost(lengths: np.ndarray, b: int | None, marker: int) -> int:
    """Content tokens of steps cut to budget b (None: complete): c if c <= b else b + marker."""
    if b is None or lengths.size == 0:
        return int(lengths.sum())
    return int(np.where(lengths <= b, lengths, b + marker).sum())


def fit_budget(lengths: np.ndarray, marker: int, available: int, cap: int) -> int | None:
    """Largest b in [1, cap] with `_cost(lengths, b) <= available`, None if none.

    Cost is not monotone in b (cutting a step one token short adds the marker), so every b is evaluated.
    """
    if lengths.size == 0:
        return max(1, cap) if available >= 0 else None
    cap = max(1, min(cap, int(lengths.max())))  # beyond the longest step nothing changes
    c = np.sort(lengths)
    prefix = np.concatenate([[0], np.cumsum(c)])
    b = np.arange(1, cap + 1)
    k = np.searchsorted(c, b, side="right")  # steps with c <= b stay whole
    total = prefix[k] + (c.size - k) * (b + marker)
    ok = np.flatnonzero(total <= available)
    return int(b[ok[-1]]) if ok.size else None


def _one_line(agent: str | None) -> str:
    return " ".join((agent or "unknown").split()) or "unknown"


class _Pieces:
    """Tokenized building blocks of one trace under one config (shared by both passes)."""

    def __init__(self, trace: Trace, tokenizer, cfg: RenderConfig, preamble: str):
        if cfg.max_context < 1 or cfg.step_budget_cap < 1 or cfg.pass2_prefix_tokens < 1:
            raise ValueError("max_context, step_budget_cap and pass2_prefix_tokens must be >= 1")
        self.enc = encoder_for(tokenizer)
        self.trace, self.cfg = trace, cfg
        try:
            headers = [cfg.header_template.format(index=s.index, agent=_one_line(s.agent)) + "\n" for s in trace.steps]
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"render.header_template {cfg.header_template!r} may only use {{index}} and {{agent}}") from exc
        contents = [s.content or "" for s in trace.steps]
        marker = " " + cfg.truncation_marker
        pre_q, _, post_q = cfg.question_template.partition("{question}")
        consts = [preamble, marker, SEPARATOR, cfg.anomaly_note, pre_q, post_q + "\n", "\n"]
        ids = self.enc.encode(consts + headers + contents)
        (self.preamble, self.marker, self.sep, self.note, self.pre_q, self.post_q, self.nl), rest = ids[:7], ids[7:]
        self.headers, self.contents = rest[: len(headers)], rest[len(headers):]
        self.header_texts, self.content_texts, self.marker_text, self.preamble_text = headers, contents, marker, preamble
        self.lengths = np.array([len(c) for c in self.contents], dtype=np.int64)
        self.head_ids, self.head_text = self._head(pre_q, post_q)

    def _head(self, pre_q: str, post_q: str) -> tuple[list[int], str]:
        ids, text = self.enc.bos + self.preamble, self.preamble_text
        q = self.trace.question
        if q:
            (qids,) = self.enc.encode([q])
            cut = len(qids) > self.cfg.question_max_tokens
            qids = qids[: self.cfg.question_max_tokens] + (self.marker if cut else [])
            qtext = (self.enc.decode(qids[: self.cfg.question_max_tokens]) + self.marker_text) if cut else q
            ids, text = ids + self.pre_q + qids + self.post_q, text + pre_q + qtext + post_q + "\n"
        else:
            ids, text = ids + self.nl, text + "\n"
        return ids, text

    def fixed(self, note: bool) -> int:
        """Tokens that do not depend on the budgets: BOS, preamble, question, headers, separators, note."""
        n = len(self.head_ids) + sum(len(h) for h in self.headers) + len(self.sep) * len(self.headers)
        return n + (len(self.note) if note else 0)

    def too_long(self, note: bool) -> TraceTooLong:
        minimum = self.fixed(note) + _cost(self.lengths, 1, len(self.marker))
        return TraceTooLong(self.trace.trace_id, len(self.lengths), minimum, self.cfg.max_context)

    def assemble(self, budgets: list[int | None], note_before: int | None) -> tuple:
        ids, texts = list(self.head_ids), [self.head_text]
        spans, content_spans, cut_flags = [], [], []
        for i, b in enumerate(budgets):
            if i == note_before:
                ids += self.note
                texts.append(self.cfg.anomaly_note)
            start = len(ids)
            content = self.contents[i]
            cut = b is not None and len(content) > b
            ids += self.headers[i]
            texts.append(self.header_texts[i])
            body = len(ids)
            if cut:
                ids += content[:b] + self.marker
                texts.append(self.enc.decode(content[:b]) + self.marker_text)
            else:
                ids += content
                texts.append(self.content_texts[i])
            content_spans.append((body, len(ids)))
            ids += self.sep
            texts.append(SEPARATOR)
            spans.append((start, len(ids)))
            cut_flags.append(cut)
        return ids, spans, cut_flags, "".join(texts), content_spans


def render_pass1(trace: Trace, tokenizer, cfg: RenderConfig) -> Rendered:
    """Pass 1: every step cut to one budget, the largest that fits `max_context` (capped)."""
    p = _Pieces(trace, tokenizer, cfg, cfg.pass1_preamble)
    b = fit_budget(p.lengths, len(p.marker), cfg.max_context - p.fixed(False), cfg.step_budget_cap)
    if b is None:
        raise p.too_long(False)
    ids, spans, cut, text, cspans = p.assemble([b] * len(p.lengths), None)
    log.debug("pass 1 %s: %d steps, budget %d, %d tokens", trace.trace_id, len(spans), b, len(ids))
    return Rendered(ids, spans, cut, text, p.lengths.tolist(), b, None, cspans)


def _pass2_budgets(p: _Pieces, keys: np.ndarray, avail: int) -> tuple[int, int | None]:
    """(prefix of other steps, budget of key steps or None = complete); see the module docstring."""
    cfg, m = p.cfg, len(p.marker)
    ck, co = p.lengths[keys], p.lengths[~keys]
    prefix = cfg.pass2_prefix_tokens
    kmax = int(ck.max()) if ck.size else 1
    cost_o = _cost(co, prefix, m)
    if cost_o + int(ck.sum()) <= avail:
        return prefix, None
    if cost_o <= avail:
        bk = fit_budget(ck, m, avail - cost_o, kmax)
        if bk is not None and bk >= prefix:  # (a)
            return prefix, bk
    reserve = min(int(ck.sum()), int(cfg.pass2_key_share * avail))  # (b)
    bo = fit_budget(co, m, avail - reserve, prefix) if co.size else prefix
    bk = fit_budget(ck, m, avail - _cost(co, bo, m), kmax) if bo is not None else None
    if bo is not None and bk is not None and bk >= bo:
        return bo, (None if bk >= kmax else bk)
    b = fit_budget(p.lengths, m, avail, prefix)  # (c)
    if b is None:
        raise p.too_long(True)
    return b, (None if b >= kmax else b)  # a budget no key step exceeds cuts none: they are complete


def render_pass2(trace: Trace, tokenizer, cfg: RenderConfig, keep_full: set[int], anomaly_step: int | None) -> Rendered:
    """Pass 2: key steps complete (subject to the context), others cut to a prefix, a note before the symptom."""
    n = len(trace.steps)
    bad = sorted(k for k in keep_full if not 0 <= k < n)
    if bad or (anomaly_step is not None and not 0 <= anomaly_step < n):
        raise ValueError(f"trace {trace.trace_id!r} has {n} steps: keep_full {bad} / anomaly_step {anomaly_step} out of range")
    p = _Pieces(trace, tokenizer, cfg, cfg.pass2_preamble)
    keys = np.zeros(n, dtype=bool)
    keys[list(keep_full)] = True
    avail = cfg.max_context - p.fixed(anomaly_step is not None)
    if avail < 0:
        raise p.too_long(anomaly_step is not None)
    bo, bk = _pass2_budgets(p, keys, avail)
    ids, spans, cut, text, cspans = p.assemble([bk if keys[i] else bo for i in range(n)], anomaly_step)
    log.debug("pass 2 %s: %d key steps (budget %s), prefix %d, %d tokens", trace.trace_id, int(keys.sum()), bk, bo, len(ids))
    return Rendered(ids, spans, cut, text, p.lengths.tolist(), bo, bk, cspans)

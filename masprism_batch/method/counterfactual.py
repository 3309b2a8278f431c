"""Counterfactuals by prefill: how much later steps' surprise depends on a candidate step (zero decoded tokens).

For a candidate c of the pass-2 prompt, its content is replaced by a neutral placeholder (its header stays,
so the log keeps its shape) and the rest of the prompt is re-read from there, reusing the K/V cache of the
unchanged prefix (`PrefillModel.suffix_nll`): the cost is the tokens from c to the last step scored, not a
pass. The effect on step k is D[k, c] = mean content NLL of k with c removed - the same in the real prompt.
D > 0: step k was easier to predict with c present, i.e. k depends on c (ContextCite's ablation signal;
AT2 fits attention heads to predict it, see heads.py). Only steps after c, up to `last`, are scored.

`effects` re-reads one candidate at a time (`PrefillModel.suffix_nll`): the reference. `effects_batch`
(what the model stage runs) builds every candidate's suffix of several traces first and sends them through
the model as packed batches on their prompts' cached K/V (model/suffix.py), scoring only the steps asked for
(the verdict reads the symptoms' rows only: `symptom_effect`); same D to float tolerance
(tests/method/test_counterfactual.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from masprism_batch.render import buckets

log = logging.getLogger(__name__)

PLACEHOLDER = "[content removed]"


def _span_mean(nll: np.ndarray, s: int, e: int) -> float:
    v = nll[s:e]
    v = v[np.isfinite(v)]
    return float(v.mean()) if v.size else float("nan")


def effects(model, rendered, base, candidates: list[int], last: int, placeholder_ids: list[int]) -> np.ndarray:
    """D [N, N] (nan where not measured): D[k, c] for each candidate c and each step c < k <= last.

    rendered: the pass-2 `Rendered` (content_spans index its input_ids); base: its SeqSignals with `kv`.
    """
    spans = rendered.content_spans
    n = len(spans)
    D = np.full((n, n), np.nan, dtype=np.float32)
    if base.kv is None:
        raise ValueError("counterfactual effects need the prompt's K/V cache (signals(..., keep_kv=True))")
    ids = rendered.input_ids
    for c in candidates:
        if not 0 <= c < last < n:
            continue
        cs, ce = spans[c]
        end = rendered.step_spans[last][1]
        if cs >= ce or cs < 1:
            continue
        suffix = list(placeholder_ids) + ids[ce:end]
        nll = model.suffix_nll(base.kv, cs, suffix)
        shift = cs + len(placeholder_ids) - ce  # position in suffix = position in prompt - ce + cs + len(ph)
        for k in range(c + 1, last + 1):
            ks, ke = spans[k]
            if ks >= ke:
                continue
            new = _span_mean(nll, ks + shift - cs, ke + shift - cs)
            old = _span_mean(base.token_nll, ks, ke)
            if np.isfinite(new) and np.isfinite(old):
                D[k, c] = new - old
    return D


@dataclass
class Request:
    """One trace's counterfactuals: its pass-2 `Rendered`, the SeqSignals of that prompt (with `kv`), the
    candidates to remove, the last step scored, and the steps k whose D[k, c] is wanted (None: every step
    c < k <= last; the verdict reads the symptoms only)."""

    rendered: object
    base: object
    candidates: list[int]
    last: int
    rows: list[int] | None = None


def _jobs(req: Request, ph: list[int]):
    """[(c, SuffixJob, [k...])] of one request: the suffix of each candidate and the steps it scores."""
    from masprism_batch.model.suffix import SuffixJob

    if req.base.kv is None:
        raise ValueError("counterfactual effects need the prompt's K/V cache (signals(..., keep_kv=True))")
    r, spans = req.rendered, req.rendered.content_spans
    n, out = len(spans), []
    for c in req.candidates:
        if not 0 <= c < req.last < n:
            continue
        cs, ce = spans[c]
        if cs >= ce or cs < 1:
            continue
        ks_ = [k for k in range(c + 1, req.last + 1) if (req.rows is None or k in req.rows) and spans[k][0] < spans[k][1]]
        if not ks_:
            continue
        off = len(ph) - ce  # suffix position = prompt position + off
        end = r.step_spans[req.last][1]
        score = [(spans[k][0] + off, spans[k][1] + off) for k in ks_]
        out.append((c, SuffixJob(req.base.kv, cs, list(ph) + r.input_ids[ce:end], score), ks_))
    return out


def _fill(D, req: Request, c: int, ks_: list[int], nll: np.ndarray, off: int) -> None:
    spans = req.rendered.content_spans
    for k in ks_:
        ks, ke = spans[k]
        new, old = _span_mean(nll, ks + off, ke + off), _span_mean(req.base.token_nll, ks, ke)
        if np.isfinite(new) and np.isfinite(old):
            D[k, c] = new - old


def effects_batch(model, requests: list[Request], placeholder_ids: list[int], token_budget: int,
                  stats: dict | None = None) -> list[np.ndarray | Exception]:
    """D per request as `effects` gives it (only the `rows` asked for), with every candidate suffix of every
    request packed into batches of at most `token_budget` suffix tokens. A request whose jobs fail (alone
    after a failed batch is retried request by request) gets the exception instead of D. stats, when given,
    gets "suffixes" and "tokens" (suffix tokens read)."""
    from masprism_batch.model.suffix import suffix_nll_batch

    out: list = [None] * len(requests)
    jobs = []  # (request index, c, job, ks)
    for q, req in enumerate(requests):
        n = len(req.rendered.content_spans)
        out[q] = np.full((n, n), np.nan, dtype=np.float32)
        try:
            jobs += [(q, c, job, ks_) for c, job, ks_ in _jobs(req, placeholder_ids)]
        except Exception as exc:  # noqa: BLE001 - that trace only loses the feature
            out[q] = exc

    def run(idx: list[int]) -> None:
        nlls = suffix_nll_batch(model, [jobs[i][2] for i in idx])
        for i, nll in zip(idx, nlls, strict=True):
            q, c, job, ks_ = jobs[i]
            _fill(out[q], requests[q], c, ks_, nll, len(placeholder_ids) - requests[q].rendered.content_spans[c][1])

    if stats is not None:
        stats.update(suffixes=len(jobs), tokens=sum(len(j[2]) for j in jobs))
    for group in buckets.pack([len(j[2]) for j in jobs], token_budget):
        try:
            run(group)
        except Exception as exc:  # noqa: BLE001 - e.g. out of memory: retry each request's jobs alone
            log.warning("counterfactual batch of %d suffixes failed (%s): retrying per trace", len(group), exc)
            for q in sorted({jobs[i][0] for i in group}):
                try:
                    run([i for i in group if jobs[i][0] == q])
                except Exception as exc2:  # noqa: BLE001
                    out[q] = exc2
    return out


def symptom_effect(D: np.ndarray, symptoms: list[int]) -> np.ndarray:
    """Per step c: mean effect of removing c over the symptoms after it (nan when c was not ablated)."""
    n = D.shape[0]
    out = np.full(n, np.nan, dtype=np.float64)
    for c in range(n):
        vals = [D[m, c] for m in symptoms if m > c and np.isfinite(D[m, c])]
        if vals:
            out[c] = float(np.mean(vals))
    return out

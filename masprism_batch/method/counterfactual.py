"""Counterfactuals by prefill: how much later steps' surprise depends on a candidate step (zero decoded tokens).

For a candidate c of the pass-2 prompt, its content is replaced by a neutral placeholder (its header stays,
so the log keeps its shape) and the rest of the prompt is re-read from there, reusing the K/V cache of the
unchanged prefix (`PrefillModel.suffix_nll`): the cost is the tokens from c to the last step scored, not a
pass. The effect on step k is D[k, c] = mean content NLL of k with c removed - the same in the real prompt.
D > 0: step k was easier to predict with c present, i.e. k depends on c (ContextCite's ablation signal;
AT2 fits attention heads to predict it, see heads.py). Only steps after c, up to `last`, are scored.
"""

from __future__ import annotations

import logging

import numpy as np

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


def symptom_effect(D: np.ndarray, symptoms: list[int]) -> np.ndarray:
    """Per step c: mean effect of removing c over the symptoms after it (nan when c was not ablated)."""
    n = D.shape[0]
    out = np.full(n, np.nan, dtype=np.float64)
    for c in range(n):
        vals = [D[m, c] for m in symptoms if m > c and np.isfinite(D[m, c])]
        if vals:
            out[c] = float(np.mean(vals))
    return out

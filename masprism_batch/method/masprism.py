"""MASPrism's two passes on prefill signals (docs/method.md; /shared method doc).

Pure functions over numpy arrays: knows nothing of models, kernels or files. The engine (`stage/attribute.py`) runs the
prefills and hands over, per pass, the step NLLs N_i and the step attention matrix A[i->j] (a dense array, or
row-sparse for a long log: method/sparse_attn.py).
Determinism: every sort is stable with the step index as the final tie-break.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from masprism_batch.config import MethodConfig
from masprism_batch.method.sparse_attn import row_of


def failure_word_regex(words: tuple[str, ...]) -> re.Pattern[str]:
    # word boundaries so "error" matches "Error:" and "errors" but "terror" does not
    alts = "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))
    return re.compile(rf"\b(?:{alts})", re.IGNORECASE)


def step_nll(token_nll: np.ndarray, spans: list[tuple[int, int]]) -> np.ndarray:
    """N_i = mean token NLL over step i's tokens (the first token of a sequence has none and is skipped)."""
    out = np.full(len(spans), np.nan, dtype=np.float64)
    for i, (s, e) in enumerate(spans):
        vals = token_nll[s:e]
        vals = vals[np.isfinite(vals)]
        if vals.size:
            out[i] = float(vals.mean())
    return out


def n_symptoms(n_steps: int, ratio: float) -> int:
    return max(1, min(n_steps, int(math.floor(ratio * n_steps + 0.5))))


def select_symptoms(nll: np.ndarray, has_failure_word: np.ndarray, ratio: float) -> list[int]:
    """Rank by N_i descending, failure-word steps first, keep the top `ratio` (at least one)."""
    n = len(nll)
    key_nll = np.where(np.isfinite(nll), nll, -np.inf)
    order = sorted(range(n), key=lambda i: (not has_failure_word[i], -key_nll[i], i))
    return sorted(order[: n_symptoms(n, ratio)])


def inflow(A, symptoms: list[int]) -> np.ndarray:
    """H_k = sum over symptoms m > k of A[m->k] (A dense, or row-sparse: sparse_attn.SparseAttn)."""
    n = A.shape[0]
    H = np.zeros(n, dtype=np.float64)
    if isinstance(A, np.ndarray):
        for m in symptoms:
            H[:m] += A[m, :m]
        return H
    for m in symptoms:  # the cells left out are 0, and H + 0.0 is H: the same sums as the dense loop
        c, v = A.row(m)
        keep = c < m
        H[c[keep]] += v[keep]  # a row's columns are distinct
    return H


def select_candidates(H: np.ndarray, symptoms: list[int], k: int) -> list[int]:
    if not symptoms:
        return []
    last = max(symptoms)
    eligible = [i for i in range(last)]  # only steps before some symptom
    eligible.sort(key=lambda i: (-H[i], i))
    return eligible[:k]


@dataclass
class Pass1Result:
    nll: np.ndarray
    symptoms: list[int]
    h_score: np.ndarray
    candidates: list[int]

    @property
    def anomaly_step(self) -> int | None:
        return min(self.symptoms) if self.symptoms else None

    @property
    def keep_full(self) -> set[int]:
        return set(self.symptoms) | set(self.candidates)


@dataclass
class Ranking:
    ranked: list[int]  # candidate steps, best first
    scores: dict[int, float]
    support: dict[int, list[int]]  # candidate -> symptoms m > k with positive s(k|m)
    symptoms: list[int]  # M'
    nll: np.ndarray | None = None  # N'
    notes: list[str] = field(default_factory=list)


def pass1(token_nll, spans, A, has_failure_word, ratio: float, cfg: MethodConfig) -> Pass1Result:
    nll = step_nll(token_nll, spans)
    symptoms = select_symptoms(nll, has_failure_word, ratio)
    H = inflow(A, symptoms)
    return Pass1Result(nll, symptoms, H, select_candidates(H, symptoms, cfg.top_k_candidates))


def rank_pass1_only(p1: Pass1Result) -> Ranking:
    """Ablation 'pass 1 alone': candidates ranked by attention inflow H_k."""
    ranked = sorted(p1.candidates, key=lambda i: (-p1.h_score[i], i))
    return Ranking(ranked, {i: float(p1.h_score[i]) for i in ranked}, {i: [] for i in ranked}, p1.symptoms, p1.nll)


def pass2(token_nll, spans, A, has_failure_word, ratio: float, candidates: list[int], cfg: MethodConfig) -> Ranking:
    nll = step_nll(token_nll, spans)
    symptoms = select_symptoms(nll, has_failure_word, ratio)
    n = A.shape[0]
    fuse = {k: 0.0 for k in candidates}
    support: dict[int, list[int]] = {k: [] for k in candidates}
    votes = dict.fromkeys(candidates, 0)
    # symptom by symptom (one dense row at a time, whatever A's storage); each candidate's sum still runs over
    # the symptoms in order, so the scores are those of a candidate-by-candidate loop
    for m in symptoms:
        ks = [k for k in candidates if k < m < n]
        if not ks:
            continue
        row = row_of(A, m)
        # by attention descending, ties by step: a stable argsort of -A is that order, without a Python sort
        top = set(np.argsort(-row[:m], kind="stable")[: cfg.top_attention_targets].tolist())
        mean_prev = float(row[:m].mean())
        for k in ks:
            if mean_prev <= 0 or not np.isfinite(nll[m]) or not np.isfinite(nll[k]):
                continue
            s = (row[k] / mean_prev) * (1.0 + max(0.0, nll[m] - nll[k]))
            fuse[k] += s
            if s > 0:
                support[k].append(m)
            votes[k] += k in top
    scores = {k: fuse[k] * (1.0 + cfg.vote_weight * votes[k]) for k in candidates}
    ranked = sorted(candidates, key=lambda i: (-scores[i], i))
    return Ranking(ranked, scores, support, symptoms, nll)


def fallback_ranking(p1: Pass1Result) -> Ranking:
    """No candidate precedes any symptom (e.g. the only symptom is step 0): blame the earliest symptom."""
    first = min(p1.symptoms) if p1.symptoms else 0
    return Ranking([first], {first: 0.0}, {first: []}, p1.symptoms, p1.nll, ["no candidate before a symptom"])

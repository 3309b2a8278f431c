"""MASPrism's two passes on prefill signals (docs/method.md; /shared method doc).

Pure functions over numpy arrays: knows nothing of models, kernels or files. The engine (`model_stage.py`) runs the
prefills and hands over, per pass, the step NLLs N_i and the step attention matrix A[i->j].
Determinism: every sort is stable with the step index as the final tie-break.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from masprism_batch.config import MethodConfig


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


def inflow(A: np.ndarray, symptoms: list[int]) -> np.ndarray:
    """H_k = sum over symptoms m > k of A[m->k]."""
    n = A.shape[0]
    H = np.zeros(n, dtype=np.float64)
    for m in symptoms:
        H[:m] += A[m, :m]
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
    top_targets: dict[int, set[int]] = {}
    for m in symptoms:
        prev = sorted(range(m), key=lambda j: (-A[m, j], j))
        top_targets[m] = set(prev[: cfg.top_attention_targets])
    scores, support = {}, {}
    for k in candidates:
        fuse, sup, votes = 0.0, [], 0
        for m in symptoms:
            if m <= k or m >= n:
                continue
            mean_prev = float(A[m, :m].mean())
            if mean_prev <= 0 or not np.isfinite(nll[m]) or not np.isfinite(nll[k]):
                continue
            s = (A[m, k] / mean_prev) * (1.0 + max(0.0, nll[m] - nll[k]))
            fuse += s
            if s > 0:
                sup.append(m)
            votes += k in top_targets[m]
        scores[k] = fuse * (1.0 + cfg.vote_weight * votes)
        support[k] = sup
    ranked = sorted(candidates, key=lambda i: (-scores[i], i))
    return Ranking(ranked, scores, support, symptoms, nll)


def fallback_ranking(p1: Pass1Result) -> Ranking:
    """No candidate precedes any symptom (e.g. the only symptom is step 0): blame the earliest symptom."""
    first = min(p1.symptoms) if p1.symptoms else 0
    return Ranking([first], {first: 0.0}, {first: []}, p1.symptoms, p1.nll, ["no candidate before a symptom"])

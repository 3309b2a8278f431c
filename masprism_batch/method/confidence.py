"""Confidence from a verdict's own evidence: how clearly this log's signals single out the
blamed step, mapped to P(the blamed step is right) by a logistic calibration (method/calibrate.py).

A raw top score alone (the rule's top share, a ranker's top probability) barely ranked verdicts within a system
(AUROC 0.50-0.59 held out). The features below describe the verdict's evidence in units that mean
the same on any system, so a calibration fitted on some systems can rank the verdicts of another:

- top_share: the blamed step's share of the scores that ordered the candidates (MASPrism's Score for the
  zero-training rule, step probabilities for a fitted ranker);
- margin: how far the blamed step is ahead of the next, relative to its own score;
- support: the share of the symptoms after the blamed step whose pass-1 attention puts it among their top-5
  targets (the symptoms that point at it);
- nll_contrast: the symptoms' mean step NLL minus the blamed step's, in units of the log's NLL spread (a
  surprising symptom downstream of an unsurprising step is the paper's pattern);
- log_steps, log_candidates: how many places the failure could be (a guess among 3 steps is right 1 time in 3).

The calibration (calibrate.fit_evidence, applied by verdict/confidence.py) floors the result at 1/n for a log of n steps.
"""

from __future__ import annotations

import math

import numpy as np

from masprism_batch.method.sparse_attn import full_row

FEATURES = ("top_share", "margin", "support", "nll_contrast", "log_steps", "log_candidates")
# the direction each feature may move the confidence, fixed a priori by what it means (calibrate.fit_evidence
# drops a feature whose weight comes out the other way): clearer evidence up, more places to look down
SIGNS = {"top_share": 1, "margin": 1, "support": 1, "nll_contrast": 1, "log_steps": -1, "log_candidates": -1}
TOP_TARGETS = 5  # a symptom "points at" a step among its five strongest attention targets (the paper's V_k)


def step_nll(rows: list[dict]) -> np.ndarray:
    """Pass-2 NLL where pass 2 read the step, else pass 1 (every step has one)."""
    out = []
    for r in rows:
        v = r.get("nll_pass2")
        v = r.get("nll_pass1") if v is None or not math.isfinite(v) else v
        out.append(np.nan if v is None else float(v))
    return np.asarray(out, dtype=np.float64)


def evidence(n_steps: int, rows: list[dict], order: list[int], scores=None) -> dict[str, float]:
    """The features of one verdict: `order` the steps best first (order[0] blamed), `scores` the values that
    ordered them (a step -> score mapping or an array over steps; None: MASPrism's Score from `rows`)."""
    if scores is None:
        scores = {r["step"]: max(float(r.get("score") or 0.0), 0.0) for r in rows}
    s = (lambda k: float(scores[k])) if isinstance(scores, np.ndarray) else (lambda k: float(scores.get(k, 0.0)))
    cands = [k for k in order if s(k) > 0] or order[:1]
    top = order[0]
    tot = sum(s(k) for k in cands)
    share = s(top) / tot if tot > 0 else 1.0 / max(len(cands), 1)
    second = s(order[1]) if len(order) > 1 else 0.0
    margin = (s(top) - second) / s(top) if s(top) > 0 else 0.0
    symptoms = [r["step"] for r in rows if r.get("is_symptom") and r["step"] > top]
    points, is_symptom = 0, set(symptoms)  # a set: a long log has thousands of symptoms
    for r in rows:
        if r["step"] in is_symptom:
            row = full_row(r.get("attention_pass1"), r["step"])[: r["step"]]
            if row.size and top < row.size:
                points += top in np.argsort(-row, kind="stable")[:TOP_TARGETS]
    nll = step_nll(rows)
    sd = float(np.nanstd(nll)) if np.isfinite(nll).sum() > 1 else 0.0
    sym_nll = nll[symptoms] if symptoms else np.array([])
    contrast = (float(np.nanmean(sym_nll)) - nll[top]) / sd if sd > 1e-9 and np.isfinite(sym_nll).any() \
        and np.isfinite(nll[top]) else 0.0
    return {"top_share": share, "margin": margin, "support": points / len(symptoms) if symptoms else 0.0,
            "nll_contrast": float(np.clip(contrast, -5, 5)), "log_steps": math.log(max(n_steps, 1)),
            "log_candidates": math.log1p(len(cands))}


def vector(feats: dict[str, float], names=FEATURES) -> np.ndarray:
    return np.array([feats[f] for f in names], dtype=np.float64)


def auroc(conf, hits) -> float | None:
    """Area under the ROC curve of `conf` against `hits` (ties count half); None without both outcomes."""
    pairs = [(float(c), bool(h)) for c, h in zip(conf, hits, strict=True) if c is not None and h is not None]
    pos = [c for c, h in pairs if h]
    neg = [c for c, h in pairs if not h]
    if not pos or not neg:
        return None
    p, q = np.asarray(pos)[:, None], np.asarray(neg)[None, :]
    return float(((p > q).sum() + 0.5 * (p == q).sum()) / (len(pos) * len(neg)))

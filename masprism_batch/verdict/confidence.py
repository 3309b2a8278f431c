"""A verdict's confidence at run time: P(the blamed step is right) under the calibration that applies to it.

- a log of an unfitted system: the zero-training confidence, its own evidence (method/confidence.py) under the
  packaged fallback calibration (`confidence`, never below 1/steps);
- a log of a fitted system: its entry's calibration (`apply`): kind "fitted" reads the verdict features its
  file names (`features`: FEATURES, how clearly the log's signals single out the blamed step, how much of the
  ranker's probability it holds and its log-odds over the next step; files of the first issue-48 round read
  the gap between the first two steps and whether ranker and rule agree, still computed), kind "evidence" the
  verdict's own evidence (files written before issue 48), kind "ranked" (`fit` since issue 59) the same
  features as "fitted", their score placed among the fit's held-out verdicts' scores (`ranked_confidence`).

The calibrations are fitted offline: method/calibrate.py (fit_evidence, fit_monotone) and
fit/verdict_confidence.py (a fitted system's calibration over FEATURES, equal weights, on its held-out folds).
"""

from __future__ import annotations

import math

import numpy as np

from masprism_batch.method import confidence as cf
from masprism_batch.method import masprism as mp
from masprism_batch.trace import Trace
from masprism_batch.verdict.case import LogCase
from masprism_batch.verdict.correction import evidence

FEATURES = ("zero_training", "top_prob", "log_odds")  # what a fitted system's confidence reads (issue 48)
OWN = ("zero_training",)  # the zero-training confidence's own score, measured beside it
# every verdict feature `features` computes: a "fitted" calibration may name any of them (the first issue-48
# round's files read zero_training, gap and agrees)
KNOWN = ("zero_training", "top_prob", "log_odds", "gap", "agrees")
TINY = 1e-12  # the smallest share log_odds reads: a runner-up with no score is 27.6 nats behind, not infinitely


def linear_score(cal: dict, feats: dict) -> float:
    """A calibration's score of features `feats`: ((x - mean) / std) @ w over its `features` (no bias)."""
    x = (np.array([feats[f] for f in cal["features"]]) - np.asarray(cal["mean"])) / np.asarray(cal["std"])
    return float(x @ np.asarray(cal["w"]))


def zero_training_score(cal: dict | None, ev: dict[str, float]) -> float:
    """The zero-training calibration's logit of evidence `ev` (the order of its confidence, before its 1/n floor);
    without a calibration, the signed sum of the features in the units they carry."""
    if cal is None:
        return float(sum(cf.SIGNS[f] * ev[f] for f in cf.FEATURES))
    return linear_score(cal, ev) + float(cal["b"])


def features(c: LogCase, order: list[int], probs=None, scores=None, zero_cal: dict | None = None) -> dict:
    """The verdict features (KNOWN) of one verdict: `order` every step best first (order[0] blamed), `probs` a
    ranker's step probabilities, `scores` (array over steps) the label prior's; neither: the rule's MASPrism Score.

    - zero_training: the zero-training calibration's logit of the blamed step's own evidence;
    - top_prob: the blamed step's share of the scores that ordered the verdict (a ranker's probability; the
      rule's Score or the label prior's offset, shifted to start at 0, as a share of the steps' sum);
    - log_odds: log(top_prob / the next step's share), each share at least TINY;
    - gap: top_prob minus the next step's share (the rule's and the prior's: share x relative margin);
    - agrees: 1.0 where the verdict blames the zero-training rule's first candidate."""
    top = order[0]
    ev = evidence(c, [top] + [k for k in c.ranked if k != top])  # the zero-training evidence of this step
    if probs is not None:
        p = np.asarray(probs, dtype=np.float64)
        second = max((p[k] for k in order[1:2]), default=0.0)
        gap = float(p[top] - second) / max(float(p.sum()), 1e-12)
        q = p / max(float(p.sum()), 1e-12)
        p1, p2 = float(q[top]), (float(q[order[1]]) if len(order) > 1 else 0.0)
    else:
        v = evidence(c, order, None, scores)  # share x relative margin = (s1 - s2) / sum of the candidates'
        gap = v["top_share"] * v["margin"]
        p1, p2 = _shares(c, order, scores)
    return {"zero_training": zero_training_score(zero_cal, ev), "top_prob": p1,
            "log_odds": math.log(max(p1, TINY)) - math.log(max(p2, TINY)), "gap": float(gap),
            "agrees": float(bool(c.ranked) and top == c.ranked[0])}


def _shares(c: LogCase, order: list[int], scores) -> tuple[float, float]:
    """(blamed step's, next step's) share of the scores over `order`: the label prior's `scores` (array over
    steps) shifted to start at 0 where some are negative, else MASPrism's Score (negative read as 0); equal
    shares where every score is 0."""
    if scores is not None:
        s = np.array([float(scores[k]) for k in order], dtype=np.float64)
    else:
        by = {r["step"]: max(float(r.get("score") or 0.0), 0.0) for r in c.rows}
        s = np.array([by.get(k, 0.0) for k in order], dtype=np.float64)
    s = s - s.min() if s.size and s.min() < 0 else s
    tot = float(s.sum())
    q = s / tot if tot > 0 else np.full(len(s), 1.0 / max(len(s), 1))
    return float(q[0]), (float(q[1]) if len(q) > 1 else 0.0)


def zero_training_confidence(c: LogCase, top: int, zero_cal: dict | None, score: float | None = None):
    """What the zero-training calibration says of blaming `top` (the confidence a log of an unfitted system gets
    for the rule's verdict; `score`: its zero_training feature, when already computed): None without one."""
    if zero_cal is None:
        return None
    if score is None:
        score = zero_training_score(zero_cal, evidence(c, [top] + [k for k in c.ranked if k != top]))
    return max(float(1 / (1 + np.exp(-np.clip(score, -50, 50)))), 1.0 / max(len(c.trace.steps), 1))


def apply(cal: dict, c: LogCase, order: list[int], probs=None, scores=None) -> float | None:
    """The confidence of one verdict under a system's calibration of kind "ranked" (`fit` since issue 59),
    "fitted" (files before it) or "evidence" (the verdict's own evidence: ranker files written before issue 48)."""
    if cal.get("kind") in ("fitted", "ranked"):
        x = features(c, order, probs, scores, cal.get("zero_training"))
    else:
        x = evidence(c, order, probs, scores)
    return of_features(cal, x, len(c.trace.steps))


def of_features(cal: dict, feats: dict, n_steps: int) -> float | None:
    """The confidence under a system's calibration `cal` of a verdict whose features are `feats` (`features` for
    kinds "ranked" and "fitted", `evidence` for "evidence"), never below 1/n_steps."""
    if cal.get("kind") == "ranked":
        return ranked_confidence(cal, feats, n_steps)
    return confidence(cal, feats, n_steps)


def percentile(cal: dict, s: float) -> float:
    """Where score `s` falls among the held-out verdicts' scores of a "ranked" calibration: linear between its
    `knots` (sorted held-out scores) and their mid-rank percentiles `u`; past the ends it goes on at the knots'
    mean slope and bends toward 0 or 1 without reaching them (a tail gap / (1 + distance x slope / gap), slow
    enough that far scores stay apart in floating point), so a score beyond every held-out one still ranks above
    (below) them and above (below) the scores nearer the end, by less and less: clamped at 0 and 1, such scores
    tied, and a fit on few labels ranked its test logs worse than its score did."""
    k, u = cal["knots"], cal["u"]
    if k[0] <= s <= k[-1]:
        return float(np.interp(s, k, u))
    slope = (u[-1] - u[0]) / (k[-1] - k[0])
    if s > k[-1]:
        gap = 1.0 - u[-1]
        return 1.0 - gap / (1.0 + (s - k[-1]) * slope / gap) if gap > 0 else float(u[-1])
    gap = u[0]
    return gap / (1.0 + (k[0] - s) * slope / gap) if gap > 0 else float(u[0])


def ranked_confidence(cal: dict, feats: dict, n_steps: int) -> float:
    """P(right) of one verdict under a "ranked" calibration (fit/verdict_confidence.rank_calibration): its
    features' score ((x - mean) / std) @ w, its percentile among the held-out verdicts' scores (`percentile`),
    then sigmoid(a (percentile - 1/2) + b); never below 1/n_steps. The percentile of a new verdict is spread
    evenly over [0, 1] whatever the scores' skew on average, so how far the confidences spread is set by `a` and
    `b`; on few held-out scores a gap between them bunches new verdicts into a narrower band of percentiles."""
    u = percentile(cal, linear_score(cal, feats))
    return max(_sigmoid(float(cal["a"]) * (u - 0.5) + float(cal["b"])), 1.0 / max(n_steps, 1))


def rule_confidence(t: Trace, rows: list[dict], ranking: mp.Ranking, cal: dict | None) -> float | None:
    """Calibrated confidence of a zero-training verdict from its own evidence (method/confidence.py), never
    below 1/(steps); `cal`: the policy's fallback calibration (fitted on the dev systems, leave-one-system-out
    measured in docs/results.md)."""
    if not ranking.ranked:
        return None
    c = LogCase(t, rows, [], [], list(ranking.ranked))
    feats = evidence(c, list(ranking.ranked)) if cal else None
    return confidence(cal, feats, len(t.steps))


def confidence(cal: dict | None, feats: dict | None, n_steps: int) -> float | None:
    """P(right) of one verdict from its evidence features `feats` under an evidence calibration `cal`
    (fit_evidence), never below 1/n_steps: a uniform guess among the log's steps does that well."""
    if cal is None or feats is None:
        return None
    return max(_sigmoid(linear_score(cal, feats) + cal["b"]), 1.0 / max(n_steps, 1))


def flat_rate(cal: dict) -> float | None:
    """The one P(right) every verdict gets where the calibration kept no feature (fit_evidence drops the evidence
    when its scale comes out negative; a "ranked" one: a scale of 0), before the 1/n floor; None where the
    evidence ranks verdicts."""
    if cal.get("kind") == "ranked":
        return None if cal.get("a") else _sigmoid(float(cal["b"]))
    return None if any(cal.get("w") or []) else _sigmoid(float(cal["b"]))


def _sigmoid(s: float) -> float:
    return 1 / (1 + math.exp(-max(min(s, 50.0), -50.0)))

"""The confidence of a fitted system's verdict: everything that ranks, calibrated on its own held-out folds.

A fitted ranker's top probability alone ordered nothing within a system (held-out AUROC 0.50-0.55, issue 48),
while the zero-training confidence, read from the log's own evidence, ranked a known system's verdicts. A fitted
verdict's confidence therefore reads (FEATURES, each oriented so that larger should mean more confident):

- zero_training: the zero-training confidence's score (its calibration's logit, `method/confidence.py`'s
  evidence under MASPrism's Score) of the blamed step: how clearly the log's signals single it out;
- gap: how far the blamed step is ahead of the next under the scores that ordered the verdict (a ranker's
  step probabilities: p1 - p2; the rule's or the label prior's scores as a share of their sum);
- agrees: whether the verdict blames the zero-training rule's first candidate (ranker and rule agree).

`fit` (fit/system.py) calibrates it on the system's held-out verdicts (its internal folds, never the logs a
verdict was fitted on): a logistic, non-decreasing in each feature (calibrate.fit_monotone), whose intercept
makes its level the system's held-out hit rate. It measures, on the same folds, the AUROC and the top-quarter
lift of this confidence (each fold's verdicts ordered by the weights of a calibration fitted on the other folds)
beside the zero-training confidence's, and ships whichever ranks better (the fitted one by MARGIN): where the
zero-training confidence wins, the shipped calibration reads it alone (the same order, at this system's level).
"""

from __future__ import annotations

import numpy as np

from masprism_batch.fit import fitting as ft
from masprism_batch.method import calibrate
from masprism_batch.method import confidence as cf

FEATURES = ("zero_training", "gap", "agrees")
OWN = ("zero_training",)  # the set kept when the zero-training confidence ranks at least as well
# how much higher the fitted confidence's held-out AUROC must be to be kept: it reads the zero-training score
# itself, so on a system where nothing else ranks it ties that one up to noise (+0.001 on a planted test), and
# a tie keeps the simpler confidence (chosen a priori, a round value, not tuned on the dev systems)
MARGIN = 0.02


def zero_training_score(cal: dict | None, ev: dict[str, float]) -> float:
    """The zero-training calibration's logit of evidence `ev` (the order of its confidence, before its 1/n floor);
    without a calibration, the signed sum of the features in the units they carry."""
    if cal is None:
        return float(sum(cf.SIGNS[f] * ev[f] for f in cf.FEATURES))
    x = (np.array([ev[f] for f in cal["features"]]) - np.asarray(cal["mean"])) / np.asarray(cal["std"])
    return float(x @ np.asarray(cal["w"])) + float(cal["b"])


def features(c: ft.FitCase, order: list[int], probs=None, scores=None, zero_cal: dict | None = None) -> dict:
    """FEATURES of one verdict: `order` every step best first (order[0] blamed), `probs` a ranker's step
    probabilities, `scores` (array over steps) the label prior's; neither: the rule's MASPrism Score."""
    top = order[0]
    ev = ft.evidence(c, [top] + [k for k in c.ranked if k != top])  # the zero-training evidence of this step
    if probs is not None:
        p = np.asarray(probs, dtype=np.float64)
        second = max((p[k] for k in order[1:2]), default=0.0)
        gap = float(p[top] - second) / max(float(p.sum()), 1e-12)
    else:
        v = ft.evidence(c, order, None, scores)  # share x relative margin = (s1 - s2) / sum of the candidates'
        gap = v["top_share"] * v["margin"]
    return {"zero_training": zero_training_score(zero_cal, ev), "gap": float(gap),
            "agrees": float(bool(c.ranked) and top == c.ranked[0])}


def zero_training_confidence(c: ft.FitCase, top: int, zero_cal: dict | None, score: float | None = None):
    """What the zero-training calibration says of blaming `top` (the confidence a log of an unfitted system gets
    for the rule's verdict; `score`: its zero_training feature, when already computed): None without one."""
    if zero_cal is None:
        return None
    if score is None:
        score = zero_training_score(zero_cal, ft.evidence(c, [top] + [k for k in c.ranked if k != top]))
    return max(float(1 / (1 + np.exp(-np.clip(score, -50, 50)))), 1.0 / max(len(c.trace.steps), 1))


def lift(conf, hits, fraction: float = 0.25) -> float | None:
    """Hit rate of the most confident `fraction` over the overall hit rate (1.0: no better than all)."""
    acc = calibrate.accuracy_at_coverage(conf, hits, (fraction, 1.0))
    top, every = acc[fraction][1], acc[1.0][1]
    return top / every if top is not None and every else None


def crossfit(F: np.ndarray, hits: np.ndarray, folds: np.ndarray, names) -> np.ndarray:
    """Each held-out verdict's score under the weights of a calibration fitted on the other folds' verdicts only:
    x @ (w / std), the part that orders verdicts. Its intercept and centring are left out: they are common to a
    fold's verdicts and differ between folds by the folds' hit rates, so with leave-one-out (each fold one log)
    they alone made a confidence that orders nothing look inverted (AUROC 0.0 on 9 logs: leaving a right verdict
    out lowers the level it is scored at)."""
    out = np.zeros(len(hits))
    for f in sorted(set(folds.tolist())):
        train, test = folds != f, folds == f
        cal = calibrate.fit_monotone(F[train], hits[train], names)
        # a feature constant on the training folds orders nothing: its weight (a floor or fitting noise) differs
        # between folds with the verdict left out, and times a constant it alone ranked identical verdicts
        varies = F[train].std(0) > 1e-9
        out[test] = F[test][:, varies] @ (np.asarray(cal["w"])[varies] / np.asarray(cal["std"])[varies])
    return out


def fit(feats: list[dict], hits: list[bool], folds, zero_cal: dict | None) -> tuple[dict, dict]:
    """(the calibration to ship, held-out figures) from a system's held-out verdicts: their FEATURES `feats`,
    whether each was right and the internal fold each was held out in. Figures: fitted_auroc /
    fitted_top_quarter_lift (scores cross-fitted over the folds), zero_training_auroc /
    zero_training_top_quarter_lift (its score as it comes: nothing of it is fitted on this system), auroc /
    top_quarter_lift (the kept one's) and confidence_kept ("fitted" | "zero-training")."""
    y = np.asarray(hits, dtype=bool)
    folds = np.asarray(folds)
    F = {names: np.array([[x[f] for f in names] for x in feats], dtype=np.float64).reshape(len(y), len(names))
         for names in (FEATURES, OWN)}
    fitted = crossfit(F[FEATURES], y, folds, FEATURES)
    zero = F[OWN][:, 0] if zero_cal is not None else crossfit(F[OWN], y, folds, OWN)
    fig = {"fitted_auroc": cf.auroc(fitted, y), "fitted_top_quarter_lift": lift(fitted, y),
           "zero_training_auroc": cf.auroc(zero, y), "zero_training_top_quarter_lift": lift(zero, y)}
    # the richer confidence only where it ranks these held-out verdicts better (by MARGIN) than the one a log of an
    # unfitted system gets (an unmeasured AUROC, every verdict right or every one wrong, keeps the simpler)
    zt = fig["zero_training_auroc"] if fig["zero_training_auroc"] is not None else 0.5
    better = fig["fitted_auroc"] is not None and fig["fitted_auroc"] > zt + MARGIN
    names = FEATURES if better else OWN
    cal = calibrate.fit_monotone(F[names], y, names)
    cal["zero_training"] = zero_cal
    kept = "fitted" if better else "zero-training"
    fig.update(confidence_kept=kept, auroc=fig[f"{kept.replace('-', '_')}_auroc"],
               top_quarter_lift=fig[f"{kept.replace('-', '_')}_top_quarter_lift"])
    return cal, fig


def apply(cal: dict, c: ft.FitCase, order: list[int], probs=None, scores=None) -> float | None:
    """The confidence of one verdict under a system's calibration of kind "fitted" (`fit` above) or "evidence"
    (the verdict's own evidence: ranker files written before issue 48)."""
    if cal.get("kind") == "fitted":
        x = features(c, order, probs, scores, cal.get("zero_training"))
    else:
        x = ft.evidence(c, order, probs, scores)
    return calibrate.confidence(cal, x, len(c.trace.steps))

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

from masprism_batch.method import calibrate
from masprism_batch.method import confidence as cf
from masprism_batch.verdict.confidence import FEATURES, OWN

# how much higher the fitted confidence's held-out AUROC must be to be kept: it reads the zero-training score
# itself, so on a system where nothing else ranks it ties that one up to noise (+0.001 on a planted test), and
# a tie keeps the simpler confidence (chosen a priori, a round value, not tuned on the dev systems)
MARGIN = 0.02


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



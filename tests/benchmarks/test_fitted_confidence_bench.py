"""benchmarks/accuracy/fitted_confidence.py (issue 48): the held-out figures of results.md's confidence table. The
AUROC is taken within each test fold (never across folds, whose calibrations differ) and averaged by pairs, the
top-quarter lift pools each fold's own most confident quarter, and the intervals resample the same logs for every
confidence so their difference is paired."""

import numpy as np
import pytest

from benchmarks.accuracy import fitted_confidence as fc
from masprism_batch.method import confidence as cf


def _folds(rng, n_folds, shift=0.0):
    out = []
    for _ in range(n_folds):
        n = int(rng.integers(5, 17))
        hits = list(rng.random(n) < 0.4)
        conf = [float(rng.random() + (0.5 if h else 0.0) + shift * f) for f, h in enumerate(hits)]
        out.append((conf, hits))
    return out


def test_fold_auroc_is_the_pair_weighted_mean_within_folds(np_rng):
    folds = _folds(np_rng, 7)
    got, w = [], []
    for c, h in folds:
        a = cf.auroc(c, h)
        if a is not None:
            got.append(a)
            w.append(sum(h) * (len(h) - sum(h)))
    assert fc.fold_auroc(folds) == pytest.approx(np.average(got, weights=w))
    # a constant added to one fold's confidences (another intercept) moves nothing: no pooling across folds
    lifted = [([x + 10.0 for x in c], h) if i == 0 else (c, h) for i, (c, h) in enumerate(folds)]
    assert fc.fold_auroc(lifted) == pytest.approx(fc.fold_auroc(folds))
    assert fc.fold_auroc([([0.3, 0.7], [True, True])]) is None  # one outcome only: nothing to rank


def test_fold_lift_pools_each_folds_most_confident_quarter(np_rng):
    folds = _folds(np_rng, 5)
    top, every = [], []
    for c, h in folds:
        k = int(np.ceil(len(h) / 4))
        top += [h[i] for i in np.argsort(-np.asarray(c), kind="stable")[:k]]
        every += h
    assert fc.fold_lift(folds) == pytest.approx(np.mean(top) / np.mean(every))
    perfect = [([1.0, 0.0, 0.0, 0.0], [True, False, False, False])]
    assert fc.fold_lift(perfect) == pytest.approx(4.0)


def test_intervals_hold_the_estimate_and_pair_the_difference(np_rng):
    folds = _folds(np_rng, 6)
    per = {fc.KINDS[0]: folds, fc.KINDS[1]: folds, fc.KINDS[2]: _folds(np_rng, 6)}
    ci = fc.intervals(per, n=200, seed=int(np_rng.integers(1 << 30)))
    lo, hi = ci[fc.KINDS[0]]
    assert lo <= fc.fold_auroc(folds) <= hi and hi - lo > 0
    assert ci["difference"] == (0.0, 0.0)  # the same confidence on the same resampled logs: no difference

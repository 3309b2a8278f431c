"""Issue 59: after a fit, the confidence a system keeps is never the one that ranked its own held-out folds worse
(a 20-label fit printed 0.40 for the fitted against 0.56 for the zero-training confidence and kept the 0.40), and
a confidence that ranks keeps a spread a team can sort by (every held-out confidence lay within 0.28-0.32)."""

import numpy as np
import pytest

from masprism_batch.fit import system as fs
from masprism_batch.fit import verdict_confidence as vc
from masprism_batch.method import calibrate
from masprism_batch.method import confidence as cf
from masprism_batch.verdict import confidence as vconf
from masprism_batch.verdict.rankfile import SystemRanker

ZERO_CAL = {"kind": "evidence", "features": list(cf.FEATURES), "mean": [0.0] * 6, "std": [1.0] * 6,
            "w": [1.0, 0, 0, 0, 0, 0], "b": 0.0}  # its logit is the feature itself


def _verdicts(rng, n, on, strength):
    """Verdict features with hits planted on feature `on` at `strength` (None: hits at random); LOO folds up
    to 20 verdicts, else 5 folds, as fit/fitting.folds_of."""
    X = np.column_stack([rng.normal(0, 1, n), rng.random(n), rng.exponential(1.0, n)])
    if on is None:
        hits = rng.random(n) < rng.uniform(0.2, 0.7)
    else:
        col = vc.FEATURES.index(on)
        z = (X[:, col] - X[:, col].mean()) / X[:, col].std()
        hits = rng.random(n) < 1 / (1 + np.exp(-(strength * z + rng.uniform(-1, 1))))
    if hits.all() or not hits.any():
        hits[0] = not hits[0]
    folds = np.arange(n) if n <= 20 else rng.permutation(n) % 5
    return [dict(zip(vc.FEATURES, x, strict=True)) for x in X], hits, folds, X


@pytest.mark.parametrize("trial", range(4))
def test_the_kept_confidence_never_ranked_its_own_folds_worse(trial, np_rng):
    """Whatever the hits follow (the zero-training score, the ranker's features, nothing), the kept confidence's
    AUROC on the fit's folds is the better of the two, and its calibration reads what was kept. Planted on the
    zero-training score, the fitted confidence (its sum with two noise features) ranks worse: the old fit kept
    it anyway."""
    seed = int(np_rng.integers(1 << 30))
    rng = np.random.default_rng(seed)
    on = [None, "zero_training", "top_prob", "log_odds"][trial]
    feats, hits, folds, _ = _verdicts(rng, int(rng.integers(12, 80)), on, float(rng.uniform(1, 5)))
    cal, fig = vc.fit(feats, hits, folds, ZERO_CAL)
    fa, za = fig["fitted_auroc"], fig["zero_training_auroc"]
    assert fig["auroc"] == max(fa, za), (seed, fig)
    assert fig["confidence_kept"] == ("zero-training" if za > fa else "fitted"), (seed, fig)
    assert cal["features"] == (list(vc.OWN) if za > fa else list(vc.FEATURES)), (seed, cal)
    pre = "fitted" if fig["confidence_kept"] == "fitted" else "zero_training"
    assert fig["auroc_interval"] == fig[f"{pre}_auroc_interval"]
    assert fig["top_quarter_lift"] == fig[f"{pre}_top_quarter_lift"]
    # the shipped confidence orders the verdicts as the kept score does (the calibration is monotone in it)
    conf = np.array([vconf.of_features(cal, x, 1000) for x in feats])
    kept_score = np.array([x["zero_training"] for x in feats]) if pre == "zero_training" else None
    if kept_score is not None:
        assert cf.auroc(conf, hits) == pytest.approx(cf.auroc(kept_score, hits)), seed


def test_zero_training_kept_where_the_fitted_one_ranks_worse(np_rng):
    """The issue's case: the ranker's features are noise, the zero-training score ranks: the zero-training
    confidence is kept, at this system's level, read through the file as a run reads it."""
    seed = int(np_rng.integers(1 << 30))
    rng = np.random.default_rng(seed)
    for _ in range(20):  # a draw where the noise does not happen to rank as well
        feats, hits, folds, _ = _verdicts(rng, 20, "zero_training", 3.0)
        for x in feats:
            x["top_prob"], x["log_odds"] = float(rng.random()), float(rng.exponential(3.0))
        cal, fig = vc.fit(feats, hits, folds, ZERO_CAL)
        if fig["zero_training_auroc"] > fig["fitted_auroc"]:
            break
    assert fig["confidence_kept"] == "zero-training" and cal["features"] == ["zero_training"], (seed, fig)
    assert cal["zero_training"] == ZERO_CAL and all(w >= 0 for w in cal["w"])
    conf = [vconf.of_features(cal, x, 1000) for x in feats]
    assert abs(np.mean(conf) - hits.mean()) < 0.12, (seed, np.mean(conf), hits.mean())


@pytest.mark.parametrize("target", [0.6, 0.7, 0.85])
def test_match_scale_reaches_the_measured_auroc(target, np_rng):
    """The calibration's scale is the one at which it would rank these verdicts as well as measured, its mean at
    the smoothed hit rate; never a scale that turns a feature around."""
    seed = int(np_rng.integers(1 << 30))
    rng = np.random.default_rng(seed)
    n = int(rng.integers(15, 300))
    X = rng.normal(0, 1, (n, 3)) * rng.uniform(0.5, 3, 3) + rng.normal(0, 5, 3)
    hits = rng.random(n) < rng.uniform(0.25, 0.75)
    hits[:2] = [True, False]
    cal = vc.match_scale(calibrate.fit_monotone(X, hits, vc.FEATURES, "equal"), X, hits, target)
    s = ((X - cal["mean"]) / cal["std"]) @ np.asarray(cal["w"]) + cal["b"]
    p = 1 / (1 + np.exp(-s))
    assert vc.expected_auroc(s, p) == pytest.approx(target, abs=0.005), seed
    assert p.mean() == pytest.approx((hits.sum() + 1) / (n + 2), abs=1e-6)
    assert len(set(cal["w"])) == 1 and cal["w"][0] > 0 and cal["matched_auroc"] == target
    # nothing to match: unchanged
    base = calibrate.fit_monotone(X, hits, vc.FEATURES, "equal")
    assert vc.match_scale(base, X, hits, 0.5) == base and vc.match_scale(base, X, hits, None) == base


def test_expected_auroc_is_the_auroc_of_drawn_outcomes(np_rng):
    seed = int(np_rng.integers(1 << 30))
    rng = np.random.default_rng(seed)
    u = rng.integers(0, 6, 40).astype(float)  # ties count half
    p = rng.uniform(0.05, 0.95, 40)
    draws = [cf.auroc(u, y) for y in (rng.random((4000, 40)) < p) if 0 < y.sum() < 40]
    assert vc.expected_auroc(u, p) == pytest.approx(np.mean(draws), abs=0.01), seed


def _noise(rng, feats):
    for x in feats:  # the ranker's features say nothing here (the fit: fitted 0.40, zero-training 0.56)
        x["top_prob"], x["log_odds"] = float(rng.random()), float(rng.exponential(3.0))
    return feats


def test_a_confidence_that_ranks_keeps_a_spread_after_a_20_label_fit(np_rng):
    """Draws of 20 held-out verdicts whose zero-training score ranks them (AUROC >= 0.65 on the fit's folds)
    while the ranker's features are noise: the kept confidence gives new verdicts of the same kind an
    interquartile range of at least 0.1 in at least 18 of 20 such draws. The old fit kept the fitted confidence
    whatever it ranked, its scale pulled toward 0: an IQR under 0.1 in about one such draw in four (issue 59:
    0.28-0.32 for every log), 3 or more of 20 in ~91% of runs. The shipped one falls under 0.1 in about 1 draw of
    2,000 (a 20-verdict calibration is coarse; 2026-12-04, 201 seeds), so "every draw" failed ~1 run in 200."""
    seed = int(np_rng.integers(1 << 30))
    rng = np.random.default_rng(seed)
    checked, narrow = 0, []
    for _ in range(400):
        feats, _, folds, _ = _verdicts(rng, 20, "zero_training", 1.0)
        hits = rng.random(20) < 1 / (1 + np.exp(-rng.uniform(0.8, 2.0) * np.array([x["zero_training"] for x in feats])))
        if not 5 <= hits.sum() <= 15:
            continue
        cal, fig = vc.fit(_noise(rng, feats), hits, folds, ZERO_CAL)
        if fig["zero_training_auroc"] < 0.65:
            continue
        new = _noise(rng, _verdicts(rng, 400, None, 0)[0])
        q1, q3 = np.percentile([vconf.of_features(cal, x, 1000) for x in new], [25, 75])
        if q3 - q1 < 0.1:
            narrow.append((checked, fig["auroc"], q1, q3))
        checked += 1
        if checked == 20:
            assert len(narrow) <= 2, (seed, narrow)
            return
    pytest.fail(f"fewer than 20 draws ranked (seed {seed})")


def test_fit_system_reports_and_ships_the_kept_confidence(synth, np_rng):
    """Through fit_system and the ranker entry: heldout names what was kept, the calibration reads it, and the
    confidence a run gives is that calibration's; the verdicts do not depend on it."""
    seed = int(np_rng.integers(1 << 30))
    cases = synth(int(np.random.default_rng(seed).integers(25, 45)), seed=seed)
    f = fs.fit_system(cases, "team/agents", zero_cal=ZERO_CAL)
    h, cal = f.entry["heldout"], f.entry["calibration"]
    assert h["auroc"] == max(h["fitted_auroc"], h["zero_training_auroc"]), (seed, h)
    assert cal["features"] == (list(vc.FEATURES) if h["confidence_kept"] == "fitted" else list(vc.OWN))
    sr = SystemRanker(f.entry, "m")
    for c in synth(5, seed=seed + 1):
        order, p, _, conf = sr.apply(c.trace, c.rows, c.ranked)
        assert 1 / len(c.trace.steps) <= conf < 1

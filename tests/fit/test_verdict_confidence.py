"""fit/verdict_confidence.py + calibrate.fit_monotone (issue 48): a fitted verdict's confidence reads the
zero-training evidence of its step, the ranker's probability of it and its log-odds over the next step, summed
with equal a-priori weights; it is monotone, never one number for every log, calibrated only on held-out verdicts,
and `fit` reports it beside the zero-training confidence on the same held-out verdicts."""

import json

import numpy as np
import pytest

from masprism_batch.fit import fitting as ft
from masprism_batch.fit import system as fs
from masprism_batch.fit import verdict_confidence as vc
from masprism_batch.method import calibrate
from masprism_batch.method import confidence as cf
from masprism_batch.verdict import confidence as vconf
from masprism_batch.verdict import correction as vcorr
from masprism_batch.verdict import rules
from masprism_batch.verdict.rankcheck import RankerFileError
from masprism_batch.verdict.rankfile import RankerFile, SystemRanker


def _planted(rng, n, on: str):
    """Verdict features with hits planted on feature `on` (the others noise); folds of 5."""
    X = np.column_stack([rng.normal(0, 1, n), rng.random(n), rng.exponential(1.0, n)])
    col = vc.FEATURES.index(on)
    z = (X[:, col] - X[:, col].mean()) / X[:, col].std()
    hits = rng.random(n) < 1 / (1 + np.exp(-(5.0 * z - 0.5)))  # strong: equal weights dilute it among 3
    feats = [dict(zip(vc.FEATURES, x, strict=True)) for x in X]
    return feats, hits, rng.permutation(n) % 5, X


@pytest.mark.parametrize("weights", ["fitted", "equal"])
def test_monotone_weights_and_never_one_number_for_every_log(weights, np_rng):
    seed = int(np_rng.integers(1 << 30))
    rng = np.random.default_rng(seed)
    n = int(rng.integers(47, 123))
    X = rng.random((n, 3))
    # hits decided against every feature (a threshold, not a coin: a drawn hit could, in about 3 of 1000 such
    # samples, leave one feature tied the right way and kept, which is a fit, not a failure): each weight (or the
    # equal weights' one scale) would be negative, so every one is dropped ...
    hits = X.sum(1) < 1.5
    cal = calibrate.fit_monotone(X, hits, vc.FEATURES, weights)
    assert cal["kind"] == "fitted" and all(w > 0 for w in cal["w"]), (seed, cal["w"])
    conf = [vconf.confidence(cal, dict(zip(vc.FEATURES, x, strict=True)), 1000) for x in X]
    assert len(set(np.round(conf, 12))) > 1, seed  # ... and yet the logs do not all get one number
    # its level stays the held-out hit rate (smoothed), not the features' doing
    assert abs(np.mean(conf) - hits.mean()) < 0.1, (seed, np.mean(conf), hits.mean())
    # and it never falls as any feature grows
    base = dict(zip(vc.FEATURES, X[0], strict=True))
    for f in vc.FEATURES:
        assert vconf.confidence(cal, {**base, f: base[f] + 1.0}, 1000) >= vconf.confidence(cal, base, 1000)


def test_equal_weights_keep_every_feature_in_its_a_priori_direction(np_rng):
    """Hits planted on one feature, the others noise: the shipped calibration still weighs every feature the same
    (one scale, learned, >= 0), so no system's labels can turn a feature against its meaning."""
    seed = int(np_rng.integers(1 << 30))
    rng = np.random.default_rng(seed)
    feats, hits, folds, X = _planted(rng, int(rng.integers(150, 250)), str(rng.choice(vc.FEATURES)))
    cal = calibrate.fit_monotone(X, hits, vc.FEATURES, vc.WEIGHTS)
    assert cal["weights"] == "equal" and len(set(cal["w"])) == 1 and cal["w"][0] > 0, (seed, cal["w"])
    assert calibrate.fit_monotone(X, hits, vc.FEATURES)["weights"] == "monotone"


@pytest.mark.parametrize("on", vc.FEATURES)
def test_the_fitted_confidence_ranks_held_out_verdicts_and_reports_the_zero_training_one(on, np_rng):
    """Hits planted on the ranker's probability or log-odds: only the fitted confidence sees them and it ranks
    the held-out verdicts far better than the zero-training score; planted on the zero-training score itself,
    the fitted confidence (which sums it with two noise features) still ranks them, and the zero-training score
    alone ranks them better: that one is kept (issue 59: never the one that ranked the folds worse). Both figures
    are reported either way."""
    seed = int(np_rng.integers(1 << 30))
    rng = np.random.default_rng(seed)
    feats, hits, folds, X = _planted(rng, int(rng.integers(150, 250)), on)
    zero_cal = None  # without one the zero-training score is itself cross-fitted
    if on == "zero_training":  # the feature is the logit of this (given) zero-training calibration
        zero_cal = {"kind": "evidence", "features": list(cf.FEATURES), "mean": [0.0] * 6, "std": [1.0] * 6,
                    "w": [1.0, 0, 0, 0, 0, 0], "b": 0.0}
    cal, fig = vc.fit(feats, hits, folds, zero_cal)
    kept = "zero_training" if fig["zero_training_auroc"] > fig["fitted_auroc"] else "fitted"
    assert fig["confidence_kept"] == kept.replace("_", "-"), (seed, fig)
    assert cal["features"] == (list(vc.FEATURES) if kept == "fitted" else ["zero_training"]), (seed, fig)
    if on != "zero_training":
        assert kept == "fitted", (seed, fig)
    assert fig["auroc"] == fig[f"{kept}_auroc"] and fig["top_quarter_lift"] == fig[f"{kept}_top_quarter_lift"]
    assert fig["auroc"] > 0.6 and fig["top_quarter_lift"] > 1.1, (seed, fig)  # 0.62-0.99 in 600 draws
    assert len(set(cal["w"])) == 1 and cal["w"][0] > 0 and cal["zero_training"] == zero_cal, (seed, cal)
    if on == "zero_training":
        assert fig["zero_training_auroc"] > 0.8, (seed, fig)
    else:
        assert fig["fitted_auroc"] > fig["zero_training_auroc"] + 0.1, (seed, fig)
    # the shipped confidence orders the verdicts as the planted feature does, more often than not
    conf = np.array([vconf.of_features(cal, x, 1000) for x in feats])
    assert cf.auroc(conf, hits) > 0.6, seed


def test_leave_one_out_does_not_make_a_confidence_that_orders_nothing_look_inverted(np_rng):
    """Verdicts that the features cannot tell apart are scored 0.5 held out, with leave-one-out folds too (scored
    by its calibrated level, a log left out of its own calibration sits below it when right and above it when
    wrong: AUROC 0.0 on 9 real logs)."""
    seed = int(np_rng.integers(1 << 30))
    rng = np.random.default_rng(seed)
    n = int(rng.integers(9, 21))
    hits = np.arange(n) < max(2, n // 3)
    x = dict(zip(vc.FEATURES, rng.random(3), strict=True))  # every verdict's evidence the same
    _, fig = vc.fit([x] * n, hits, np.arange(n), None)
    assert fig["fitted_auroc"] == 0.5 and fig["zero_training_auroc"] == 0.5, (seed, fig)
    assert fig["confidence_kept"] == "fitted" and fig["auroc"] == 0.5


@pytest.mark.parametrize("weights", ["equal", "fitted"])
def test_a_held_out_fold_is_scored_by_a_calibration_that_never_saw_its_labels(weights, np_rng, monkeypatch):
    """Flipping one fold's labels never moves that fold's scores; with one weight per feature it moves the other
    folds' (the labels are read); with equal weights only the scale reads them, which crossfit leaves out."""
    monkeypatch.setattr(vc, "WEIGHTS", weights)
    seed = int(np_rng.integers(1 << 30))
    rng = np.random.default_rng(seed)
    feats, hits, folds, X = _planted(rng, 123, "log_odds")
    before = vc.crossfit(X, hits, folds, vc.FEATURES)
    flipped = hits.copy()
    flipped[folds == 2] = ~flipped[folds == 2]  # the labels of fold 2 only
    after = vc.crossfit(X, flipped, folds, vc.FEATURES)
    assert np.allclose(np.array(before)[folds == 2], np.array(after)[folds == 2]), seed
    moved = not np.allclose(np.array(before)[folds != 2], np.array(after)[folds != 2])
    if weights == "equal":
        assert not moved, seed
        return
    # one weight per feature reads the labels: the other folds' scores move, unless in every one of them both
    # label sets give the same relative weights (monotone weights clipped to their floor: ~1 draw in 30)
    same = []
    for f in sorted(set(folds.tolist()) - {2}):
        tr = folds != f
        w0 = np.asarray(vc.calibrate.fit_monotone(X[tr], hits[tr], vc.FEATURES, weights)["w"])
        w1 = np.asarray(vc.calibrate.fit_monotone(X[tr], flipped[tr], vc.FEATURES, weights)["w"])
        same.append(np.allclose(w0 / w0.sum(), w1 / w1.sum()))
    assert moved != all(same), seed


def test_crossfit_scores_do_not_carry_a_fold_s_scale(np_rng):
    """Folds whose calibrations differ only in how strongly the features predict (the scale) are scored on one
    scale: pooled, they rank as each fold does (the scale times uncentred features shifted whole folds)."""
    seed = int(np_rng.integers(1 << 30))
    rng = np.random.default_rng(seed)
    n = int(rng.integers(150, 250))
    X = np.column_stack([rng.normal(5, 1, n), rng.random(n) + 3, rng.exponential(1.0, n) + 10])
    folds = rng.permutation(n) % 5
    z = ((X - X.mean(0)) / X.std(0)).sum(1)
    strength = np.where(folds % 2 == 0, 0.3, 3.0)  # weak in some folds, strong in the others
    hits = rng.random(n) < 1 / (1 + np.exp(-strength * z))
    got = vc.crossfit(X, hits, folds, vc.FEATURES)
    assert cf.auroc(got, hits) == pytest.approx(cf.auroc(z, hits), abs=0.02), seed


def test_fit_ships_a_fitted_confidence_and_the_verdicts_do_not_move(synth, np_rng):
    """The system's entry carries the fitted calibration (with the zero-training one it reads) and both held-out
    figures; giving the fit a zero-training calibration moves the confidence only, never a verdict."""
    seed = int(np_rng.integers(1 << 30))
    cases = synth(int(np.random.default_rng(seed).integers(40, 60)), seed=seed)
    zero_cal = rules.read_fallback(None).calibration
    with_cal = fs.fit_system(cases, "team/agents", zero_cal=zero_cal)
    without = fs.fit_system(cases, "team/agents")
    e = with_cal.entry
    assert e["calibration"]["kind"] == "ranked" and e["calibration"]["zero_training"] == zero_cal
    h = e["heldout"]
    kept = "fitted" if h["fitted_auroc"] >= h["zero_training_auroc"] else "zero_training"  # issue 59's keep rule
    assert h["confidence_kept"] == kept.replace("_", "-")
    assert e["calibration"]["features"] == (list(vc.FEATURES) if kept == "fitted" else list(vc.OWN))
    for k in ("auroc", "top_quarter_lift", "fitted_auroc", "zero_training_auroc", "zero_training_top_quarter_lift"):
        assert k in h, k
    assert h["auroc"] == h[f"{kept}_auroc"] and h["auroc_interval"] == h[f"{kept}_auroc_interval"]
    assert h["verdicts"] == len(cases) and 0 < h["right"] < h["verdicts"], seed  # every log held out once
    for k in ("fitted_auroc_interval", "zero_training_auroc_interval", "fitted_minus_zero_training_interval"):
        lo, hi = h[k]
        assert -1 <= lo < hi <= 1, (seed, k, h[k])
    json.dumps(h, allow_nan=False)  # what the ranker file holds: plain numbers, never NaN
    same = {k for k in e if k not in ("calibration", "heldout")}
    assert {k: e[k] for k in same} == {k: without.entry[k] for k in same}, seed
    test = synth(30, seed=seed + 1)
    a, b = SystemRanker(e, "m"), SystemRanker(without.entry, "m")
    got = [a.apply(c.trace, c.rows, c.ranked) for c in test]
    for c, (order, _, agent, conf) in zip(test, got, strict=True):
        o2, _, a2, _ = b.apply(c.trace, c.rows, c.ranked)
        assert order == o2 and agent == a2, seed
        assert 1 / len(c.trace.steps) <= conf < 1
    assert len({round(g[3], 9) for g in got}) > 1, seed  # it orders the logs


def test_fitted_features_of_a_ranker_verdict(synth, np_rng):
    seed = int(np_rng.integers(1 << 30))
    rng = np.random.default_rng(seed)
    for c in synth(12, seed=seed):
        p = rng.dirichlet(np.ones(len(c.trace.steps)))
        order = sorted(range(len(p)), key=lambda k: (-p[k], k))
        x = vconf.features(c, order, p, None, None)
        assert set(x) == set(vconf.KNOWN)
        assert x["gap"] == pytest.approx(p[order[0]] - p[order[1]])
        assert x["agrees"] == float(order[0] == c.ranked[0])
        assert x["top_prob"] == pytest.approx(p[order[0]])
        assert x["log_odds"] == pytest.approx(np.log(p[order[0]] / p[order[1]]))
        order = list(c.ranked) + [k for k in range(len(c.trace.steps)) if k not in c.ranked]
        rule = vconf.features(c, order, None, None, None)  # the rule's own verdict agrees with itself
        assert rule["agrees"] == 1.0 and 0 <= rule["gap"] <= 1
        score = [max(float(next(r for r in c.rows if r["step"] == k).get("score") or 0.0), 0.0) for k in order]
        if sum(score) > 0:  # the rule's verdict: its Score's shares (a runner-up without one is TINY behind)
            assert rule["top_prob"] == pytest.approx(score[0] / sum(score))
            assert rule["log_odds"] == pytest.approx(np.log(max(score[0], 1e-12 * sum(score)))
                                                     - np.log(max(score[1], 1e-12 * sum(score))))
        # the label prior's offsets: shifted to start at 0 where some are negative (every one positive: as they
        # are; a draw of 6-9 normals is all positive about once in 100 logs, which the test once assumed away)
        off = rng.normal(0, 1, len(c.trace.steps)) + (rng.random() < 0.3) * 4.0
        prior = sorted(range(len(off)), key=lambda k: -off[k])
        got = vconf.features(c, prior, None, off, None)
        base = off - off.min() if off.min() < 0 else off
        sh = base / base.sum()
        assert got["top_prob"] == pytest.approx(sh[prior[0]]) and got["log_odds"] >= 0
        # its zero-training score is the logit of the confidence an unfitted system's log gets for that step
        cal = rules.read_fallback(None).calibration
        ev = vcorr.evidence(c, [order[0]] + [k for k in c.ranked if k != order[0]])
        want = vconf.confidence(cal, ev, len(c.trace.steps))
        got = vconf.features(c, order, p, None, cal)["zero_training"]
        assert vconf.zero_training_confidence(c, order[0], cal, got) == pytest.approx(want, abs=1e-12)
        assert vconf.zero_training_confidence(c, order[0], cal) == pytest.approx(want, abs=1e-12)


def test_a_fitted_calibration_with_a_negative_weight_or_a_bad_zero_training_part_is_refused(tmp_path, synth):
    f = fs.fit_system(synth(30, seed=7), "team/agents", zero_cal=rules.read_fallback(None).calibration)
    path = tmp_path / "r.json"
    RankerFile("m", {"team/agents": f.entry}, {}).write(path)
    RankerFile.read(path)  # as written: valid
    for where, tamper in (("calibration.w[0]", lambda c: c["w"].__setitem__(0, -0.5)),
                          ("calibration.zero_training.std[1]", lambda c: c["zero_training"]["std"].__setitem__(1, 0)),
                          ("calibration.features", lambda c: c["features"].__setitem__(0, "oracle"))):
        d = json.loads(path.read_text())
        tamper(d["systems"]["team/agents"]["calibration"])
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps(d))
        with pytest.raises(RankerFileError, match=where.replace("[", r"\[").replace("]", r"\]")):
            RankerFile.read(bad)


def test_a_file_written_before_issue_48_keeps_its_evidence_confidence(synth):
    """An entry whose calibration is of kind "evidence" still reads the verdict's own evidence."""
    cases = synth(20, seed=11)
    f = fs.fit_system(cases, "team/agents")
    ev = calibrate.fit_evidence([cf.vector(vcorr.evidence(c, c.ranked)) for c in cases],
                                [ft.hit(c, c.ranked[0]) for c in cases], cf.FEATURES)
    sr = SystemRanker({**f.entry, "calibration": ev}, "m")
    c = cases[0]
    order, p, _, conf = sr.apply(c.trace, c.rows, c.ranked)
    assert conf == pytest.approx(vconf.confidence(ev, vcorr.evidence(c, order, p), len(c.trace.steps)))


@pytest.mark.parametrize("n", [7, 47, 123])
def test_boot_aurocs_are_the_auroc_of_each_resample_and_paired(n, np_rng):
    """The vectorised bootstrap equals cf.auroc on the same resamples (ties counted half), drops resamples with
    one outcome, and draws the same resamples for every score (their difference is paired)."""
    y = np_rng.random(n) < np_rng.uniform(0.2, 0.6)
    y[:2] = [True, False]
    tied = np.round(np_rng.normal(size=n) + y, 1)  # many ties
    other = np_rng.normal(size=n)
    seed, draws = int(np_rng.integers(1 << 30)), int(np_rng.integers(20, 61))
    a, b = vc.boot_aurocs([tied, other], y, n=draws, seed=seed)
    idx = np.random.default_rng(seed).integers(0, n, (draws, n))
    keep = [i for i in idx if y[i].any() and not y[i].all()]
    assert a.tolist() == pytest.approx([cf.auroc(tied[i], y[i]) for i in keep], abs=1e-12)
    assert b.tolist() == pytest.approx([cf.auroc(other[i], y[i]) for i in keep], abs=1e-12)
    same = vc.boot_aurocs([tied, tied * 3.0 - 1.0], y, n=draws, seed=seed)
    assert vc.interval(same[0] - same[1]) == [0.0, 0.0]  # the same order on the same resamples
    perfect = vc.boot_aurocs([y + 0.01 * np_rng.random(n)], y, n=draws, seed=seed)[0]
    assert vc.interval(perfect) == [1.0, 1.0]
    assert vc.boot_aurocs([np.zeros(0)], np.zeros(0, dtype=bool))[0].size == 0
    assert vc.interval(np.zeros(0)) is None
    broken = tied.copy()
    broken[int(np_rng.integers(n))] = np.nan
    assert vc.boot_aurocs([broken], y, n=draws)[0].size == 0  # no figure, never a NaN in the ranker file


def test_boot_aurocs_hold_memory_on_many_labels(np_rng, monkeypatch):
    """Past MAX_CELLS resampled verdicts a fit draws fewer resamples (never under 200): its memory stays bounded
    (a few hundred verdicts always have both outcomes in every resample, so each draw gives one figure)."""
    n = int(np_rng.integers(300, 900))
    y = np_rng.random(n) < 0.4
    s = np_rng.normal(size=n) + y
    monkeypatch.setattr(vc, "MAX_CELLS", int(np_rng.integers(1000, 100 * n)))
    got = vc.boot_aurocs([s], y, n=1000)[0]
    assert len(got) == min(1000, max(200, vc.MAX_CELLS // n))

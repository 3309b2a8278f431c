"""method/confidence.py + calibrate.fit_evidence (issue 32, item 4): confidence from the verdict's own evidence,
moving only in each feature's a-priori direction, never below 1/(steps), and an AUROC that ranks."""

import numpy as np
import pytest

from masprism_batch.method import calibrate
from masprism_batch.method import confidence as cf
from masprism_batch.verdict import confidence as vconf
from masprism_batch.verdict import correction as vcorr


def _brute_auroc(conf, hits):
    pos = [c for c, h in zip(conf, hits, strict=True) if h]
    neg = [c for c, h in zip(conf, hits, strict=True) if not h]
    return np.mean([1.0 if p > q else 0.5 if p == q else 0.0 for p in pos for q in neg])


def test_auroc_matches_the_pairwise_definition(np_rng):
    rng = np_rng
    conf = list(np.round(rng.random(60), 1))  # rounded: ties count half
    hits = list(rng.random(60) < 0.4)
    assert cf.auroc(conf, hits) == pytest.approx(_brute_auroc(conf, hits))
    assert cf.auroc(conf, [True] * 60) is None  # one outcome only: no ranking to measure


@pytest.mark.parametrize("weights", ["equal", "fitted"])
def test_calibration_follows_the_evidence_and_never_inverts_it(weights, np_rng):
    """Hits planted on every feature in its a-priori direction but support, planted against it: confidence ranks
    them (AUROC well above 0.5), grows with the top share, and the feature the data ties to hits the wrong way
    cannot make the confidence fall as it grows."""
    seed = int(np_rng.integers(1 << 30))
    rng = np.random.default_rng(seed)
    n = 400
    X = rng.random((n, len(cf.FEATURES)))
    X[:, cf.FEATURES.index("log_steps")] = np.log(rng.integers(3, 80, n))
    z = (X - X.mean(0)) / X.std(0)
    sign = np.array([cf.SIGNS[f] for f in cf.FEATURES])
    sup = cf.FEATURES.index("support")
    logit = 0.8 * (z @ np.where(np.arange(len(sign)) == sup, 0, sign)) - 1.0 * z[:, sup] - 1
    hits = rng.random(n) < 1 / (1 + np.exp(-logit))
    cal = calibrate.fit_evidence(X, hits, cf.FEATURES, weights=weights)
    w = dict(zip(cf.FEATURES, cal["w"], strict=True))
    assert all(cf.SIGNS[f] * w[f] >= 0 for f in cf.FEATURES), (seed, w)
    conf = [vconf.confidence(cal, dict(zip(cf.FEATURES, x, strict=True)), 1000) for x in X]
    assert cf.auroc(conf, hits) > 0.6, seed
    base = dict(zip(cf.FEATURES, X[0], strict=True))
    up = vconf.confidence(cal, {**base, "top_share": base["top_share"] + 0.5}, 1000)
    assert up > vconf.confidence(cal, base, 1000), seed


def test_confidence_is_never_below_a_guess_among_the_steps(np_rng):
    rng = np_rng
    X = rng.random((50, len(cf.FEATURES)))
    cal = calibrate.fit_evidence(X, [False] * 49 + [True], cf.FEATURES)  # almost never right
    for n_steps in (2, 3, int(rng.integers(4, 9))):
        feats = dict(zip(cf.FEATURES, rng.random(len(cf.FEATURES)), strict=True))
        assert vconf.confidence(cal, feats, n_steps) >= 1 / n_steps


def test_evidence_of_a_verdict(synth, np_rng):
    """The features of a log's verdict: shares and margins of its own scores, the symptoms pointing at it."""
    seed = int(np_rng.integers(1 << 30))
    for c in synth(20, seed=seed):
        f = vcorr.evidence(c, c.ranked)
        assert set(f) == set(cf.FEATURES), seed
        assert 0 <= f["top_share"] <= 1 and 0 <= f["margin"] <= 1 and 0 <= f["support"] <= 1, (seed, f)
        assert f["log_steps"] == pytest.approx(np.log(len(c.trace.steps)))
        p = np.random.default_rng(seed).dirichlet(np.ones(len(c.trace.steps)))
        order = sorted(range(len(p)), key=lambda k: -p[k])
        g = vcorr.evidence(c, order, p)
        assert g["top_share"] == pytest.approx(p[order[0]]) and g["margin"] == pytest.approx(1 - p[order[1]] / p[order[0]])

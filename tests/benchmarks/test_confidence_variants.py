"""benchmarks/accuracy/confidence_variants.py: the measured AUROC is shrunk toward the prior by its sampling
variance (little with many labels, most with few), and a variant's test figures are read as the report reads
them."""

import numpy as np
import pytest

from benchmarks.accuracy import confidence_variants as cv


def test_shrink_weighs_the_measured_auroc_by_its_labels(np_rng):
    a, a0, tau = float(np_rng.uniform(0.55, 0.95)), float(np_rng.uniform(0.4, 0.6)), 0.1
    few = cv.shrink(a, np.arange(10) < 3, a0, tau)
    many = cv.shrink(a, np.arange(10_000) < 3000, a0, tau)
    assert a0 < few < many < a or a0 > few > many > a
    assert many == pytest.approx(a, abs=0.01)
    se2 = (3 + 7 + 1) / (12 * 3 * 7)
    assert few == pytest.approx(a0 + tau**2 / (tau**2 + se2) * (a - a0))
    assert cv.shrink(None, np.arange(10) < 3, a0, tau) is None
    assert cv.shrink(a, np.ones(10, dtype=bool), a0, tau) == a  # one outcome: no variance to weigh by


def test_stats_read_the_halves_by_confidence(np_rng):
    conf = np_rng.permutation(np.linspace(0.1, 0.9, 20))
    hits = conf > 0.5
    st = cv.stats(conf, hits)
    assert st["auroc"] == 1.0
    top = np.argsort(-conf)[:10]
    assert st["bias_top"] == pytest.approx(conf[top].mean() - 1.0)
    assert st["iqr"] == pytest.approx(np.subtract(*np.percentile(conf, [75, 25])))


def test_smoothed_auroc_is_one_pseudo_verdict_of_each_outcome_in_the_middle(np_rng):
    p, n = int(np_rng.integers(1, 6)), int(np_rng.integers(5, 40))
    hits = np_rng.permutation(np.arange(p + n) < p)
    a = float(np_rng.uniform(0.5, 1.0))
    got = cv.smoothed(a, hits)
    # U pairs of the real verdicts, half of each pseudo verdict's pairs with the other outcome, half their own pair
    assert got == pytest.approx((a * p * n + n / 2 + p / 2 + 0.5) / ((p + 1) * (n + 1)))
    assert 0.5 <= got < a  # toward 0.5, never past it
    assert cv.smoothed(1.0, np.arange(10_000) < 5000) == pytest.approx(1.0, abs=1e-3)  # many labels: as measured
    assert cv.smoothed(None, hits) is None

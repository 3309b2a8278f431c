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

"""benchmarks/accuracy/paired_caches.py (issue 47's before/after): the paired difference is taken log by log on
the logs both caches hold, its interval holds it, and the moved / gained / lost counts add up."""

import numpy as np
import pytest

from benchmarks.accuracy import paired_caches as pc


def test_paired_difference_log_by_log(np_rng):
    n = int(np_rng.integers(30, 80))
    ids = [f"t{i}" for i in range(n)]
    before = {i: float(np_rng.random() < 0.4) for i in ids}
    after = dict(before)
    flip = np_rng.choice(n, size=9, replace=False)
    for k in flip:
        after[ids[k]] = 1.0 - after[ids[k]]
    after["only-after"] = 1.0  # a log one cache lacks is not paired
    r = pc.paired(before, after, np.random.default_rng(int(np_rng.integers(1 << 30))))
    gained = sum(1 for k in flip if before[ids[k]] == 0.0)
    assert r["n"] == n and r["moved"] == 9 and r["gained"] == gained and r["lost"] == 9 - gained
    assert r["diff"] == pytest.approx((gained - (9 - gained)) / n)
    assert r["after"] - r["before"] == pytest.approx(r["diff"])
    assert r["diff_lo"] <= r["diff"] <= r["diff_hi"] and r["diff_hi"] > r["diff_lo"]
    same = pc.paired(before, dict(before), np.random.default_rng(0))
    assert (same["diff"], same["diff_lo"], same["diff_hi"], same["moved"]) == (0.0, 0.0, 0.0, 0)


def test_fractional_hits_of_the_fold_seeds_count_as_moved_by_sign(np_rng):
    before = {"a": 0.5, "b": 0.25, "c": 1.0}
    after = {"a": 0.625, "b": 0.25, "c": 0.875}
    r = pc.paired(before, after, np.random.default_rng(int(np_rng.integers(1 << 30))))
    assert (r["moved"], r["gained"], r["lost"]) == (2, 1, 1)
    assert r["diff"] == pytest.approx(0.0)

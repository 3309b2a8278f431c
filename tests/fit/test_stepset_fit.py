"""Issue 59: `fit` calibrates a system's step sets on its own held-out verdicts, in the order a run builds them."""

import math

import numpy as np
import pytest

from masprism_batch.config import PipelineConfig
from masprism_batch.fit import stepset_fit as sf
from masprism_batch.fit import system as fs
from masprism_batch.method import masprism as mp
from masprism_batch.verdict import rules
from masprism_batch.verdict import stepset as ss
from masprism_batch.verdict.decide import fitted_verdict
from masprism_batch.verdict.policy import VerdictPolicy
from masprism_batch.verdict.rankfile import RankerFile


def test_fit_writes_a_set_calibration_with_its_held_out_figures(synth):
    cases = synth(40, seed=5)
    e = fs.fit_system(cases, "team/agents").entry
    cal = e["stepset"]
    assert ss.check(cal) is None and cal["source"] == "fit"
    assert len(cal["scores"]) == len(cases) and cal["scores"] == sorted(cal["scores"])
    h = cal["heldout"]
    assert h["n"] == len(cases)
    for level in sf.LEVELS:
        assert 0 <= h[f"coverage_{level}"] <= 1 and 0 < h[f"share_{level}"] <= 1 and 0 < h[f"step0_share_{level}"] <= 1
    assert h["share_0.5"] <= h["share_0.8"] <= h["share_0.9"]
    assert cal["lead"] in ss.LEADS and cal["tail"] in ss.TAILS and cal["score"] in ss.SCORES


def test_fit_keeps_the_reading_order_whose_held_out_sets_are_smallest(synth):
    # the labelled step is the first step of every log, which the verdict's candidates rarely rank first: the
    # smallest sets lead with the blamed step (read_steps[0] is always it), then read from the start: two steps
    cases = synth(30, seed=8)
    for c in cases:
        c.gold[:] = [0]
    got = sf.fit_stepset(cases, [c.ranked[0] for c in cases], [None] * len(cases), "rule")
    assert (got["lead"], got["tail"]) == ("top", "index")  # rank or share: within the margin of each other here
    assert got["heldout"]["coverage_0.8"] >= 0.8 and got["heldout"]["share_0.8"] < 0.35
    # another order replaces the default only where its sets are smaller by the margin
    for c in cases:
        c.gold[:] = [c.ranked[0]]  # now the verdict's own order finds it first: any order does, the default stays
    got = sf.fit_stepset(cases, [c.ranked[0] for c in cases], [None] * len(cases), "rule")
    dev = ss.dev_calibration()
    assert (got["score"], got["tail"], got["lead"]) == (dev["score"], dev["tail"], dev["lead"])


def test_leave_one_out_equals_refitting_without_each_log(np_rng):
    for _ in range(20):
        n = int(np_rng.integers(2, 40))
        score = str(np_rng.choice(ss.SCORES))
        sizes = [int(x) for x in np_rng.integers(1, 30, n)]
        scores = [float(np_rng.integers(1, m + 1)) if score == "rank" else float(np_rng.integers(1, m + 1)) / m
                  for m in sizes]
        level = float(np_rng.choice([0.5, 0.8, 0.9]))
        hits, shares = [], []
        for i in range(n):  # brute force: the quantile of the others, applied to log i
            q = ss.quantile(scores[:i] + scores[i + 1:], level) if n > 1 else math.inf
            hits.append(scores[i] <= q)
            shares.append(ss.size_of(q, sizes[i], score) / sizes[i])
        assert sf.loo(scores, sizes, level, score) == pytest.approx((np.mean(hits), np.mean(shares)))


@pytest.mark.parametrize("kind", ["ranker", "prior", "rule"])
def test_the_order_fit_calibrates_is_the_order_a_run_reads(synth, kind):
    cases = synth(30, seed=11)
    entry = dict(fs.fit_system(cases, "team/agents").entry)
    assert entry["verdict"] == "ranker", "the planted signal should give a ranker"
    entry["verdict"] = kind  # the same fitted entry read as each kind of verdict
    policy = VerdictPolicy(True, RankerFile("", {"team/agents": entry}, {}), rules.Fallback())
    for c in synth(12, seed=12):
        base = mp.Ranking(list(c.ranked), {k: 5.0 - i for i, k in enumerate(c.ranked)},
                          {k: [] for k in c.ranked}, [], None)
        _, v = fitted_verdict(c.trace, c.rows, base, PipelineConfig(), policy)
        probs = np.array([v.probs[i] for i in range(len(v.probs))]) if v.probs is not None else None
        assert sf.verdict_order(kind, v.order[0], c.ranked, probs) == v.order


def test_a_run_with_the_fitted_file_uses_its_calibration(synth):
    entry = fs.fit_system(synth(30, seed=2), "team/agents").entry
    cal, by = ss.calibration_for(entry)
    assert cal is entry["stepset"] and by == "fit:team/agents"

"""Issue 59: `fit` calibrates a system's step sets on its own held-out verdicts, in the order a run builds them."""

import dataclasses
import math

import numpy as np
import pytest

from masprism_batch.config import PipelineConfig
from masprism_batch.fit import stepset_fit as sf
from masprism_batch.fit import system as fs
from masprism_batch.method import masprism as mp
from masprism_batch.verdict import reading_model as rm
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


def _one_agent_blamed(synth, k: int, seed: int):
    """Logs where the labelled step is the one step of a rare agent (an auditor) that the verdict's candidates
    rarely rank first: the label prior's order finds it second."""
    cases = synth(k, seed=seed, gold_by="random")
    rng = np.random.default_rng(seed)
    for c in cases:
        n = len(c.trace.steps)
        g = int(rng.integers(0, n))
        c.trace.steps[g] = dataclasses.replace(c.trace.steps[g], agent="Auditor")
        c.rows[g]["agent"] = "Auditor"
        c.gold[:] = [g]
        c.gold_agents[:] = ["auditor"]
    return cases


def test_fit_reads_the_label_priors_order_where_its_labels_blame_one_agent(synth):
    cases = _one_agent_blamed(synth, 30, seed=8)
    got = sf.fit_stepset(cases, [c.ranked[0] for c in cases], [None] * len(cases), "rule")
    assert (got["tail"], got["lead"]) == ("prior", "top") and got["agents"] == {"auditor": 30.0}
    assert ss.check(got) is None
    # held out (each log's own label out of the counts): the blamed step, then the auditor's one step
    assert got["heldout"]["coverage_0.8"] >= 0.8 and got["heldout"]["share_0.8"] < 0.3
    new = _one_agent_blamed(synth, 60, seed=9)  # new logs, read as a run reads them
    for c in new:
        order = ss.reading_order(list(c.ranked), len(c.trace.steps), got["tail"], c.rows, got["lead"], got["agents"])
        assert c.gold[0] in order[:2]
    sets = [ss.step_set(list(c.ranked), len(c.trace.steps), got, 0.8, "fit:x", c.rows) for c in new]
    assert np.mean([c.gold[0] in s.read for c, s in zip(new, sets, strict=True)]) >= 0.7
    # the verdict's own order finds every labelled step first: any order does, the default stays
    for c in cases:
        c.gold[:] = [c.ranked[0]]
    got = sf.fit_stepset(cases, [c.ranked[0] for c in cases], [None] * len(cases), "rule")
    dev = ss.dev_calibration()
    assert (got["score"], got["tail"], got["lead"]) == (dev["score"], dev["tail"], dev["lead"])
    assert "agents" not in got


def _random_calibration(np_rng):
    """(n logs, score kind, their sizes, their scores, a coverage level): fresh random held-out scores."""
    n = int(np_rng.integers(2, 40))
    score = str(np_rng.choice(ss.SCORES))
    sizes = [int(x) for x in np_rng.integers(1, 30, n)]
    scores = [float(np_rng.integers(1, m + 1)) if score == "rank" else float(np_rng.integers(1, m + 1)) / m
              for m in sizes]
    return n, score, sizes, scores, float(np_rng.choice([0.5, 0.8, 0.9]))


def test_the_choice_without_a_log_reads_nothing_of_it(np_rng):
    # criterion's per-log values equal the mean set share recomputed from scratch on the other logs only
    for _ in range(30):
        n, score, sizes, scores, level = _random_calibration(np_rng)
        whole, without = sf.criterion(scores, sizes, level, score)
        q = ss.quantile(scores, level)
        assert whole == pytest.approx(np.mean([ss.size_of(q, m, score) / m for m in sizes]))
        for i in range(n):
            others = scores[:i] + scores[i + 1:]
            rest = sizes[:i] + sizes[i + 1:]
            if not others:
                continue
            q = ss.quantile(others, level)
            assert without[i] == pytest.approx(np.mean([ss.size_of(q, m, score) / m for m in rest]))


def test_sets_chosen_on_the_labels_still_cover_new_logs(synth, np_rng):
    # no order is better than another here (labelled steps at random): a choice among them on 40 labels must
    # not buy sets that cover less than they state on new logs of the same system (24 fits x 150 new logs: over
    # 20 seeds of this test the mean was 0.80 and its spread 0.016 with 12 fits, so 0.76 is > 3 SD at 24)
    covered = []
    for _ in range(24):
        seed = int(np_rng.integers(0, 2**31))
        cases = _one_agent_blamed(synth, 190, seed=seed)
        for c in cases:  # half the labels blame the auditor, half a random step
            if np_rng.random() < 0.5:
                c.gold[:] = [int(np_rng.integers(0, len(c.trace.steps)))]
                c.gold_agents[:] = [c.trace.steps[c.gold[0]].agent.lower()]
        fit, new = cases[:40], cases[40:]
        cal = sf.fit_stepset(fit, [c.ranked[0] for c in fit], [None] * len(fit), "rule")
        covered += [c.gold[0] in ss.step_set(list(c.ranked), len(c.trace.steps), cal, 0.8, "x", c.rows).read
                    for c in new]
    assert np.mean(covered) >= 0.8 - 0.04


def test_leave_one_out_equals_refitting_without_each_log(np_rng):
    for _ in range(20):
        n, score, sizes, scores, level = _random_calibration(np_rng)
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


def test_with_enough_labels_fit_may_keep_a_reading_model_and_a_run_reads_it(synth):
    # the labelled step is the log's most surprising one (synth's planted signal), which the verdict's random
    # candidates miss: a model of the step rows learns it, the agent counts cannot
    cases = synth(sf.MIN_LEARNED + 10, seed=21)
    got = sf.fit_stepset(cases, [c.ranked[0] for c in cases], [None] * len(cases), "rule")
    assert got["tail"] == "learned" and ss.check(got) is None and "agents" not in got
    assert got["model"]["weights"][rm.FEATURES.index("nll")] > 0
    assert got["heldout"]["coverage_0.8"] >= 0.75 and got["heldout"]["share_0.8"] < got["heldout"]["step0_share_0.8"]
    new = synth(40, seed=22)
    sets = [ss.step_set(list(c.ranked), len(c.trace.steps), got, 0.8, "fit:x", c.rows) for c in new]
    assert np.mean([c.gold[0] in s.read for c, s in zip(new, sets, strict=True)]) >= 0.7
    # fewer labels: no model is tried
    few = synth(sf.MIN_LEARNED - 1, seed=21)
    assert sf.fit_stepset(few, [c.ranked[0] for c in few], [None] * len(few), "rule")["tail"] != "learned"

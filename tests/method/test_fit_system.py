"""method/fit.py + fit_system.py: a correction of the zero-training order, shrinkage by internal CV, fallback."""

import numpy as np

from masprism_batch.method import calibrate
from masprism_batch.method import fit as ft
from masprism_batch.method import fit_system as fs


def test_shrinkage_limit_is_the_rule(synth):
    """At a huge L2 the fitted order is the rule's: the top step is the rule's first candidate."""
    cases = synth(30, seed=1)
    m = ft.fit_correction(cases, 1e6)
    assert all(ft.top_of(m.probs(c)) == c.ranked[0] for c in cases)


def test_fit_learns_a_planted_signal_and_says_so(synth):
    cases = synth(60, seed=2)
    f = fs.fit_system(cases, "team/agents")
    assert f.verdict == "ranker" and f.entry["verdict"] == "ranker"
    e = f.estimates
    assert e["fitted"] > e["rule"] + 0.2 and e["folds"] == "5-fold"
    test = synth(40, seed=3)
    m = ft.Fitted(np.asarray(f.entry["weights"]), np.asarray(f.entry["mean"]), np.asarray(f.entry["std"]),
                  ft.Priors.from_json(f.entry["priors"]), f.entry["l2"])
    acc = np.mean([ft.hit(c, ft.top_of(m.probs(c))) for c in test])
    rule = np.mean([ft.hit(c, c.ranked[0]) for c in test])
    assert acc > rule + 0.2  # held out on logs the fit never saw


def test_falls_back_to_the_rule_when_it_cannot_beat_it(synth):
    cases = synth(12, seed=4, gold_by="rule")
    f = fs.fit_system(cases, "team/agents")
    assert f.verdict == "rule" and "weights" not in f.entry and f.estimates["rule"] == 1.0
    assert f.estimates["folds"] == "leave-one-out"


def test_label_priors_are_baselines_and_agent_prior_is_learned(synth):
    cases = synth(20, seed=5, gold_by="random", agent_gold="critic")
    f = fs.fit_system(cases, "team/agents")
    assert f.estimates["agent_prior"] == 1.0  # every label blames the critic, which every log has
    assert f.entry["agent_rule"] == "prior" and f.estimates["fitted_agent"] == 1.0


def test_priors_leave_the_training_log_out(synth):
    cases = synth(5, seed=6)
    pri = ft.Priors.count(cases)
    c = cases[0]
    loo = ft.design(c, pri, loo=True)[:, -3]
    full = ft.design(c, pri, loo=False)[:, -3]
    assert full[c.gold[0]] > loo[c.gold[0]]  # the log's own label is not in its training feature
    assert pri.n == 5  # and the counts are restored


def test_calibration_is_monotone_and_not_certain_from_few_labels():
    cal = calibrate.fit_platt([0.9, 0.8, 0.3, 0.2, 0.1], [1, 1, 0, 0, 0])
    assert calibrate.apply(cal, 0.9) > calibrate.apply(cal, 0.2)
    assert 0.001 < calibrate.apply(cal, 0.01) and calibrate.apply(cal, 0.99) < 0.99
    none = calibrate.fit_platt([0.5] * 5, [0] * 5)
    assert 0 < calibrate.apply(none, 0.5) < 0.3  # 0 of 5 right: low, never exactly 0
    acc = calibrate.accuracy_at_coverage([0.9, 0.1, 0.8, 0.2], [1, 0, 1, 1])
    assert acc[0.5] == (2, 1.0) and acc[1.0] == (4, 0.75)

"""fit/fitting.py + fit/system.py: a correction of the zero-training order, shrinkage by internal CV, fallback."""

import numpy as np

from masprism_batch.fit import fitting as ft
from masprism_batch.fit import system as fs
from masprism_batch.method import calibrate
from masprism_batch.verdict import case as vcase
from masprism_batch.verdict import correction as vcorr


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
    m = vcorr.Fitted(np.asarray(f.entry["weights"]), np.asarray(f.entry["mean"]), np.asarray(f.entry["std"]),
                  vcase.Priors.from_json(f.entry["priors"]), f.entry["l2"])
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
    assert f.entry["agent_rule"] == "prior|author" and f.estimates["fitted_agent"] == 1.0


def test_priors_leave_the_training_log_out(synth):
    cases = synth(5, seed=6)
    pri = vcase.Priors.count(cases)
    c = cases[0]
    loo = vcase.design(c, pri, loo=True)[:, -3]
    full = vcase.design(c, pri, loo=False)[:, -3]
    assert full[c.gold[0]] > loo[c.gold[0]]  # the log's own label is not in its training feature
    assert pri.n == 5  # and the counts are restored


def test_accuracy_at_coverage_takes_the_most_confident_first():
    acc = calibrate.accuracy_at_coverage([0.9, 0.1, 0.8, 0.2], [1, 0, 1, 1])
    assert acc[0.5] == (2, 1.0) and acc[1.0] == (4, 0.75)


def test_step_and_agent_verdicts_are_chosen_separately(synth, np_rng):
    """The rule is right on the step and the labels always blame one agent: the step keeps the rule, the agent
    moves to the label prior (and the reverse pairing keeps the rule's agent)."""
    seed = int(np_rng.integers(1 << 30))
    cases = synth(24, seed=seed, gold_by="rule", agent_gold="critic")
    f = fs.fit_system(cases, "team/agents", rule_agent="active")
    assert f.verdict == "rule" and f.entry["agent_rule"] == "prior|active", seed
    assert "weights" not in f.entry and f.entry["priors"]["agent"]  # the agent prior is kept, no ranker
    own = synth(24, seed=seed, gold_by="rule")  # the gold agent is the gold step's author: the rule's
    g = fs.fit_system(own, "team/agents", rule_agent="author")
    assert g.verdict == "rule" and g.entry["agent_rule"] == "author", seed


def test_few_labels_keep_the_rule_and_margins_are_in_standard_errors(synth, np_rng):
    seed = int(np_rng.integers(1 << 30))
    f = fs.fit_system(synth(fs.MIN_K - 1, seed=seed, agent_gold="critic"), "team/agents", rule_agent="active")
    assert f.verdict == "rule" and f.entry["agent_rule"] == "active", seed
    rng = np.random.default_rng(seed)
    b = list(rng.random(40) < 0.3)
    a = [True if not x and rng.random() < 0.15 else x for x in b]  # a few more hits than b, never fewer
    d = np.array(a, float) - np.array(b, float)
    t = d.mean() / (d.std(ddof=1) / np.sqrt(d.size)) if d.any() and d.std(ddof=1) > 0 else np.inf
    assert fs.beats(a, b, z=t * 0.99) == bool(d.any()) and not fs.beats(a, b, z=t * 1.01 if np.isfinite(t) else 1e9)
    assert not fs.beats(b, a, z=0.0)  # never a loser, whatever the margin
    # the agent's options with nothing to tune (its label prior, the author, the mixing rule) at one margin, the
    # step's (a ranker fitted on the labels) at least as strict
    assert fs.Z_PRIOR_AGENT == fs.Z_AGENT <= fs.Z


def test_prior_agent_falls_back_to_the_rule_agent(synth, np_rng):
    from masprism_batch.verdict import rules
    from masprism_batch.verdict.rankfile import SystemRanker

    seed = int(np_rng.integers(1 << 30))
    train = synth(12, seed=seed, agent_gold="auditor")  # an agent no log of this system has
    pri = vcase.Priors.count(train)
    c = synth(1, seed=seed + 1)[0]
    assert pri.top_agent(c.trace) is None
    active = rules.agent_verdict("active", c.trace, c.rows, c.ranked)
    assert vcorr.agent_pick("prior|active", c, None, c.ranked[0], pri) == active
    entry = {"system": "team/agents", "verdict": "rule", "rule": "faithful", "agent_rule": "prior|active",
             "priors": pri.to_json(), "calibration": None}
    assert SystemRanker(entry, "m").apply(c.trace, c.rows, c.ranked)[2] == active


def test_prior_step_verdict_gives_the_same_agent_whichever_order_the_stage_passes(synth, np_rng):
    """The run's stage applies a label-prior verdict a second time with the prior's step moved first: the agent
    (a zero-training agent rule that reads the order) must not change, so the benchmark measures what runs."""
    from masprism_batch.verdict.rankfile import SystemRanker

    seed = int(np_rng.integers(1 << 30))
    pri = vcase.Priors.count(synth(15, seed=seed, gold_by="random"))
    entry = {"system": "team/agents", "verdict": "prior", "rule": "faithful", "agent_rule": "mix:0.5",
             "priors": pri.to_json(), "calibration": None}
    sr = SystemRanker(entry, "m")
    for c in synth(20, seed=seed + 1):
        order, _, agent, _ = sr.apply(c.trace, c.rows, c.ranked)
        again = sr.apply(c.trace, c.rows, [order[0]] + [k for k in c.ranked if k != order[0]])
        assert again[0][0] == order[0] and again[2] == agent, seed


def test_prior_offset_limit_is_the_prior_and_rule_scale_is_learned(synth, np_rng):
    """Each order the ranker may correct is its own limit at huge L2; the learned rule scale grows where the rule
    is right and shrinks where it says nothing about the gold step."""
    seed = int(np_rng.integers(1 << 30))
    cases = synth(30, seed=seed, gold_by="random")
    m = ft.fit_correction(cases, 1e6, "prior")
    pri = vcase.Priors.count(cases)
    # the limit is the label prior re-ranking each log's own candidates (issue 32): one of them, never a fixed step
    assert all(ft.top_of(m.probs(c)) == vcorr.prior_verdict(c, pri)[0][0] and ft.top_of(m.probs(c)) in c.ranked
               for c in cases), seed
    # the label prior over every step: its limit is the most blamed index for every log (one of them where several
    # were blamed as often: the log's features, at this strength a tie-break, choose), a fixed position, which
    # fit_system never ships: test_labels_on_one_position_never_give_one_verdict_for_every_log
    most = max(pri.pos.values())
    tops = {i for i, v in pri.pos.items() if v == most}
    pos = ft.fit_correction(cases, 1e6, "position")
    long_enough = [c for c in cases if len(c.trace.steps) > max(tops)]
    assert long_enough and all(ft.top_of(pos.probs(c)) in tops for c in long_enough), (seed, tops)
    right = ft.fit_correction(synth(30, seed=seed, gold_by="rule"), 30.0, "rule_free")
    assert right.offset == "rule_free" and right.offset_scale > vcase.OFFSET_SCALE, (seed, right.offset_scale)
    # where the rule says nothing (random gold) the learned scale is 0 give or take chance: on 30 logs its sd was
    # ~0.5 and it reached 0.5 x OFFSET_SCALE = 1.0 in 3.5% of 1,000 draws (MASPRISM_TEST_SEED=8: 1.43); on 200
    # logs 0.65 was the largest of 600 draws (99% quantile 0.48, median 0.02)
    noise = ft.fit_correction(synth(200, seed=seed, gold_by="random"), 30.0, "rule_free")
    assert noise.offset_scale < 0.5 * vcase.OFFSET_SCALE, (seed, noise.offset_scale)
    try:
        ft.fit_correction(cases, 1.0, "bogus")
    except ValueError as exc:
        assert "rule_free" in str(exc)
    else:
        raise AssertionError("an unknown offset was accepted")


def test_a_system_whose_failures_sit_at_a_few_positions_is_fitted_beyond_its_prior(synth, np_rng):
    """Gold: step 1, 2 or 3, whichever carries a failure word (the others of the three carry none). The prior alone
    is right about a third of the time, the rule never is (its candidates avoid all three); the fitted ranker must
    beat both held out, applied through the ranker file entry, its verdicts spread over the three positions."""
    from masprism_batch.verdict.rankfile import SystemRanker

    seed = int(np_rng.integers(1 << 30))

    def make(k, s):
        out = synth(k, seed=s, gold_by="random")
        rng = np.random.default_rng(s)
        for c in out:
            g = int(rng.integers(1, 4))
            c.gold = [g]
            for j in (1, 2, 3):
                c.rows[j]["has_failure_word"] = j == g
            c.ranked = [j for j in c.ranked if j not in (1, 2, 3)] or [0]
        return out

    train = make(40, seed)
    f = fs.fit_system(train, "team/agents")
    assert f.verdict == "ranker" and f.entry["offset"] in vcorr.OFFSETS, (seed, f.estimates)
    sr = SystemRanker(f.entry, "m")
    test = make(60, seed + 1)
    got = [sr.apply(c.trace, c.rows, c.ranked)[0][0] for c in test]
    acc = np.mean([ft.hit(c, g) for c, g in zip(test, got, strict=True)])
    prior = np.mean([ft.hit(c, vcase.Priors.count(train).top_index()) for c in test])
    assert acc > prior + 0.2 and acc > 0.8 and fs.modal_share(got) <= 0.6, (seed, acc, prior, f.entry["offset"])


def test_labels_on_one_position_never_give_one_verdict_for_every_log(synth, np_rng):
    """Issue 32: every label blames step 1. A verdict that names step 1 for every log (what the label prior or a
    ranker leaning on it would ship) is set aside, the fit says the prior is all it learned, and the verdicts it
    ships differ between logs and stay among each log's own candidates or its evidence."""
    from masprism_batch.verdict.rankfile import SystemRanker

    seed = int(np_rng.integers(1 << 30))
    train = synth(30, seed=seed, gold_by="random")
    for c in train:
        c.gold = [1]
    f = fs.fit_system(train, "team/agents")
    assert f.estimates["modal_share"] <= fs.MAX_MODAL, (seed, f.estimates)
    assert any("label prior is all it learned" in n for n in f.entry["notes"]), (seed, f.entry["notes"])
    sr = SystemRanker(f.entry, "m")
    got = [sr.apply(c.trace, c.rows, c.ranked)[0][0] for c in synth(40, seed=seed + 1)]
    assert len(set(got)) > 1 and fs.modal_share(got) <= 0.85, (seed, got, f.verdict)

"""A trace's final verdict from its MASPrism ranking (the model stage's last step): a fitted ranker of its
system (`--ranker`: a `fit` file, or `packaged`, the benchmark systems' rankers, which `eval --dataset` names),
else the zero-training rule and agent rule, else the paper method. The system is the one the run names
(`--system`) or the log records, never inferred from its shape.
Every output (attributions, step_scores' final columns, exports, stats, report, demo) names this verdict.
"""

from __future__ import annotations

from dataclasses import dataclass

from masprism_batch.config import PipelineConfig
from masprism_batch.method import masprism as mp
from masprism_batch.method import ranker
from masprism_batch.trace import Trace
from masprism_batch.verdict import rules
from masprism_batch.verdict.confidence import rule_confidence
from masprism_batch.verdict.correction import agent_rule_used
from masprism_batch.verdict.policy import VerdictPolicy


@dataclass
class Verdict:
    """The final method's answer for one trace; every output (attributions, step_scores' final columns,
    exports, stats, report, demo) names this step and this agent.

    order: every ranked step, best first (order[0] = pred_step); probs: step -> probability (ranked method
    only); agent: pred_agent, chosen by `rule` ("author": the author of order[0]; "aggregate": the top of
    agent_ranking, summed step probabilities); agent_ranking: [{agent, score}], best first."""

    order: list[int]
    probs: dict[int, float] | None
    agent: str | None
    rule: str
    agent_ranking: list[dict]
    # what decided the step: "ranker:<system>" (a fitted ranker) or "rule:<name>" (zero-training)
    by: str = "rule:faithful"
    confidence: float | None = None  # calibrated P(pred_step is right); None where no calibration applies
    # the steps to read at the run's coverage (verdict/stepset.py), set once the step rows exist; None: not computed
    stepset: object | None = None


def fitted_verdict(t: Trace, rows: list[dict], base: mp.Ranking, cfg: PipelineConfig, policy: VerdictPolicy):
    """The verdict of the fitted ranker of this log's system under the run's `policy` (only a named ranker
    file, for the named system), else of the zero-training rule (the one that held up best across systems by
    leave-one-system-out, docs/results.md) reordering MASPrism's candidates. Step rows keep MASPrism's own
    score/rank (the features)."""
    sr = policy.ranker(t)
    rule = sr.rule if sr is not None else policy.fallback.rule
    order = rules.order(rule, rows, base.ranked)
    if sr is None or sr.verdict != "ranker":
        fitted = sr.apply(t, rows, order) if sr is not None else None  # once, on the rule's own order
        if sr is not None and sr.verdict == "prior":  # the label prior re-ranked the log's own candidates
            top = fitted[0][0]
            order = [top] + [k for k in order if k != top]
        ranking = mp.Ranking(order, base.scores, base.support, base.symptoms, base.nll, base.notes)
        v = masprism_verdict(t, ranking)
        if sr is not None:  # the system was fitted but its ranker did not beat the rule: its agent rule and
            _, _, v.agent, v.confidence = fitted  # calibration still apply
            v.rule, agents = agent_rule_used(sr, t, order)
            if agents and agents[0]["agent"] == v.agent:  # the rule's own ranking, so every output names one agent
                v.agent_ranking = agents
        else:
            v.rule = policy.fallback.agent_rule
            if order and v.rule != "author":  # the agent rule's own ranking, so every output names one agent
                v.agent_ranking = [{"agent": a, "score": float(x)} for a, x in rules.agent_ranking(v.rule, t, order)]
                v.agent = v.agent_ranking[0]["agent"] if v.agent_ranking else v.agent
            v.confidence = rule_confidence(t, rows, ranking, policy.fallback.calibration)
        v.by = sr.verdict_by if sr is not None else f"rule:{rule}"
        if sr is None and _no_symptom(base, order):  # said, not dressed as evidence: same step, same agent
            v.by, v.confidence = f"no_symptom:{rule}", 1.0 / max(len(t.steps), 1)
        return ranking, v
    full, probs, agent, conf = sr.apply(t, rows, order)
    p = {i: float(probs[i]) for i in range(len(probs))}
    agent_rule = sr.agent_rule
    if cfg.method.agent_aggregation is not None:  # an explicit override of the fitted agent rule
        agg = ranker.agent_scores(t, probs)
        agent = min(agg, key=lambda a: (-agg[a], a)) if cfg.method.agent_aggregation and agg else t.steps[full[0]].agent
        agent_rule = "aggregate" if cfg.method.agent_aggregation and agg else "author"  # named as it was chosen
    top = full[: cfg.method.top_k_candidates]
    support = {k: base.support.get(k, []) for k in top}
    ag = ranker.agent_scores(t, probs)
    agent_ranking = [{"agent": a, "score": float(v)} for a, v in sorted(ag.items(), key=lambda kv: (-kv[1], kv[0]))]
    verdict = Verdict(full, p, agent, agent_rule, agent_ranking, sr.verdict_by, conf)
    return mp.Ranking(top, {k: p[k] for k in top}, support, base.symptoms, base.nll), verdict


def _no_symptom(base: mp.Ranking, order: list[int]) -> bool:
    """No symptom step points to the blamed step: the zero-training rule's order then rests on its fallback
    (position), not on evidence (issue 51: the demo blamed the task prompt, step 0, with score 0 on 3 of 6
    logs). Its verdict is labelled `no_symptom:<rule>` and its confidence is a random pick's, 1/steps."""
    return bool(order) and not base.support.get(order[0])


def masprism_verdict(t: Trace, ranking: mp.Ranking) -> Verdict:
    """The paper method: the agent is the author of the top step; agents ranked by their best step's Score."""
    best: dict[str, float] = {}
    for k in ranking.ranked:
        a = t.steps[k].agent or ""
        best.setdefault(a, float(ranking.scores.get(k, 0.0)))
    top = ranking.ranked[0] if ranking.ranked else None
    return Verdict(list(ranking.ranked), None, t.steps[top].agent if top is not None else None, "author",
                   [{"agent": a, "score": v} for a, v in best.items()])


def agent_by(t: Trace, v: Verdict) -> str | None:
    """Why the blamed agent is who it is, beside the blamed step's author (attributions `agent_by`):
    "author" when the agent rule blames the author; else the rule, its evidence for the agent and, where they
    differ, the author's score under the same rule. None when nothing is blamed."""
    if not v.order or v.agent is None:
        return None
    author = t.steps[v.order[0]].agent
    if v.rule == "author":
        return "author: the blamed step's author"
    score = {r["agent"]: r["score"] for r in v.agent_ranking or []}
    base = v.rule.split("|", 1)[0]
    if base == "prior":
        why = "the agent this system's labels blame most often, among this log's agents"
    elif base in ("active", "most_active") or (base.startswith("guard:") and _most_steps(t, v.agent)):
        # active counts acting steps; most_active (and a guard that kept it) every step, as eval's baseline does
        steps = [s for s in t.steps if rules.acts(s)] or t.steps if base == "active" else t.steps
        n = {a: sum(s.agent == a for s in steps) for a in (v.agent, author)}
        why = f"most {'acting ' if base == 'active' else ''}steps ({n[v.agent]} of {len(steps)})"
        return f"{v.rule}: {why}" + ("" if v.agent == author else f"; the step's author {author}: {n[author]}")
    elif base.startswith("guard:"):
        why = f"at least {base.split(':', 1)[1]} of the top candidates' votes, over the most active agent"
    elif base == "aggregate":
        why = "highest summed step probability"
    elif base.startswith("mix:"):
        why = "highest share of acting steps and of the candidates' votes"
    else:
        why = "the agent rule's pick"
    if v.agent == author:
        return f"{v.rule}: {why} (also the step's author)"
    # scores only where agent_ranking is the ranking that chose the agent: a ranker's agent_ranking is its summed
    # step probabilities ("aggregate"); without step probabilities it is the zero-training agent rule's own
    own = base == "aggregate" if v.probs is not None else base not in ("prior", "author", "aggregate")
    ranked_by_rule = own and bool(v.agent_ranking) and v.agent_ranking[0]["agent"] == v.agent
    mine, theirs = score.get(v.agent), score.get(author)
    if ranked_by_rule and mine is not None and theirs is not None:
        return f"{v.rule}: {why} ({mine:.3g}; the step's author {author}: {theirs:.3g})"
    return f"{v.rule}: {why}; the step's author is {author}"


def _most_steps(t: Trace, agent: str) -> bool:
    """Whether `agent` wrote the most steps of `t` (a guard rule that kept its floor)."""
    n: dict[str | None, int] = {}
    for s in t.steps:
        n[s.agent] = n.get(s.agent, 0) + 1
    return n.get(agent, 0) == max(n.values(), default=0)

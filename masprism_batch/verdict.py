"""A trace's final verdict from its MASPrism ranking (the model stage's last step): a fitted ranker of its
system (`--ranker`, the packaged rankers), else the zero-training rule and agent rule, else the paper method.
Every output (attributions, step_scores' final columns, exports, stats, report, demo) names this verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .config import PipelineConfig
from .method import masprism as mp
from .method import ranker, rankfile, rules
from .trace import Trace


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
    # what decided the step (issue 23): "ranker:<system>" (a fitted ranker) or "rule:<name>" (zero-training)
    by: str = "rule:faithful"
    confidence: float | None = None  # calibrated P(pred_step is right); None where no calibration applies


def fitted_verdict(t: Trace, rows: list[dict], base: mp.Ranking, cfg: PipelineConfig, model_id: str | None = None):
    """The verdict of a fitted ranker for this log's system (method/rankfile.py), else of the zero-training rule
    (the one that held up best across systems by leave-one-system-out, docs/results.md) reordering MASPrism's
    candidates. Step rows keep MASPrism's own score/rank (the features)."""
    weights = cfg.method.ranker_weights
    sr = rankfile.ranker_for(weights, t, model_id)
    rule = sr.rule if sr is not None else _fallback_rule(weights)
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
            v.rule = sr.agent_rule
        else:
            v.rule = rules.fallback_agent_rule(weights)
            if order and v.rule != "author":  # the agent rule's own ranking, so every output names one agent
                v.agent_ranking = [{"agent": a, "score": float(x)} for a, x in rules.agent_ranking(v.rule, t, order)]
                v.agent = v.agent_ranking[0]["agent"] if v.agent_ranking else v.agent
            v.confidence = rule_confidence(t, rows, ranking, weights)
        v.by = sr.verdict_by if sr is not None else f"rule:{rule}"
        return ranking, v
    full, probs, agent, conf = sr.apply(t, rows, order)
    p = {i: float(probs[i]) for i in range(len(probs))}
    if cfg.method.agent_aggregation is not None:  # an explicit override of the fitted agent rule
        agg = ranker.agent_scores(t, probs)
        agent = min(agg, key=lambda a: (-agg[a], a)) if cfg.method.agent_aggregation and agg else t.steps[full[0]].agent
    top = full[: cfg.method.top_k_candidates]
    support = {k: base.support.get(k, []) for k in top}
    ag = ranker.agent_scores(t, probs)
    agent_ranking = [{"agent": a, "score": float(v)} for a, v in sorted(ag.items(), key=lambda kv: (-kv[1], kv[0]))]
    verdict = Verdict(full, p, agent, sr.agent_rule, agent_ranking, sr.verdict_by, conf)
    return mp.Ranking(top, {k: p[k] for k in top}, support, base.symptoms, base.nll), verdict


def rule_confidence(t: Trace, rows: list[dict], ranking: mp.Ranking, weights: str | None) -> float | None:
    """Calibrated confidence of a zero-training verdict from its own evidence (method/confidence.py; calibration
    fitted on the dev systems, leave-one-system-out measured in docs/results.md), never below 1/(steps)."""
    from .method import calibrate
    from .method import fit as ft

    if not ranking.ranked:
        return None
    c = ft.FitCase(t, rows, [], [], list(ranking.ranked))
    cal = rules.fallback_calibration(weights)
    feats = ft.evidence(c, list(ranking.ranked)) if cal and cal.get("kind") == "evidence" else None
    return calibrate.confidence(cal, ft.rule_confidence(c), feats, len(t.steps))


@lru_cache(maxsize=8)
def _fallback_rule(weights: str | None) -> str:
    return rules.fallback_rule(weights)  # read once per weights folder, not once per trace


def masprism_verdict(t: Trace, ranking: mp.Ranking) -> Verdict:
    """The paper method: the agent is the author of the top step; agents ranked by their best step's Score."""
    best: dict[str, float] = {}
    for k in ranking.ranked:
        a = t.steps[k].agent or ""
        best.setdefault(a, float(ranking.scores.get(k, 0.0)))
    top = ranking.ranked[0] if ranking.ranked else None
    return Verdict(list(ranking.ranked), None, t.steps[top].agent if top is not None else None, "author",
                   [{"agent": a, "score": v} for a, v in best.items()])

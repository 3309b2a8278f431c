"""Learned pieces the accuracy benchmark refits without the system it scores (bench_accuracy.py): label-free head
weights (method/heads.py) and the portable rankers (method/ranker.py), leave-one-system-out and 5-fold within a
system, and the zero-training rule chosen by leave-one-system-out.
"""

from __future__ import annotations

import logging

import numpy as np
from accuracy_cases import Case, _kfold_scores, available_rules, gold_of, headline_mean, rule_rows, score

from masprism_batch.method import heads as hd
from masprism_batch.method import masprism as mp
from masprism_batch.method import ranker as rk

log = logging.getLogger("bench_accuracy")


# ---- head weights ----------------------------------------------------------------------------------------------------
def fit_heads(cases: list[Case], model_id: str) -> hd.HeadWeights | None:
    samples = [hd.pairs(c.arr["A2h"].astype(np.float64), c.arr["D"]) for c in cases if "D" in c.arr and "A2h" in c.arr]
    samples = [s for s in samples if s[1].size]
    if not samples:
        return None
    shape = next(c.arr["A2h"].shape[:2] for c in cases if "A2h" in c.arr)
    try:
        return hd.fit(samples, shape, model_id)
    except ValueError as exc:  # too few pairs (small folds): the learned-head feature stays empty
        log.warning("head weights not fitted: %s", exc)
        return None


def with_learned(cases: list[Case], hw: hd.HeadWeights | None) -> None:
    """Fill each case's `attn_in_learned` step feature from the given head weights (None: empty)."""
    for c in cases:
        vals = np.full(len(c.rows), np.nan)
        if hw is not None and "A1h" in c.arr:
            vals = mp.inflow(hw.apply(c.arr["A1h"].astype(np.float64)), [int(x) for x in c.arr["symptoms"]])
        for r, v in zip(c.rows, vals, strict=True):
            r["attn_in_learned"] = None if not np.isfinite(v) else float(v)


# ---- rankers ---------------------------------------------------------------------------------------------------------
def fit_ranker(cases: list[Case], feats: list[str], l2: float, scope: str = "all") -> rk.Ranker:
    """Conditional logit on the other systems' labels; with scope "candidates" the softmax runs over the
    pass-1 candidates and symptoms only (traces whose gold is outside them are left out of the fit)."""
    cols = [rk.FEATURES.index(f) for f in feats]
    samples = []
    for c in cases:
        gold = gold_of(c.trace)
        if not gold:
            continue
        X = rk.step_features(c.trace, c.rows)[:, cols]
        if scope == "candidates":
            keep = [i for i, r in enumerate(c.rows) if r.get("is_candidate") or r.get("is_symptom")]
            gold = [keep.index(g) for g in gold if g in keep]
            if not gold:
                continue
            X = X[keep]
        samples.append((X, gold))
    m = rk.fit(samples, l2=l2, features=feats)
    m.scope = scope
    return m


def predict(model: rk.Ranker, cases: list[Case], agent_rule: str) -> dict[str, dict]:
    out = {}
    for c in cases:
        order, _, agent = rk.rerank(c.trace, c.rows, model, 5, agent_rule == "aggregate")
        out[c.trace.trace_id] = {"trace_id": c.trace.trace_id, "pred_step": order[0], "pred_agent": agent,
                                 "candidates": [{"step": i, "span_id": c.trace.steps[i].span_id} for i in order]}
    return out


def rules_loso(cases: list[Case], model_id: str) -> tuple[dict, dict[str, dict], dict[str, str]]:
    """Every zero-training rule scored with head weights fitted without the system scored (learned_heads), and
    the rule *chosen* by leave-one-system-out: for each system, the rule with the best headline mean on the
    other three is scored on it. Returns (flat scores of the chosen rule, {rule: flat}, {held system: rule})."""
    rules = available_rules(cases)
    per_rule: dict[str, dict] = {r: {} for r in rules}
    chosen_rows, picked = {}, {}
    for held in sorted({c.system for c in cases}):
        train = [c for c in cases if c.system != held]
        test = [c for c in cases if c.system == held]
        with_learned(cases, fit_heads(train, model_id))
        preds = {r: rule_rows(cases, r) for r in rules}
        best = max(rules, key=lambda r: (headline_mean(score(train, preds[r])[0]), r == "faithful"))
        picked[held] = best
        chosen_rows.update({c.trace.trace_id: preds[best][c.trace.trace_id] for c in test})
        for r in rules:
            per_rule[r].update({k: v for k, v in score(test, preds[r])[0].items() if k[0] == held})
    return score(cases, chosen_rows)[0], per_rule, picked


def loso(cases: list[Case], feats: list[str], l2: float, agent_rule: str, model_id: str, scope: str = "all") -> dict:
    """Each system scored by head weights and a ranker fitted on the other systems only."""
    rows = {}
    for held in sorted({c.system for c in cases}):
        train = [c for c in cases if c.system != held]
        test = [c for c in cases if c.system == held]
        hw = fit_heads(train, model_id)
        with_learned(train + test, hw)
        rows.update(predict(fit_ranker(train, feats, l2, scope), test, agent_rule))
    return score(cases, rows)[0]


def kfold(cases: list[Case], feats: list[str], l2: float, agent_rule: str, model_id: str, folds=5, seeds=(0, 1, 2)):
    """5-fold CV within each system (x seeds): mean and spread per (system, metric)."""
    def rows_of(_system, train, test) -> dict:
        if not test or not train:
            return {}
        with_learned(train + test, fit_heads(train, model_id))
        return predict(fit_ranker(train, feats, l2), test, agent_rule)

    return _kfold_scores(cases, rows_of, folds, seeds)


def agent_orders(cases: list[Case], rule: str) -> dict[str, list[int]]:
    """Each trace's steps best first under the zero-training step rule: what the agent rules read."""
    return {k: [x["step"] for x in r["candidates"]] for k, r in rule_rows(cases, rule).items()}

"""Learned pieces the accuracy benchmark refits without the system it scores (bench_accuracy.py): label-free head
weights (method/heads.py) and the portable rankers (a conditional logit over every step's features,
method/ranker.py, solved by the product's solver fit/clogit.py), leave-one-system-out and 5-fold within a
system, and the zero-training rule chosen by leave-one-system-out.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from benchmarks.accuracy.accuracy_cases import (
    FOLD_SEEDS,
    Case,
    _kfold_scores,
    available_rules,
    gold_of,
    headline_mean,
    rule_rows,
    score,
)
from masprism_batch.fit import clogit
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
        return hd.fit_weights(samples, shape, model_id)
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
# What any log has (issue 13): prefill signals, relative position, role/tool/code/failure-word marks. Left out:
# absolute step index and the turn-taking pattern of agents (agent_share, agent_first, agent_turn_log), which
# describe one system's choreography and did not carry across systems (docs/results.md).
PORTABLE = [
    "rel_pos", "is_first", "is_last", "nll1_z", "nll2_z", "h_norm", "attn_in_norm", "is_symptom",
    "is_candidate", "score_norm", "recip_rank", "has_failure_word", "failure_follows", "log_chars",
    "input_role", "is_tool", "has_code", "cf_z", "has_cf", "attn_learned_norm",
]


@dataclass
class Ranker:
    """A linear score per step over `features` (standardised by mean/std); softmax over a log's steps."""

    weights: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    features: list[str]

    def probs(self, X: np.ndarray) -> np.ndarray:
        s = ((X - self.mean) / self.std) @ self.weights
        e = np.exp(s - s.max())
        return e / e.sum()


def _features(c: Case, feats: list[str]) -> np.ndarray:
    return rk.step_features(c.trace, c.rows)[:, [rk.FEATURES.index(f) for f in feats]]


def fit_ranker(cases: list[Case], feats: list[str], l2: float) -> Ranker:
    """Conditional logit on the other systems' labels: maximise the mean over logs of log P(gold steps), with
    L2 `l2` / (number of logs) on the standardised weights (clogit.solve's Newton steps)."""
    samples = [(_features(c, feats), gold) for c in cases if (gold := gold_of(c.trace))]
    allx = np.concatenate([x for x, _ in samples])
    mean, std = allx.mean(0), allx.std(0)
    std = np.where(std > 1e-9, std, 1.0)
    xs = [(x - mean) / std for x, _ in samples]
    w = clogit.solve(xs, [g for _, g in samples], [np.zeros(len(x)) for x in xs],
                     np.full(len(feats), l2 / len(xs)))
    return Ranker(w, mean, std, list(feats))


def predict(model: Ranker, cases: list[Case], agent_rule: str) -> dict[str, dict]:
    """Each case's top 5 steps by the ranker; its agent: the most summed step probability ("aggregate"), else
    the top step's author."""
    out = {}
    for c in cases:
        probs = model.probs(_features(c, model.features))
        order = sorted(range(len(probs)), key=lambda i: (-probs[i], i))[:5]
        if agent_rule == "aggregate":
            ag = rk.agent_scores(c.trace, probs)
            agent = min(ag, key=lambda a: (-ag[a], a)) if ag else None
        else:
            agent = c.trace.steps[order[0]].agent if order else None
        out[c.trace.trace_id] = {"trace_id": c.trace.trace_id, "pred_step": order[0], "pred_agent": agent,
                                 "candidates": [{"step": i, "span_id": c.trace.steps[i].span_id} for i in order]}
    return out


def rules_loso(cases: list[Case], model_id: str) -> tuple[dict, dict[str, dict], dict[str, str]]:
    """Every zero-training rule scored with head weights fitted without the system scored (learned_heads), and
    the rule *chosen* by leave-one-system-out: for each system, the rule with the best headline mean on the
    other three is scored on it. Returns (flat scores of the chosen rule, {rule: flat}, {held system: rule})."""
    chosen_rows, per_rule, picked = rules_loso_rows(cases, model_id)
    return score(cases, chosen_rows)[0], per_rule, picked


def rules_loso_rows(cases: list[Case], model_id: str) -> tuple[dict, dict[str, dict], dict[str, str]]:
    """rules_loso, with the chosen rule's verdict rows (trace id -> row) in place of their scores."""
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
    return chosen_rows, per_rule, picked


def loso(cases: list[Case], feats: list[str], l2: float, agent_rule: str, model_id: str) -> dict:
    """Each system scored by head weights and a ranker fitted on the other systems only."""
    rows = {}
    for held in sorted({c.system for c in cases}):
        train = [c for c in cases if c.system != held]
        test = [c for c in cases if c.system == held]
        hw = fit_heads(train, model_id)
        with_learned(train + test, hw)
        rows.update(predict(fit_ranker(train, feats, l2), test, agent_rule))
    return score(cases, rows)[0]


def kfold(cases: list[Case], feats: list[str], l2: float, agent_rule: str, model_id: str, folds=5, seeds=FOLD_SEEDS):
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

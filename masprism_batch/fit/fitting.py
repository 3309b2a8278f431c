"""Fit a ranker to one system from its own labelled logs: the one fitting path of `masprism-batch fit`
and of benchmarks/accuracy/bench_accuracy.py / bench_learning_curve.py.

With k labelled logs a free linear ranker over ~20 features overfits, so the ranker is a *correction* of a simple
order: step scores are `offset + x·w`, where the offset is the zero-training rule's order (OFFSET_SCALE / position
for its candidates, 0 elsewhere; or that order at a scale learned with w), or the label prior's order (the most
often blamed positions), and w is shrunk toward 0 by an L2 penalty. Which offset and which strength are chosen
by internal cross-validation (leave-one-out up to 20 labels, else 5 folds). At infinite strength the ranker *is*
the order it corrects. Two label priors a team's system really has are features it may learn:
how often the blamed step sat at this index (and at this relative position), and how often this step's author
was the blamed agent, counted on the training labels (each training log's own label left out of its features).
Which verdict a system uses (rule, label prior or ranker) is chosen held out by fit/system.py, beside the
label-prior baselines fitted on the same labels; its held-out evidence calibrates the confidence (calibrate.py).
What a fitted entry does to a log at run time (its offsets, `Fitted.probs`) is verdict/correction.py.
"""

from __future__ import annotations

import logging

import numpy as np

from masprism_batch.fit import clogit
from masprism_batch.trace import norm_agent
from masprism_batch.verdict.case import OFFSET_SCALE, LogCase, Priors, design, rule_offset
from masprism_batch.verdict.correction import READ_OFFSETS, Fitted, offset_of

log = logging.getLogger(__name__)
L2_GRID = (30.0, 3.0, 0.3, 0.03)  # per-log L2 strengths tried by internal CV (the rule itself is the limit at infinity)
# the weakest shrinkage tried grows with the labels: strength x k >= this (k = 10: down to 0.3; k = 100: 0.03), so
# a handful of logs cannot buy a free ranker over ~25 features (its degrees of freedom grow with the data)
MIN_L2_TIMES_K = 3.0
FREE_PEN = 1e-3  # L2 on the learned rule scale: unpenalised in effect, but keeps Newton well posed


def fit_correction(cases: list[LogCase], l2: float, offset: str = "rule") -> Fitted:
    """Conditional logit over each log's steps (fit/clogit.py), fitted to its gold steps (a uniform target over
    them when there are several), L2 `l2` per log on w; `offset`: what w corrects (OFFSETS; "prior" only to measure what it did)."""
    if offset not in READ_OFFSETS:
        raise ValueError(f"unknown ranker offset {offset!r}; expected one of {', '.join(READ_OFFSETS)}")
    priors = Priors.count(cases)
    xs = [design(c, priors, loo=True) for c in cases]
    X = np.concatenate(xs)
    mu, std = X.mean(0), X.std(0)
    std = np.where(std > 1e-9, std, 1.0)
    scaled = [(x - mu) / std for x in xs]
    pen = np.full(X.shape[1], float(l2))
    if offset == "rule_free":  # the rule's order (scale 1) as one more column, its weight the learned scale
        scaled = [np.concatenate([x, rule_offset(len(c.trace.steps), c.ranked, 1.0)[:, None]], axis=1)
                  for x, c in zip(scaled, cases, strict=True)]
        offs = [np.zeros(len(x)) for x in xs]
        pen = np.append(pen, FREE_PEN)
    else:
        offs = [offset_of(offset, c, x, OFFSET_SCALE) for c, x in zip(cases, xs, strict=True)]
    w = clogit.solve(scaled, [c.gold for c in cases], offs, pen)
    if offset == "rule_free":
        return Fitted(w[:-1], mu, std, priors, l2, float(w[-1]), offset=offset)
    return Fitted(w, mu, std, priors, l2, offset=offset)


def folds_of(n: int, seed: int = 0) -> np.ndarray:
    """Leave-one-out up to 20 logs, else 5 folds (a fixed permutation: the same cases give the same folds)."""
    if n <= 20:
        return np.arange(n)
    return np.random.default_rng(seed).permutation(n) % 5


def top_of(p: np.ndarray) -> int:
    return int(np.argmax(p))  # first maximum: the earliest step on ties



def hit(c: LogCase, step: int) -> bool:
    return step in c.gold


def agent_hit(c: LogCase, agent: str | None) -> bool | None:
    if not c.gold_agents:
        return None
    return norm_agent(agent) in c.gold_agents
